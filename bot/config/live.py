"""Where a part reads the config of the moment: a live view (bot.runs.Decisions, which a live reload swaps), or a
config that never changes (the one-shot commands), each read at every use."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from bot.config.settings import Config

__all__ = ["FixedConfig", "LiveConfig", "ReadsLiveConfig", "live"]


class LiveConfig(Protocol):
    """Anything with the config of the moment as `config`."""

    @property
    def config(self) -> Config: ...


@dataclass(frozen=True)
class FixedConfig:
    """A config that never changes, as a LiveConfig."""

    config: Config


def live(config: Config | LiveConfig) -> LiveConfig:
    """`config` as a LiveConfig: a Config is fixed; a live view (the gateway's Decisions) is read at each use."""
    return FixedConfig(config) if isinstance(config, Config) else config


class ReadsLiveConfig:
    """A part that keeps where to read the config (`live`, set in its constructor) and reads it at each use."""

    live: LiveConfig

    @property
    def config(self) -> Config:
        """The config of the moment (a live view's, at each use: a live reload replaces it)."""
        return self.live.config
