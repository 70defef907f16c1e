"""Channel adapters from the config's `channels:` section; a platform's SDK is imported only when it is used."""

from __future__ import annotations

import logging
from typing import Any

from pydantic import ValidationError

from bot.config import Config
from channels.base import ChannelAdapter

log = logging.getLogger(__name__)

PLANNED = ("telegram", "discord", "slack")


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
            if channel == "console":
                from channels.console import ConsoleAdapter

                adapters.append(ConsoleAdapter(str(account)))
            elif channel == "loopback":
                from channels.loopback import LoopbackAccount, LoopbackAdapter

                try:
                    adapters.append(LoopbackAdapter(str(account), LoopbackAccount.model_validate(settings)))
                except ValidationError as error:
                    skipped.append(f"channels.loopback.accounts.{account}: skipped, invalid settings: {error}")
            elif channel in PLANNED:
                skipped.append(
                    f"channels.{channel}.accounts.{account}: skipped, the {channel} adapter is not built yet"
                )
            else:
                skipped.append(f"channels.{channel}: unknown channel (known: console, loopback, {', '.join(PLANNED)})")
                break
    return adapters, skipped
