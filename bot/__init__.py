"""Switchboard's application: the CLI, config loading, and the gateway that wires channels to agents. The names
below are its public surface, each imported on first use (every `bot` command imports this package, and
`bot --help` stays light); its other modules are private by convention."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bot.app import App
    from bot.config import Config, load_config, parse_config
    from bot.config_errors import ConfigError, ConfigIssue
    from bot.gateway import Gateway
    from bot.plugins import PluginError, Plugins

__all__ = [
    "App",
    "Config",
    "ConfigError",
    "ConfigIssue",
    "Gateway",
    "PluginError",
    "Plugins",
    "load_config",
    "parse_config",
]

# Where each public name is defined: imported when first asked for.
_HOMES = {
    "App": "bot.app",
    "Config": "bot.config",
    "load_config": "bot.config",
    "parse_config": "bot.config",
    "ConfigError": "bot.config_errors",
    "ConfigIssue": "bot.config_errors",
    "Gateway": "bot.gateway",
    "PluginError": "bot.plugins",
    "Plugins": "bot.plugins",
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
