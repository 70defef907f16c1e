"""Session keys: which conversation a message belongs to, as a lowercase `agent:<id>:...` string."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from routing.types import RoutingInput

DmScope = Literal["main", "per-peer", "per-channel-peer", "per-account-channel-peer"]
DM_SCOPES: tuple[DmScope, ...] = ("main", "per-peer", "per-channel-peer", "per-account-channel-peer")
UNKNOWN = "unknown"


def session_key(
    agent: str,
    source: RoutingInput,
    dm_scope: DmScope = "per-channel-peer",
    identity_links: Mapping[str, str] | None = None,
) -> str:
    """Build the session key for `source` handled by `agent`.

    `identity_links` maps `<channel>:<peer id>` (lowercase) to a canonical name that replaces the
    peer id of a direct chat, so one person shares a conversation across linked accounts.
    """
    peer = source.peer
    channel = source.channel or UNKNOWN
    if peer is None:
        key = f"agent:{agent}:main"
    elif peer.kind == "direct":
        peer_id = peer.id or UNKNOWN
        if identity_links and dm_scope != "main":
            peer_id = identity_links.get(f"{channel}:{peer_id}".lower(), peer_id)
        if dm_scope == "main":
            key = f"agent:{agent}:main"
        elif dm_scope == "per-peer":
            key = f"agent:{agent}:direct:{peer_id}"
        elif dm_scope == "per-channel-peer":
            key = f"agent:{agent}:{channel}:direct:{peer_id}"
        else:
            key = f"agent:{agent}:{channel}:{source.account or UNKNOWN}:direct:{peer_id}"
    else:
        key = f"agent:{agent}:{channel}:{peer.kind}:{peer.id or UNKNOWN}"
    if source.thread:
        key = f"{key}:thread:{source.thread}"
    return key.lower()
