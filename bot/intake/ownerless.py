"""While the bot has no owner: the first direct message of each person it answers also says how to become one
(`/whoami`, then `bot owners add <channel>:<id>`), once, not with every answer."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from bot.config.http_api import API_CHANNEL
from bot.config.owners_file import owner_key
from bot.config.web import WEB_CHANNEL
from channels.base import InboundMessage

__all__ = ["OwnerlessHint", "ownerless_hint"]

# Channels whose people are not found by `/whoami`: the terminal's (the person runs the bot), the web pages' and
# the HTTP API's (logins and keys of the config).
_NOT_HINTED = frozenset({"console", WEB_CHANNEL, API_CHANNEL})


def ownerless_hint(message: InboundMessage) -> str:
    """What the sender of `message` is told: why it matters, and the two steps with their own id."""
    who = owner_key(message.channel, message.sender_id)
    return (
        "This bot has no owner yet, so nobody can approve commands or use the owner-only tools. If it is yours: "
        f"send /whoami here for your id, then run `bot owners add {who}` where the bot runs."
    )


class OwnerlessHint:
    """Decides who gets the hint: a direct message's sender, while the bot has no owner and its config is a file,
    once per person and account in this process (across restarts and processes, the outbox key keeps it to once
    while its entry is kept: `state.retention_days`)."""

    def __init__(self) -> None:
        self._told: set[tuple[str, str, str]] = set()

    def due(
        self, message: InboundMessage, owners: Collection[str], config_file: Path | None, command: str | None
    ) -> bool:
        """Whether to tell `message`'s sender now: never for `/whoami` (its answer says it already), nor for a bot
        whose config was not read from a file (a program's own: `bot owners add` has no file to add to)."""
        if owners or config_file is None or command == "whoami":
            return False
        if message.peer.kind != "direct" or message.channel in _NOT_HINTED or message.sender_is_bot:
            return False
        who = (message.channel, message.account, message.sender_id)
        if who in self._told:
            return False
        self._told.add(who)
        return True

    @staticmethod
    def key(message: InboundMessage) -> str:
        """The outbox key of the hint to this person on this account."""
        return f"ownerless:{message.channel}:{message.account}:{message.sender_id}"
