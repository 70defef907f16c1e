"""LLM providers: OpenAI-compatible Chat Completions and Anthropic Messages, streaming over httpx, and
`ScriptedProvider` for tests. The names below are its public surface, each imported on first use; its other
modules are private by convention."""

from __future__ import annotations

from typing import TYPE_CHECKING

from routing.lazy import lazy_exports

if TYPE_CHECKING:  # what type checkers read; at run time each name is imported from _HOMES on first use
    from agent.providers.base import (
        Completed as Completed,
        ModelRequest as ModelRequest,
        Provider as Provider,
        ProviderError as ProviderError,
        StreamEvent as StreamEvent,
        TextDelta as TextDelta,
        ToolCallStarted as ToolCallStarted,
        ToolSpec as ToolSpec,
    )
    from agent.providers.builtins import build_provider as build_provider
    from agent.providers.config import (
        ModelOptions as ModelOptions,
        ProviderConfig as ProviderConfig,
        ProviderPlugin as ProviderPlugin,
        split_model as split_model,
    )
    from agent.providers.scripted import (
        Scripted as Scripted,
        ScriptedProvider as ScriptedProvider,
        ScriptedSettings as ScriptedSettings,
    )
    from tools.schema import SchemaDialect as SchemaDialect

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
__all__ = list(_HOMES)  # the public surface: written once, in the table above

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _HOMES)
