"""The providers Switchboard ships, as plugins: `openai` (any Chat Completions endpoint) and `anthropic`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from agent.providers.base import Provider
from agent.providers.config import ProviderConfig, ProviderPlugin

__all__ = ["PROVIDERS", "anthropic", "build_provider", "openai"]


def _openai(name: str, settings: Any, client: httpx.AsyncClient | None) -> Provider:
    from agent.providers.openai import OpenAIProvider

    return OpenAIProvider(name, settings, client)


def _anthropic(name: str, settings: Any, client: httpx.AsyncClient | None) -> Provider:
    from agent.providers.anthropic import AnthropicProvider

    return AnthropicProvider(name, settings, client)


openai = ProviderPlugin(ProviderConfig, _openai)
anthropic = ProviderPlugin(ProviderConfig, _anthropic)
PROVIDERS: Mapping[str, ProviderPlugin] = {"anthropic": anthropic, "openai": openai}


def build_provider(
    name: str,
    config: ProviderConfig,
    client: httpx.AsyncClient | None = None,
    plugins: Mapping[str, ProviderPlugin] | None = None,
) -> Provider:
    """The Provider for `config` from the plugin of its kind (`plugins`, else the built-in ones); it uses `client`
    if given, else its own (close it with `aclose()`). LookupError for a kind no plugin provides."""
    if plugins is None:
        plugins = PROVIDERS
    plugin = plugins.get(config.kind)
    if plugin is None:
        known = ", ".join(sorted(plugins))
        raise LookupError(f"provider {name!r}: no plugin for kind {config.kind!r} (known: {known})")
    return plugin.create(name, config, client)
