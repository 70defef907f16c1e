"""Tool call hooks: before hooks rewrite or block (failing closed), after hooks observe, cancellation passes through."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest
from helpers import FakeClock
from pydantic import BaseModel

from tools.base import RunInfo, Tool, ToolContext, ToolResult, json_result
from tools.hooks import Block, Hooks, Rewrite, ToolInvocation, call_tool

RUN = RunInfo(agent="main", session_key="agent:main:telegram:direct:42", channel="telegram", sender_id="42")


class EchoArgs(BaseModel):
    text: str
    times: int = 1


class Echo(Tool):
    name = "echo"
    description = "Say it back."
    parameters = EchoArgs

    def __init__(self) -> None:
        self.calls: list[EchoArgs] = []

    async def execute(self, call_id: str, args: Any, ctx: ToolContext) -> ToolResult:
        self.calls.append(args)
        return json_result({"echo": " ".join([args.text] * args.times)})


class Hangs(Tool):
    name = "hangs"
    description = "Never finishes."
    parameters = EchoArgs

    def __init__(self) -> None:
        self.started = asyncio.Event()

    async def execute(self, call_id: str, args: Any, ctx: ToolContext) -> ToolResult:
        self.started.set()
        await asyncio.Event().wait()
        return json_result("never")


async def call(tool: Tool, hooks: Hooks, arguments: dict[str, Any] | None = None) -> ToolResult:
    return await call_tool(tool, "call-1", arguments or {"text": "hi"}, ToolContext(RUN), hooks)


def payload(result: ToolResult) -> Any:
    return json.loads(result.text)


async def test_without_hooks_the_tool_just_runs() -> None:
    tool = Echo()
    result = await call_tool(tool, "call-1", {"text": "hi", "times": 2}, ToolContext(RUN))
    assert payload(result) == {"echo": "hi hi"}
    assert tool.calls == [EchoArgs(text="hi", times=2)]


async def test_a_before_hook_sees_the_call() -> None:
    hooks = Hooks()
    seen: list[ToolInvocation] = []
    hooks.before_tool_call(seen.append)
    await call(Echo(), hooks, {"text": "hi"})
    assert seen == [ToolInvocation(tool="echo", call_id="call-1", arguments={"text": "hi"}, run=RUN)]


async def test_registering_returns_the_function_so_it_works_as_a_decorator() -> None:
    hooks = Hooks()

    @hooks.before_tool_call
    def before(call: ToolInvocation) -> None:
        return None

    @hooks.after_tool_call
    def after(call: ToolInvocation, result: ToolResult, duration: float) -> None:
        return None

    assert callable(before) and before.__name__ == "before"
    assert callable(after) and after.__name__ == "after"


async def test_arguments_that_are_not_an_object_are_an_error_result_and_reach_no_hook() -> None:
    hooks = Hooks()
    seen: list[ToolInvocation] = []
    hooks.before_tool_call(seen.append)
    tool = Echo()
    result = await call_tool(tool, "call-1", ["hi"], ToolContext(RUN), hooks)  # type: ignore[arg-type]
    assert payload(result) == {
        "status": "error",
        "tool": "echo",
        "error": "invalid arguments: expected a JSON object, got list",
    }
    assert seen == [] and tool.calls == []


# --- rewrites -------------------------------------------------------------------------------------


async def test_a_rewrite_replaces_the_arguments() -> None:
    hooks = Hooks()
    hooks.before_tool_call(lambda call: Rewrite(arguments={**call.arguments, "text": "[redacted]"}))
    tool = Echo()
    result = await call(tool, hooks, {"text": "my password", "times": 1})
    assert tool.calls == [EchoArgs(text="[redacted]")]
    assert payload(result) == {"echo": "[redacted]"}


async def test_rewrites_chain_each_hook_seeing_the_previous_one() -> None:
    hooks = Hooks()
    seen: list[dict[str, Any]] = []

    @hooks.before_tool_call
    def shout(call: ToolInvocation) -> Rewrite:
        seen.append(call.arguments)
        return Rewrite(arguments={"text": call.arguments["text"].upper()})

    @hooks.before_tool_call
    def repeat(call: ToolInvocation) -> Rewrite:
        seen.append(call.arguments)
        return Rewrite(arguments={**call.arguments, "times": 3})

    @hooks.before_tool_call
    def look(call: ToolInvocation) -> None:
        seen.append(call.arguments)

    tool = Echo()
    result = await call(tool, hooks, {"text": "hi"})
    assert seen == [{"text": "hi"}, {"text": "HI"}, {"text": "HI", "times": 3}]
    assert payload(result) == {"echo": "HI HI HI"}


async def test_changing_the_arguments_in_place_changes_nothing() -> None:
    hooks = Hooks()

    @hooks.before_tool_call
    def sneaky(call: ToolInvocation) -> None:
        call.arguments["text"] = "changed behind your back"

    tool = Echo()
    await call(tool, hooks, {"text": "hi"})
    assert tool.calls == [EchoArgs(text="hi")]


async def test_rewritten_arguments_are_still_validated() -> None:
    hooks = Hooks()
    hooks.before_tool_call(lambda call: Rewrite(arguments={"text": "hi", "times": "many"}))
    tool = Echo()
    result = await call(tool, hooks)
    assert payload(result)["error"].startswith("invalid arguments: times:")
    assert tool.calls == []


# --- blocks ---------------------------------------------------------------------------------------


async def test_a_block_stops_the_call_and_the_model_reads_the_reason() -> None:
    hooks = Hooks()
    later: list[ToolInvocation] = []
    hooks.before_tool_call(lambda call: Block(reason="echo is disabled in this chat"))
    hooks.before_tool_call(later.append)
    tool = Echo()
    result = await call(tool, hooks)
    assert result.is_error is True
    assert payload(result) == {"status": "error", "tool": "echo", "error": "blocked: echo is disabled in this chat"}
    assert tool.calls == []
    assert later == []  # hooks after the block do not run


async def test_a_failing_before_hook_blocks_the_call(caplog: pytest.LogCaptureFixture) -> None:
    hooks = Hooks()

    @hooks.before_tool_call
    def check_path(call: ToolInvocation) -> None:
        raise RuntimeError("policy file missing")

    tool = Echo()
    with caplog.at_level(logging.WARNING, logger="tools.hooks"):
        result = await call(tool, hooks)
    error = payload(result)["error"]
    assert error.startswith("blocked: before_tool_call hook ")
    assert error.endswith("check_path failed (RuntimeError)")
    assert tool.calls == []
    assert "check_path" in caplog.text and "policy file missing" in caplog.text


async def test_a_before_hook_answering_nonsense_blocks_the_call() -> None:
    hooks = Hooks()
    hooks.before_tool_call(lambda call: {"text": "not a Rewrite"})  # type: ignore[type-var]
    tool = Echo()
    result = await call(tool, hooks)
    assert payload(result)["error"].endswith("returned dict, not None/Rewrite/Block")
    assert tool.calls == []


# --- after hooks ----------------------------------------------------------------------------------


async def test_an_after_hook_sees_the_arguments_the_result_and_the_duration() -> None:
    clock = FakeClock()

    class Slow(Echo):
        async def execute(self, call_id: str, args: Any, ctx: ToolContext) -> ToolResult:
            await clock.sleep(2.5)  # the tool takes 2.5 seconds by the clock the hooks read
            return await super().execute(call_id, args, ctx)

    hooks = Hooks(clock=clock)
    seen: list[tuple[ToolInvocation, ToolResult, float]] = []
    hooks.before_tool_call(lambda call: Rewrite(arguments={"text": "rewritten"}))
    hooks.after_tool_call(lambda call, result, duration: seen.append((call, result, duration)))
    result = await call(Slow(), hooks, {"text": "original"})
    [(seen_call, seen_result, duration)] = seen
    assert seen_call.arguments == {"text": "rewritten"}
    assert seen_call.tool == "echo" and seen_call.call_id == "call-1" and seen_call.run == RUN
    assert seen_result is result
    assert duration == 2.5


async def test_after_hooks_see_blocked_calls_with_no_duration() -> None:
    hooks = Hooks()
    seen: list[tuple[str, float]] = []
    hooks.before_tool_call(lambda call: Block(reason="no"))
    hooks.after_tool_call(lambda call, result, duration: seen.append((result.text, duration)))
    result = await call(Echo(), hooks)
    assert seen == [(result.text, 0.0)]
    assert payload(result)["error"] == "blocked: no"


async def test_a_failing_after_hook_is_logged_and_ignored(caplog: pytest.LogCaptureFixture) -> None:
    hooks = Hooks()
    later: list[str] = []

    @hooks.after_tool_call
    def audit(call: ToolInvocation, result: ToolResult, duration: float) -> None:
        raise OSError("audit log is full")

    hooks.after_tool_call(lambda call, result, duration: later.append(result.text))
    with caplog.at_level(logging.WARNING, logger="tools.hooks"):
        result = await call(Echo(), hooks)
    assert payload(result) == {"echo": "hi"}
    assert later == [result.text]  # the next after hook still ran
    assert "audit" in caplog.text and "audit log is full" in caplog.text


# --- sync and async -------------------------------------------------------------------------------


async def test_sync_and_async_hooks_run_in_registration_order() -> None:
    hooks = Hooks()
    order: list[str] = []

    @hooks.before_tool_call
    async def first(call: ToolInvocation) -> Rewrite:
        await asyncio.sleep(0)
        order.append("async before")
        return Rewrite(arguments={"text": "from async"})

    @hooks.before_tool_call
    def second(call: ToolInvocation) -> None:
        order.append(f"sync before saw {call.arguments['text']}")

    @hooks.after_tool_call
    def third(call: ToolInvocation, result: ToolResult, duration: float) -> None:
        order.append("sync after")

    @hooks.after_tool_call
    async def fourth(call: ToolInvocation, result: ToolResult, duration: float) -> None:
        await asyncio.sleep(0)
        order.append("async after")

    result = await call(Echo(), hooks)
    assert order == ["async before", "sync before saw from async", "sync after", "async after"]
    assert payload(result) == {"echo": "from async"}


async def test_an_async_before_hook_can_block_and_an_async_one_can_fail() -> None:
    hooks = Hooks()

    @hooks.before_tool_call
    async def fails(call: ToolInvocation) -> None:
        raise ValueError("bad")

    result = await call(Echo(), hooks)
    assert payload(result)["error"].endswith("fails failed (ValueError)")

    hooks = Hooks()

    @hooks.before_tool_call
    async def blocks(call: ToolInvocation) -> Block:
        return Block(reason="async says no")

    assert payload(await call(Echo(), hooks))["error"] == "blocked: async says no"


# --- cancellation ---------------------------------------------------------------------------------


async def test_cancellation_propagates_through_call_tool() -> None:
    hooks = Hooks()
    after: list[ToolResult] = []
    hooks.after_tool_call(lambda call, result, duration: after.append(result))
    tool = Hangs()
    task = asyncio.create_task(call(tool, hooks))
    await tool.started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.cancelled()
    assert after == []  # a stopped run reports no result


async def test_cancellation_inside_a_before_hook_propagates_and_the_tool_never_runs() -> None:
    hooks = Hooks()
    waiting = asyncio.Event()

    @hooks.before_tool_call
    async def asks_a_human(call: ToolInvocation) -> None:
        waiting.set()
        await asyncio.Event().wait()

    tool = Echo()
    task = asyncio.create_task(call(tool, hooks))
    await waiting.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert tool.calls == []
