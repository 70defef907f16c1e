"""The config, step zero of every message: `bindings.yaml` read into typed settings, checked (file, line and key
in every error), `${VAR}` and `.env` applied, the owners kept in the file; nothing here does I/O past reading it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from routing.lazy import lazy_exports

if TYPE_CHECKING:  # what type checkers read; at run time each name is imported from _HOMES on first use
    from bot.config.errors import ConfigError as ConfigError, ConfigIssue as ConfigIssue
    from bot.config.loading import (
        load_config as load_config,
        parse_config as parse_config,
        validate_config as validate_config,
    )
    from bot.config.settings import Config as Config

_HOMES = {
    "Config": "bot.config.settings",
    "load_config": "bot.config.loading",
    "parse_config": "bot.config.loading",
    "validate_config": "bot.config.loading",
    "ConfigError": "bot.config.errors",
    "ConfigIssue": "bot.config.errors",
}

__all__ = list(_HOMES)  # the public surface: written once, in the table above

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _HOMES)
