"""Routing: pick the agent and the session for an inbound message. Pure code, no I/O."""

from routing.resolver import TIERS, Binding, Router, binding_tier
from routing.session_keys import DmScope, session_key
from routing.types import (
    DEFAULT_ACCOUNT,
    Peer,
    PeerKind,
    Route,
    RoutingInput,
    normalize_account,
    normalize_agent_id,
    normalize_channel,
    normalize_id,
    normalize_peer_kind,
)

__all__ = [
    "DEFAULT_ACCOUNT",
    "TIERS",
    "Binding",
    "DmScope",
    "Peer",
    "PeerKind",
    "Route",
    "Router",
    "RoutingInput",
    "binding_tier",
    "normalize_account",
    "normalize_agent_id",
    "normalize_channel",
    "normalize_id",
    "normalize_peer_kind",
    "session_key",
]
