"""The channels Switchboard ships, as plugins: each platform's SDK is imported only when an account of it starts."""

from __future__ import annotations

from typing import Any

from channels.accounts import DiscordAccount, SlackAccount, TelegramAccount
from channels.base import AccountSettings, ChannelAdapter, ChannelPlugin, ChannelSetup
from channels.loopback import LoopbackAccount

__all__ = ["console", "discord", "loopback", "slack", "telegram"]


def _console(account: str, settings: Any, setup: ChannelSetup) -> ChannelAdapter:
    from channels.console import ConsoleAdapter

    return ConsoleAdapter(account)


def _loopback(account: str, settings: Any, setup: ChannelSetup) -> ChannelAdapter:
    from channels.loopback import LoopbackAdapter

    return LoopbackAdapter(account, settings)


def _discord(account: str, settings: Any, setup: ChannelSetup) -> ChannelAdapter:
    from channels.discord import DiscordAdapter

    return DiscordAdapter(account, settings)


def _slack(account: str, settings: Any, setup: ChannelSetup) -> ChannelAdapter:
    from channels.slack import SlackAdapter

    return SlackAdapter(account, settings)


def _telegram(account: str, settings: Any, setup: ChannelSetup) -> ChannelAdapter:
    from channels.telegram import TelegramAdapter

    return TelegramAdapter(account, settings, commands=setup.commands)


console = ChannelPlugin(AccountSettings, _console)
discord = ChannelPlugin(DiscordAccount, _discord)
loopback = ChannelPlugin(LoopbackAccount, _loopback)
slack = ChannelPlugin(SlackAccount, _slack)
telegram = ChannelPlugin(TelegramAccount, _telegram)
