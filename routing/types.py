"""Routing value types (peer, routing input, route) and the normalization rules they obey."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Literal

PeerKind = Literal["direct", "group", "channel"]
PEER_KINDS: tuple[PeerKind, ...] = ("direct", "group", "channel")
DEFAULT_ACCOUNT = "default"
MAX_ACCOUNT_LENGTH = 64

_ACCOUNT_INVALID = re.compile(r"[^a-z0-9_-]+")
# Agent ids end up in session keys and file paths: nothing in them may escape either.
_AGENT_ID = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
_KIND_ALIASES: dict[str, PeerKind] = {"direct": "direct", "dm": "direct", "group": "group", "channel": "channel"}


@lru_cache(maxsize=1024)
def normalize_channel(channel: str | None) -> str:
    """Trim and lowercase a channel name (`" Telegram "` -> `"telegram"`)."""
    return (channel or "").strip().lower()


@lru_cache(maxsize=4096)  # few distinct accounts, seen on every message
def normalize_account(account: str | None) -> str:
    """Lowercase an account id, fold invalid runs into `-`, cap at 64; empty means `default`."""
    text = _ACCOUNT_INVALID.sub("-", (account or "").strip().lower()).strip("-")
    text = text[:MAX_ACCOUNT_LENGTH].rstrip("-")
    return text or DEFAULT_ACCOUNT


def normalize_agent_id(agent: str) -> str:
    """Lowercase an agent id and check it against `^[a-z0-9][a-z0-9_-]{0,63}$`; ValueError if it fails."""
    text = agent.strip().lower()
    if not _AGENT_ID.match(text):
        raise ValueError(
            "not a valid id: use letters, digits, '_' and '-', start with a letter or digit, at most 64 characters"
        )
    return text


def normalize_id(value: str | int | None) -> str | None:
    """Trim an id; an empty id counts as missing (None). Integers become their decimal text."""
    if value is None:
        return None
    text = str(value).strip()
    return text or None


def normalize_peer_kind(kind: str) -> PeerKind:
    """Read a peer kind, accepting `dm` as `direct`; anything else is a ValueError."""
    found = _KIND_ALIASES.get(kind.strip().lower())
    if found is None:
        raise ValueError(f"peer kind must be one of {', '.join(PEER_KINDS)} (got {kind!r})")
    return found


@dataclass(frozen=True, slots=True)
class Peer:
    """Who or where a message is in: a direct chat with a user, a group, or a channel."""

    kind: PeerKind
    id: str | None

    def __init__(self, kind: str, id: str | int | None) -> None:
        object.__setattr__(self, "kind", normalize_peer_kind(kind))
        object.__setattr__(self, "id", normalize_id(id))

    @classmethod
    def parse(cls, text: str) -> Peer:
        """Read `KIND:ID` (split at the first `:`, so `group:-100:topic:5` keeps its topic)."""
        kind, sep, peer_id = text.partition(":")
        if not sep:
            raise ValueError(f"peer must be KIND:ID, e.g. group:-1001234567890 (got {text!r})")
        return cls(kind, peer_id)


@dataclass(frozen=True, slots=True)
class RoutingInput:
    """What routing needs to know about one inbound message, normalized on construction."""

    channel: str
    account: str = DEFAULT_ACCOUNT
    peer: Peer | None = None
    parent_peer: Peer | None = None
    guild: str | None = None
    team: str | None = None
    member_roles: tuple[str, ...] = field(default=())
    thread: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "channel", normalize_channel(self.channel))
        object.__setattr__(self, "account", normalize_account(self.account))
        object.__setattr__(self, "guild", normalize_id(self.guild))
        object.__setattr__(self, "team", normalize_id(self.team))
        object.__setattr__(self, "thread", normalize_id(self.thread))
        roles = (normalize_id(role) for role in self.member_roles)
        object.__setattr__(self, "member_roles", tuple(role for role in roles if role))


@dataclass(frozen=True, slots=True)
class Route:
    """The answer: which agent handles the message, in which session, and which rule decided."""

    agent: str
    session_key: str
    matched_by: str
