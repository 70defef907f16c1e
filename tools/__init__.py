"""The Tool contract, registry, policy pipeline, schema normalization, hooks and built-in tools. The names below
are its public surface, each imported on first use; its other modules are private by convention."""

from __future__ import annotations

from typing import TYPE_CHECKING

from routing.lazy import lazy_exports

if TYPE_CHECKING:  # what type checkers read; at run time each name is imported from _HOMES on first use
    from routing.errors import ToolError as ToolError
    from tools.base import (
        ImageBlock as ImageBlock,
        RunInfo as RunInfo,
        TextBlock as TextBlock,
        Tool as Tool,
        ToolContext as ToolContext,
        ToolResult as ToolResult,
        error_result as error_result,
        image_result as image_result,
        json_result as json_result,
    )
    from tools.hooks import Hooks as Hooks
    from tools.registry import ToolFactory as ToolFactory, ToolRegistry as ToolRegistry, ToolSetup as ToolSetup

# Where each public name is defined: imported when first asked for.
_HOMES = {
    "ToolError": "routing.errors",
    "ImageBlock": "tools.base",
    "RunInfo": "tools.base",
    "TextBlock": "tools.base",
    "Tool": "tools.base",
    "ToolContext": "tools.base",
    "ToolResult": "tools.base",
    "error_result": "tools.base",
    "image_result": "tools.base",
    "json_result": "tools.base",
    "Hooks": "tools.hooks",
    "ToolFactory": "tools.registry",
    "ToolRegistry": "tools.registry",
    "ToolSetup": "tools.registry",
}

# Hidden from mypy, which reads the imports above (given a module __getattr__ it would accept any name at all).
__all__ = list(_HOMES)  # the public surface: written once, in the table above

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _HOMES)
