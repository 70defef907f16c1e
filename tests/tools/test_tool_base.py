"""The tool contract: invoke validates and never raises (except cancellation); the result helpers' shapes."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import pytest
from pydantic import BaseModel, Field

from tools.base import (
    ImageBlock,
    RunInfo,
    TextBlock,
    Tool,
    ToolContext,
    ToolResult,
    error_result,
    image_result,
    invoke,
    json_result,
)


class GreetArgs(BaseModel):
    name: str
    times: int = Field(default=1, ge=1)


class Greet(Tool):
    name = "greet"
    description = "Greet someone."
    parameters = GreetArgs

    def __init__(self) -> None:
        self.seen: list[Any] = []

    async def execute(self, call_id: str, args: Any, ctx: ToolContext) -> ToolResult:
        self.seen.append(args)
        return json_result({"greeting": " ".join([f"hello {args.name}"] * args.times)})


class NoArgs(BaseModel):
    pass


class Explodes(Tool):
    name = "explodes"
    description = "Always fails."
    parameters = NoArgs

    async def execute(self, call_id: str, args: Any, ctx: ToolContext) -> ToolResult:
        raise RuntimeError("disk on fire")


class ReturnsAString(Tool):
    name = "sloppy"
    description = "Forgets to wrap its answer."
    parameters = NoArgs

    async def execute(self, call_id: str, args: Any, ctx: ToolContext) -> ToolResult:
        return "done"  # type: ignore[return-value]


class Sleeps(Tool):
    name = "sleeps"
    description = "Waits until cancelled."
    parameters = NoArgs

    def __init__(self) -> None:
        self.started = asyncio.Event()

    async def execute(self, call_id: str, args: Any, ctx: ToolContext) -> ToolResult:
        self.started.set()
        await asyncio.Event().wait()  # nobody sets it
        return json_result("never")


class Reports(Tool):
    name = "reports"
    description = "Reports progress while it works."
    parameters = NoArgs

    async def execute(self, call_id: str, args: Any, ctx: ToolContext) -> ToolResult:
        await ctx.on_update("half way")
        await ctx.on_update("done")
        return json_result({"ok": True})


def context(**kwargs: Any) -> ToolContext:
    return ToolContext(RunInfo(agent="main", session_key="agent:main:console:direct:me"), **kwargs)


def payload(result: ToolResult) -> Any:
    """The JSON the model reads."""
    return json.loads(result.text)


async def test_valid_arguments_reach_execute_as_the_parameters_model() -> None:
    tool = Greet()
    result = await invoke(tool, "call-1", {"name": "Ada", "times": "2"}, context())
    assert tool.seen == [GreetArgs(name="Ada", times=2)]
    assert payload(result) == {"greeting": "hello Ada hello Ada"}
    assert result.is_error is False


async def test_bad_arguments_become_an_error_result_naming_the_field() -> None:
    tool = Greet()
    result = await invoke(tool, "call-1", {"times": 0}, context())
    error = payload(result)
    assert result.is_error is True
    assert error["status"] == "error"
    assert error["tool"] == "greet"
    assert error["error"].startswith("invalid arguments: ")
    assert "name: Field required" in error["error"]
    assert "times: Input should be greater than or equal to 1" in error["error"]
    assert tool.seen == []  # execute never ran


async def test_an_exception_in_the_tool_becomes_an_error_result() -> None:
    result = await invoke(Explodes(), "call-1", {}, context())
    assert result.is_error is True
    assert payload(result) == {"status": "error", "tool": "explodes", "error": "RuntimeError: disk on fire"}


async def test_a_tool_returning_something_other_than_a_tool_result_is_an_error() -> None:
    result = await invoke(ReturnsAString(), "call-1", {}, context())
    assert payload(result) == {"status": "error", "tool": "sloppy", "error": "tool returned str, not a ToolResult"}


async def test_cancellation_propagates_out_of_invoke() -> None:
    tool = Sleeps()
    task = asyncio.create_task(invoke(tool, "call-1", {}, context()))
    await tool.started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.cancelled()


async def test_a_tool_reports_progress_through_on_update() -> None:
    updates: list[str] = []

    async def on_update(text: str) -> None:
        updates.append(text)

    result = await invoke(Reports(), "call-1", {}, context(on_update=on_update))
    assert updates == ["half way", "done"]
    assert payload(result) == {"ok": True}


async def test_on_update_defaults_to_doing_nothing() -> None:
    result = await invoke(Reports(), "call-1", {}, context())
    assert result.is_error is False


def test_json_result_is_indented_json_text_with_the_payload_as_details() -> None:
    result = json_result({"files": ["a.txt"], "count": 1})
    assert result.content == [TextBlock(text='{\n  "files": [\n    "a.txt"\n  ],\n  "count": 1\n}')]
    assert result.details == {"files": ["a.txt"], "count": 1}
    assert result.is_error is False


def test_json_result_keeps_non_ascii_text_readable() -> None:
    assert json_result({"text": "héllo 世界"}).text == '{\n  "text": "héllo 世界"\n}'


def test_image_result_carries_base64_data_and_an_optional_caption() -> None:
    png = b"\x89PNG\r\n\x1a\nfake"
    captioned = image_result(png, "image/png", caption="a chart")
    assert captioned.content == [
        TextBlock(text="a chart"),
        ImageBlock(data=base64.b64encode(png).decode("ascii"), mime_type="image/png"),
    ]
    assert captioned.details == {"mime_type": "image/png", "bytes": len(png)}
    bare = image_result(png, "image/png")
    assert [block.type for block in bare.content] == ["image"]
    assert bare.text == ""


def test_error_result_has_the_one_error_shape() -> None:
    result = error_result("exec", "not allowed")
    assert result.is_error is True
    assert payload(result) == {"status": "error", "tool": "exec", "error": "not allowed"}
    assert result.details == {"status": "error", "tool": "exec", "error": "not allowed"}
