"""Channel adapters (Telegram, Discord, Slack, console, and `MemoryChannel` for tests) behind one interface;
text chunking and markup. The names below are its public surface, each imported on first use (no platform
SDK comes with them); its other modules are private by convention."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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
        OutboundMessage,
    )
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
    "ChannelPlugin",
    "ChannelSetup",
    "ChatTarget",
    "InboundMessage",
    "MemoryChannel",
    "OnAction",
    "OnMessage",
    "OutboundMessage",
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
    "OutboundMessage": "channels.base",
    "MemoryChannel": "channels.memory",
    "Sent": "channels.memory",
    "ChannelError": "routing.errors",
}

# Hidden from mypy, which reads the imports above (given a module __getattr__ it would accept any name at all).
if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        home = _HOMES.get(name)
        if home is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home), name)
        globals()[name] = value  # later look-ups find it without coming here
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *__all__})
