"""Hooks around tool calls: before hooks may rewrite or block a call, after hooks observe its result."""

from __future__ import annotations

import copy
import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict

from tools.base import RunInfo, Tool, ToolContext, ToolResult, error_result, invoke

log = logging.getLogger(__name__)


class ToolInvocation(BaseModel):
    """A tool call as hooks see it. `arguments` is the hook's own copy: return a Rewrite to change them."""

    model_config = ConfigDict(frozen=True)

    tool: str
    call_id: str
    arguments: dict[str, Any]
    run: RunInfo


class Rewrite(BaseModel):
    """A before hook's answer: call the tool with these arguments instead."""

    arguments: dict[str, Any]


class Block(BaseModel):
    """A before hook's answer: do not call the tool; the model reads `blocked: <reason>`."""

    reason: str


BeforeDecision = Rewrite | Block | None
BeforeHook = Callable[[ToolInvocation], BeforeDecision | Awaitable[BeforeDecision]]
AfterHook = Callable[[ToolInvocation, ToolResult, float], Awaitable[None] | None]

_Before = TypeVar("_Before", bound=BeforeHook)
_After = TypeVar("_After", bound=AfterHook)


def _hook_name(fn: object) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)


async def _call(fn: Callable[..., Any], *args: Any) -> Any:
    """Call a sync or async hook and return what it gives."""
    outcome = fn(*args)
    if inspect.isawaitable(outcome):
        outcome = await outcome
    return outcome


class Hooks:
    """The registered hooks, run in registration order. Register with `@hooks.before_tool_call` and friends.
    `clock` (seconds) times each call for the after hooks."""

    def __init__(self, *, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self._before: list[BeforeHook] = []
        self._after: list[AfterHook] = []

    def before_tool_call(self, fn: _Before) -> _Before:
        """Register `fn(call) -> None | Rewrite | Block` (sync or async); returns `fn`, so it works as a decorator."""
        self._before.append(fn)
        return fn

    def after_tool_call(self, fn: _After) -> _After:
        """Register `fn(call, result, duration_seconds)` (sync or async); returns `fn`."""
        self._after.append(fn)
        return fn

    async def run_before(self, call: ToolInvocation) -> ToolInvocation | Block:
        """The call as the hooks left it (each sees the previous rewrite), or the Block that stopped it.

        A hook that raises or answers something else blocks the call: a broken guard must not wave calls through.
        """
        for fn in self._before:
            view = call.model_copy(update={"arguments": copy.deepcopy(call.arguments)})
            try:
                decision = await _call(fn, view)
            except Exception as error:
                log.warning("before_tool_call hook %s failed on %s", _hook_name(fn), call.tool, exc_info=True)
                return Block(reason=f"before_tool_call hook {_hook_name(fn)} failed ({type(error).__name__})")
            if isinstance(decision, Block):
                return decision
            if isinstance(decision, Rewrite):
                call = call.model_copy(update={"arguments": copy.deepcopy(decision.arguments)})
            elif decision is not None:
                kind = type(decision).__name__
                return Block(reason=f"before_tool_call hook {_hook_name(fn)} returned {kind}, not None/Rewrite/Block")
        return call

    async def run_after(self, call: ToolInvocation, result: ToolResult, duration: float) -> None:
        """Tell every after hook; their failures are logged and otherwise ignored."""
        for fn in self._after:
            view = call.model_copy(update={"arguments": copy.deepcopy(call.arguments)})
            try:
                await _call(fn, view, result, duration)
            except Exception:
                log.warning("after_tool_call hook %s failed on %s", _hook_name(fn), call.tool, exc_info=True)


async def call_tool(
    tool: Tool, call_id: str, arguments: dict[str, Any], ctx: ToolContext, hooks: Hooks | None = None
) -> ToolResult:
    """Before hooks, then `invoke`, then after hooks. Never raises, except asyncio.CancelledError.

    A blocked call gets the error result `blocked: <reason>`; after hooks see it too (with duration 0),
    so an audit hook sees every result the model gets.
    """
    if not isinstance(arguments, dict):  # a model's malformed call; hooks are written for objects
        return error_result(tool.name, f"invalid arguments: expected a JSON object, got {type(arguments).__name__}")
    hooks = hooks or Hooks()
    call = ToolInvocation(tool=tool.name, call_id=call_id, arguments=copy.deepcopy(arguments), run=ctx.run)
    outcome = await hooks.run_before(call)
    if isinstance(outcome, Block):
        result = error_result(tool.name, f"blocked: {outcome.reason}")
        await hooks.run_after(call, result, 0.0)
        return result
    started = hooks.clock()
    result = await invoke(tool, call_id, outcome.arguments, ctx)
    duration = hooks.clock() - started
    await hooks.run_after(outcome, result, duration)
    return result
