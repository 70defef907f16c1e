"""LLM providers: OpenAI-compatible Chat Completions and Anthropic Messages, streaming over httpx, and
`ScriptedProvider` for tests. The names below are its public surface, each imported on first use; its other
modules are private by convention."""

from __future__ import annotations

from typing import TYPE_CHECKING

from routing.lazy import lazy_exports

if TYPE_CHECKING:
    from agent.providers.base import (
        Completed,
        ModelRequest,
        Provider,
        ProviderError,
        StreamEvent,
        TextDelta,
        ToolCallStarted,
        ToolSpec,
    )
    from agent.providers.builtins import build_provider
    from agent.providers.config import ModelOptions, ProviderConfig, ProviderPlugin, split_model
    from agent.providers.scripted import Scripted, ScriptedProvider, ScriptedSettings
    from tools.schema import SchemaDialect

__all__ = [
    "Completed",
    "ModelOptions",
    "ModelRequest",
    "Provider",
    "ProviderConfig",
    "ProviderError",
    "ProviderPlugin",
    "SchemaDialect",
    "Scripted",
    "ScriptedProvider",
    "ScriptedSettings",
    "StreamEvent",
    "TextDelta",
    "ToolCallStarted",
    "ToolSpec",
    "build_provider",
    "split_model",
]

# Where each public name is defined: imported when first asked for.
_HOMES = {
    "Completed": "agent.providers.base",
    "ModelRequest": "agent.providers.base",
    "Provider": "agent.providers.base",
    "ProviderError": "agent.providers.base",
    "SchemaDialect": "tools.schema",
    "StreamEvent": "agent.providers.base",
    "TextDelta": "agent.providers.base",
    "ToolCallStarted": "agent.providers.base",
    "ToolSpec": "agent.providers.base",
    "ModelOptions": "agent.providers.config",
    "ProviderConfig": "agent.providers.config",
    "ProviderPlugin": "agent.providers.config",
    "build_provider": "agent.providers.builtins",
    "split_model": "agent.providers.config",
    "Scripted": "agent.providers.scripted",
    "ScriptedProvider": "agent.providers.scripted",
    "ScriptedSettings": "agent.providers.scripted",
}

# Hidden from mypy, which reads the imports above (given a module __getattr__ it would accept any name at all).
if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _HOMES, __all__)
