"""Switchboard's application: the CLI, config loading, and the gateway that wires channels to agents. The names
below are its public surface, each imported on first use (every `bot` command imports this package, and
`bot --help` stays light); its other modules are private by convention."""

from __future__ import annotations

from typing import TYPE_CHECKING

from routing.lazy import lazy_exports

if TYPE_CHECKING:
    from bot.app import App
    from bot.config import Config, ConfigError, ConfigIssue, load_config, parse_config, validate_config
    from bot.gateway.process import Gateway
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
    "validate_config",
]

# Where each public name is defined: imported when first asked for.
_HOMES = {
    "App": "bot.app",
    "Config": "bot.config",
    "load_config": "bot.config",
    "parse_config": "bot.config",
    "validate_config": "bot.config",
    "ConfigError": "bot.config",
    "ConfigIssue": "bot.config",
    "Gateway": "bot.gateway.process",
    "PluginError": "bot.plugins",
    "Plugins": "bot.plugins",
}

# Hidden from mypy, which reads the imports above (given a module __getattr__ it would accept any name at all).
if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _HOMES, __all__)
