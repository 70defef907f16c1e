"""Channel adapters from the config's `channels:` section; a platform's SDK is imported only when it is used."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from bot.commands import COMMAND_MENU
from bot.config import Config
from channels.base import ChannelAdapter

log = logging.getLogger(__name__)


def _console(account: str, settings: dict[str, Any]) -> ChannelAdapter:
    from channels.console import ConsoleAdapter

    return ConsoleAdapter(account)


def _loopback(account: str, settings: dict[str, Any]) -> ChannelAdapter:
    from channels.loopback import LoopbackAccount, LoopbackAdapter

    return LoopbackAdapter(account, LoopbackAccount.model_validate(settings))


def _discord(account: str, settings: dict[str, Any]) -> ChannelAdapter:
    from channels.discord import DiscordAccount, DiscordAdapter

    return DiscordAdapter(account, DiscordAccount.model_validate(settings))


def _slack(account: str, settings: dict[str, Any]) -> ChannelAdapter:
    from channels.slack import SlackAccount, SlackAdapter

    return SlackAdapter(account, SlackAccount.model_validate(settings))


def _telegram(account: str, settings: dict[str, Any]) -> ChannelAdapter:
    from channels.telegram import TelegramAccount, TelegramAdapter

    return TelegramAdapter(account, TelegramAccount.model_validate(settings), commands=COMMAND_MENU)


# Each platform's module (and so its SDK) is imported only when an account of it is configured.
_FACTORIES: dict[str, Callable[[str, dict[str, Any]], ChannelAdapter]] = {
    "console": _console,
    "discord": _discord,
    "loopback": _loopback,
    "slack": _slack,
    "telegram": _telegram,
}


def build_adapters(config: Config) -> tuple[list[ChannelAdapter], list[str]]:
    """The adapters to start, and one line for each account that was skipped and why."""
    adapters: list[ChannelAdapter] = []
    skipped: list[str] = []
    for channel, section in config.channels.items():
        accounts: dict[str, Any] = section.get("accounts", {}) if isinstance(section, dict) else {}
        if not accounts:
            skipped.append(f"channels.{channel}: no accounts configured (add channels.{channel}.accounts.<id>)")
            continue
        for account, settings in accounts.items():
            unset = config.unset_credentials(channel, str(account))
            if unset:
                names = ", ".join(sorted(set(unset)))
                skipped.append(f"channels.{channel}.accounts.{account}: skipped, {names} not set in the environment")
                continue
            factory = _FACTORIES.get(channel)
            if factory is None:
                skipped.append(f"channels.{channel}: unknown channel (known: {', '.join(sorted(_FACTORIES))})")
                break
            try:
                adapters.append(factory(str(account), settings if isinstance(settings, dict) else {}))
            except ValidationError as error:
                problems = "; ".join(
                    f"{'.'.join(str(part) for part in item['loc'])}: {item['msg']}"
                    for item in error.errors(include_url=False, include_input=False)
                )
                skipped.append(f"channels.{channel}.accounts.{account}: skipped, invalid settings: {problems}")
    return adapters, skipped
