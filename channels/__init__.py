"""Channel adapters (Telegram, Discord, Slack, console, and `MemoryChannel` for tests) behind one interface;
text chunking and markup. The names below are its public surface, each imported on first use (no platform
SDK comes with them); its other modules are private by convention."""

from __future__ import annotations

from typing import TYPE_CHECKING

from routing.lazy import lazy_exports

if TYPE_CHECKING:
    from channels.base import (
        AccountSettings,
        ActionEvent,
        Attachment,
        Button,
        Capabilities,
        ChannelAdapter,
        ChannelPlugin,
        ChannelSetup,
        ChatTarget,
        InboundMessage,
        OnAction,
        OnMessage,
        OutboundFile,
        OutboundMessage,
        Poll,
    )
    from channels.health import ChannelHealth, ChannelState, HealthSnapshot
    from channels.memory import MemoryChannel, Sent
    from routing.errors import ChannelError

__all__ = [
    "AccountSettings",
    "ActionEvent",
    "Attachment",
    "Button",
    "Capabilities",
    "ChannelAdapter",
    "ChannelError",
    "ChannelHealth",
    "ChannelPlugin",
    "ChannelSetup",
    "ChannelState",
    "ChatTarget",
    "HealthSnapshot",
    "InboundMessage",
    "MemoryChannel",
    "OnAction",
    "OnMessage",
    "OutboundFile",
    "OutboundMessage",
    "Poll",
    "Sent",
]

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
if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _HOMES, __all__)
