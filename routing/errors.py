"""Switchboard's one error tree. Its root lives in `routing`, the package every other one imports, so that each
layer raises from the same tree; each branch is defined where its errors come from:

    SwitchboardError
    ├── ConfigError        bot.config.errors: a config file that cannot be used (every issue, with line and key)
    ├── SetupError         bot.runs.assemble: a run cannot start (no model configured, its provider missing)
    ├── PluginError        bot.plugins: a registered plugin cannot be loaded, or is not what its group expects
    ├── ProviderError      agent.providers.base: a model call failed (its `kind` says how)
    ├── CompactionError    agent.compaction: a conversation could not be summarized to fit
    ├── ChannelError       channels: a platform account cannot start, or refused what was sent
    │   ├── DiscordStartError    channels.discord
    │   └── TelegramSendError    channels.telegram
    ├── ToolError          tools: a tool could not do what it was asked (the model reads it as the tool's result)
    │   ├── FsError → PathRefused    tools.fs
    │   ├── FetchError → Refused     tools.web
    │   ├── SearchError              tools.web
    │   ├── ScopeError               tools.provenance
    │   ├── MemoryToolError          tools.memory
    │   └── McpCallError             tools.mcp.server: an MCP server gave no answer (not running, timed out, gone)
    ├── StoreError         bot.store: the state database cannot be used
    └── ChatFailed         bot.cli.chat: a console turn went unanswered

The `bot` command turns each into one line and an exit code (bot.cli.main). Cancellation (`agent.cancellation.Stopped`)
is control flow, not an error, and stays outside the tree."""

from __future__ import annotations

__all__ = ["ChannelError", "SwitchboardError", "ToolError"]


class SwitchboardError(Exception):
    """The root: everything Switchboard raises on purpose."""


class ChannelError(SwitchboardError):
    """A platform account cannot start, or the platform refused what was sent."""


class ToolError(SwitchboardError):
    """A tool could not do what it was asked; the loop hands the message to the model as the tool's result."""
