"""The whole error tree in one place: every error Switchboard raises on purpose, importable from here (each is
defined where it comes from, under the root in routing.errors; see its picture there). Imported on first use."""

from __future__ import annotations

from typing import TYPE_CHECKING

from routing.lazy import lazy_exports

if TYPE_CHECKING:  # what type checkers read; at run time each name is imported from _HOMES on first use
    from agent.compaction import CompactionError as CompactionError
    from agent.providers.base import ProviderError as ProviderError
    from bot.cli.chat import ChatFailed as ChatFailed
    from bot.cli.init import TokenRefused as TokenRefused
    from bot.config.errors import ConfigError as ConfigError
    from bot.delivery.outbox import SendFailed as SendFailed
    from bot.plugins import PluginError as PluginError
    from bot.runs.assemble import SetupError as SetupError
    from bot.store.base import FencedOut as FencedOut, StoreError as StoreError
    from channels.discord import DiscordStartError as DiscordStartError
    from channels.start_errors import StartError as StartError
    from channels.telegram import TelegramSendError as TelegramSendError
    from routing.errors import (
        ChannelError as ChannelError,
        SwitchboardError as SwitchboardError,
        ToolError as ToolError,
    )
    from tools.fs import FsError as FsError, PathRefused as PathRefused
    from tools.mcp.server import McpCallError as McpCallError
    from tools.memory import MemoryToolError as MemoryToolError
    from tools.provenance import ScopeError as ScopeError
    from tools.web import FetchError as FetchError, Refused as Refused, SearchError as SearchError

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

__all__ = list(_HOMES)  # the public surface: written once, in the table above

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _HOMES)
