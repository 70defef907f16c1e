"""Switchboard's application: the CLI, config loading, and the gateway that wires channels to agents. The names
below are its public surface, each imported on first use (every `bot` command imports this package, and
`bot --help` stays light); its other modules are private by convention."""

from __future__ import annotations

from typing import TYPE_CHECKING

from routing.lazy import lazy_exports

if TYPE_CHECKING:  # what type checkers read; at run time each name is imported from _HOMES on first use
    from bot.app import App as App
    from bot.config import (
        Config as Config,
        ConfigError as ConfigError,
        ConfigIssue as ConfigIssue,
        load_config as load_config,
        parse_config as parse_config,
        validate_config as validate_config,
    )
    from bot.gateway.process import Gateway as Gateway
    from bot.plugins import PluginError as PluginError, Plugins as Plugins

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
__all__ = list(_HOMES)  # the public surface: written once, in the table above

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _HOMES)
