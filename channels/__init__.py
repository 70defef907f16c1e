"""Channel adapters (Telegram, Discord, Slack, console, and `MemoryChannel` for tests) behind one interface;
text chunking and markup. The names below are its public surface, each imported on first use (no platform
SDK comes with them); its other modules are private by convention."""

from __future__ import annotations

from typing import TYPE_CHECKING

from routing.lazy import lazy_exports

if TYPE_CHECKING:  # what type checkers read; at run time each name is imported from _HOMES on first use
    from channels.base import (
        AccountSettings as AccountSettings,
        ActionEvent as ActionEvent,
        Attachment as Attachment,
        Button as Button,
        Capabilities as Capabilities,
        ChannelAdapter as ChannelAdapter,
        ChannelPlugin as ChannelPlugin,
        ChannelSetup as ChannelSetup,
        ChatTarget as ChatTarget,
        InboundMessage as InboundMessage,
        OnAction as OnAction,
        OnMessage as OnMessage,
        OutboundFile as OutboundFile,
        OutboundMessage as OutboundMessage,
        Poll as Poll,
    )
    from channels.health import (
        ChannelHealth as ChannelHealth,
        ChannelState as ChannelState,
        HealthSnapshot as HealthSnapshot,
    )
    from channels.memory import MemoryChannel as MemoryChannel, Sent as Sent
    from routing.errors import ChannelError as ChannelError

# Where each public name is defined: imported when first asked for.
_HOMES = {
    "AccountSettings": "channels.base",
    "ActionEvent": "channels.base",
    "Attachment": "channels.base",
    "Button": "channels.base",
    "Capabilities": "channels.base",
    "ChannelAdapter": "channels.base",
    "ChannelPlugin": "channels.base",
    "ChannelSetup": "channels.base",
    "ChatTarget": "channels.base",
    "InboundMessage": "channels.base",
    "OnAction": "channels.base",
    "OnMessage": "channels.base",
    "OutboundFile": "channels.base",
    "OutboundMessage": "channels.base",
    "Poll": "channels.base",
    "ChannelHealth": "channels.health",
    "ChannelState": "channels.health",
    "HealthSnapshot": "channels.health",
    "MemoryChannel": "channels.memory",
    "Sent": "channels.memory",
    "ChannelError": "routing.errors",
}

# Hidden from mypy, which reads the imports above (given a module __getattr__ it would accept any name at all).
__all__ = list(_HOMES)  # the public surface: written once, in the table above

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _HOMES)
