"""Channels, tools and providers as plugins: found through Python entry points (groups `switchboard.channels`,
`switchboard.tools`, `switchboard.providers`; the built-ins register the same way) plus any given in code."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from importlib.metadata import EntryPoint, entry_points
from typing import Any, TypeVar

from agent.providers.config import ProviderPlugin
from channels.base import ChannelPlugin
from routing.errors import SwitchboardError
from tools.registry import ToolFactory

__all__ = ["CHANNELS", "PROVIDERS", "TOOLS", "PluginError", "Plugins"]

CHANNELS = "switchboard.channels"
TOOLS = "switchboard.tools"
PROVIDERS = "switchboard.providers"
BUILTIN_TOOLS = "builtins"  # the built-in tools come first, in their own order; other tool plugins by name

_P = TypeVar("_P")


class PluginError(SwitchboardError):
    """A registered plugin cannot be loaded, or is not what its entry point group expects."""


@functools.cache
def _installed(group: str) -> dict[str, EntryPoint]:
    return {entry.name: entry for entry in entry_points(group=group)}


@functools.cache
def _load(entry: EntryPoint) -> Any:
    where = f"{entry.group} entry point {entry.name!r} ({entry.value})"
    try:
        return entry.load()
    except Exception as error:  # a broken plugin names itself; it must not read as a bug of ours
        raise PluginError(f"{where} cannot be loaded: {type(error).__name__}: {error}") from error


def _expect(group: str, name: str, kind: type[_P]) -> _P | None:
    entry = _installed(group).get(name)
    if entry is None:
        return None
    found = _load(entry)
    if not isinstance(found, kind):
        what = type(found).__name__
        raise PluginError(f"{group} entry point {name!r} ({entry.value}) is a {what}, not a {kind.__name__}")
    return found


class Plugins:
    """The plugins one application uses: the installed ones (loaded only when asked for, so that a platform's
    module is imported only when its channel is configured) and those given here, which win over an installed
    plugin of the same name."""

    def __init__(
        self,
        *,
        channels: Mapping[str, ChannelPlugin] | None = None,
        tools: Mapping[str, ToolFactory] | None = None,
        providers: Mapping[str, ProviderPlugin] | None = None,
        installed: bool = True,
    ) -> None:
        self._channels = dict(channels or {})
        self._tools = dict(tools or {})
        self._providers = dict(providers or {})
        self._installed = installed

    def _names(self, group: str, given: Mapping[str, Any]) -> list[str]:
        return sorted({*given, *(_installed(group) if self._installed else ())})

    def channel_names(self) -> list[str]:
        """Every channel a config may name under `channels:`."""
        return self._names(CHANNELS, self._channels)

    def channel(self, name: str) -> ChannelPlugin | None:
        """The plugin of the channel `name`, None if there is none; PluginError if it is broken."""
        if name in self._channels:
            return self._channels[name]
        return _expect(CHANNELS, name, ChannelPlugin) if self._installed else None

    def provider_kinds(self) -> list[str]:
        """Every `kind` a provider in `providers:` may have."""
        return self._names(PROVIDERS, self._providers)

    def provider(self, kind: str) -> ProviderPlugin | None:
        """The plugin for providers of `kind`, None if there is none; PluginError if it is broken."""
        if kind in self._providers:
            return self._providers[kind]
        return _expect(PROVIDERS, kind, ProviderPlugin) if self._installed else None

    def providers(self) -> dict[str, ProviderPlugin]:
        """Every provider plugin by kind (each loaded)."""
        return {kind: plugin for kind in self.provider_kinds() if (plugin := self.provider(kind)) is not None}

    def tool_factories(self) -> list[tuple[str, ToolFactory]]:
        """Every tool plugin, the built-in tools first, then the others by name."""
        names = sorted(self._names(TOOLS, self._tools), key=lambda name: (name != BUILTIN_TOOLS, name))
        found = []
        for name in names:
            factory = self._tools.get(name)
            if factory is None:
                factory = _load(_installed(TOOLS)[name])
                if not callable(factory):
                    raise PluginError(f"{TOOLS} entry point {name!r} is a {type(factory).__name__}, not a callable")
            found.append((name, factory))
        return found
