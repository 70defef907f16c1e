"""The config, step zero of every message: `bindings.yaml` read into typed settings, checked (file, line and key
in every error), `${VAR}` and `.env` applied, the owners kept in the file; nothing here does I/O past reading it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from routing.lazy import lazy_exports

if TYPE_CHECKING:
    from bot.config.errors import ConfigError, ConfigIssue
    from bot.config.loading import load_config, parse_config, validate_config
    from bot.config.settings import Config

__all__ = ["Config", "ConfigError", "ConfigIssue", "load_config", "parse_config", "validate_config"]

_HOMES = {
    "Config": "bot.config.settings",
    "load_config": "bot.config.loading",
    "parse_config": "bot.config.loading",
    "validate_config": "bot.config.loading",
    "ConfigError": "bot.config.errors",
    "ConfigIssue": "bot.config.errors",
}

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _HOMES, __all__)
