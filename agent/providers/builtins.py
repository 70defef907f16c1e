"""The providers Switchboard ships, as plugins: `openai` (any Chat Completions endpoint) and `anthropic`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from agent.providers.base import Provider
from agent.providers.config import ProviderConfig, ProviderPlugin

__all__ = ["PROVIDERS", "anthropic", "openai"]


def _openai(name: str, settings: Any, client: httpx.AsyncClient | None) -> Provider:
    from agent.providers.openai import OpenAIProvider

    return OpenAIProvider(name, settings, client)


def _anthropic(name: str, settings: Any, client: httpx.AsyncClient | None) -> Provider:
    from agent.providers.anthropic import AnthropicProvider

    return AnthropicProvider(name, settings, client)


openai = ProviderPlugin(ProviderConfig, _openai)
anthropic = ProviderPlugin(ProviderConfig, _anthropic)
PROVIDERS: Mapping[str, ProviderPlugin] = {"anthropic": anthropic, "openai": openai}
