"""Channel adapters from the config's `channels:` section, each built by its channel's plugin, and the WebChat accounts
(`web`)."""

from __future__ import annotations

import logging
from collections.abc import Collection
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from bot.config.settings import Config
from bot.intake.commands import COMMAND_MENU
from bot.plugins import PluginError, Plugins
from channels.base import ChannelAdapter, ChannelSetup

log = logging.getLogger(__name__)


def build_adapters(
    config: Config, plugins: Plugins, only: Collection[tuple[str, str]] | None = None
) -> tuple[list[ChannelAdapter], list[str]]:
    """The adapters to start, each built by its channel's plugin, and one line for each account that was skipped
    and why; `only` (channel, account) pairs, when given (a live reload restarting the accounts it changed)."""
    setup = ChannelSetup(commands=COMMAND_MENU)
    adapters: list[ChannelAdapter] = []
    skipped: list[str] = []
    for channel, section in config.channels.items():
        accounts: dict[str, Any] = section.get("accounts", {}) if isinstance(section, dict) else {}
        if not accounts:
            skipped.append(f"channels.{channel}: no accounts configured (add channels.{channel}.accounts.<id>)")
            continue
        for account, settings in accounts.items():
            if only is not None and (channel, str(account)) not in only:
                continue
            unset = config.unset_credentials(channel, str(account))
            if unset:
                names = ", ".join(sorted(set(unset)))
                skipped.append(f"channels.{channel}.accounts.{account}: skipped, {names} not set in the environment")
                continue
            try:
                plugin = plugins.channel(channel)
            except PluginError as error:
                skipped.append(f"channels.{channel}: {error}")
                break
            if plugin is None:
                skipped.append(f"channels.{channel}: unknown channel (known: {', '.join(plugins.channel_names())})")
                break
            try:
                account_settings = plugin.settings.model_validate(settings if isinstance(settings, dict) else {})
                adapters.append(plugin.adapter(str(account), account_settings, setup))
            except ValidationError as error:
                problems = "; ".join(
                    f"{'.'.join(str(part) for part in item['loc'])}: {item['msg']}"
                    for item in error.errors(include_url=False, include_input=False)
                )
                skipped.append(f"channels.{channel}.accounts.{account}: skipped, invalid settings: {problems}")
    return adapters, skipped


def web_adapters(config: Config, state_dir: Path) -> list[ChannelAdapter]:
    """The WebChat accounts, one per agent (none when `web.listen` is off; what the bot sends them is kept in
    `state_dir/web/<agent>` while it runs), and the HTTP API's, one per agent, when `http_api.keys` names a key."""
    if config.web.listen is None:
        return []
    from channels.http_api import ApiChannel
    from channels.web import WebChannel

    adapters: list[ChannelAdapter] = [WebChannel(agent.id, state_dir / "web" / agent.id) for agent in config.agents]
    if config.http_api.keys:
        adapters += [ApiChannel(agent.id) for agent in config.agents]
    return adapters
