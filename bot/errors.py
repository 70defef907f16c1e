"""The whole error tree in one place: every error Switchboard raises on purpose, importable from here (each is
defined where it comes from, under the root in routing.errors; see its picture there). Imported on first use."""

from __future__ import annotations

from typing import TYPE_CHECKING

from routing.lazy import lazy_exports

if TYPE_CHECKING:
    from agent.compaction import CompactionError
    from agent.providers.base import ProviderError
    from bot.cli.chat import ChatFailed
    from bot.cli.init import TokenRefused
    from bot.config.errors import ConfigError
    from bot.delivery.outbox import SendFailed
    from bot.plugins import PluginError
    from bot.runs.assemble import SetupError
    from bot.store.base import FencedOut, StoreError
    from channels.discord import DiscordStartError
    from channels.start_errors import StartError
    from channels.telegram import TelegramSendError
    from routing.errors import ChannelError, SwitchboardError, ToolError
    from tools.fs import FsError, PathRefused
    from tools.mcp.server import McpCallError
    from tools.memory import MemoryToolError
    from tools.provenance import ScopeError
    from tools.web import FetchError, Refused, SearchError

# Where each error is defined: imported when first asked for (a platform's SDK only with its own errors).
_HOMES = {
    "SwitchboardError": "routing.errors",
    "ChannelError": "routing.errors",
    "ToolError": "routing.errors",
    "CompactionError": "agent.compaction",
    "ProviderError": "agent.providers.base",
    "ChatFailed": "bot.cli.chat",
    "TokenRefused": "bot.cli.init",
    "ConfigError": "bot.config.errors",
    "SendFailed": "bot.delivery.outbox",
    "PluginError": "bot.plugins",
    "SetupError": "bot.runs.assemble",
    "FencedOut": "bot.store.base",
    "StoreError": "bot.store.base",
    "DiscordStartError": "channels.discord",
    "StartError": "channels.start_errors",
    "TelegramSendError": "channels.telegram",
    "FsError": "tools.fs",
    "PathRefused": "tools.fs",
    "McpCallError": "tools.mcp.server",
    "MemoryToolError": "tools.memory",
    "ScopeError": "tools.provenance",
    "FetchError": "tools.web",
    "Refused": "tools.web",
    "SearchError": "tools.web",
}

__all__ = [
    "ChannelError",
    "ChatFailed",
    "CompactionError",
    "ConfigError",
    "DiscordStartError",
    "FencedOut",
    "FetchError",
    "FsError",
    "McpCallError",
    "MemoryToolError",
    "PathRefused",
    "PluginError",
    "ProviderError",
    "Refused",
    "ScopeError",
    "SearchError",
    "SendFailed",
    "SetupError",
    "StartError",
    "StoreError",
    "SwitchboardError",
    "TelegramSendError",
    "TokenRefused",
    "ToolError",
]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _HOMES, __all__)
