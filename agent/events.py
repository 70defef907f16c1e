"""One event stream per run: lifecycle (start/end/error), assistant text deltas, and tool calls."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Literal

from pydantic import BaseModel

SHORT_RESULT = 200  # characters of a tool result kept in its event


class LifecycleEvent(BaseModel):
    stream: Literal["lifecycle"] = "lifecycle"
    run_id: str
    phase: Literal["start", "end", "error"]
    stop_reason: str | None = None  # end: end_turn | max_iterations | cancelled | no_reply | empty
    error: str | None = None


class AssistantEvent(BaseModel):
    stream: Literal["assistant"] = "assistant"
    run_id: str
    delta: str


class ToolEvent(BaseModel):
    stream: Literal["tool"] = "tool"
    run_id: str
    phase: Literal["start", "update", "end"]
    call_id: str
    name: str
    args: dict[str, Any] | None = None
    update: str | None = None
    result: str | None = None  # the first SHORT_RESULT characters
    is_error: bool = False
    duration_ms: float | None = None


RunEvent = LifecycleEvent | AssistantEvent | ToolEvent
Emit = Callable[[RunEvent], Awaitable[None]]


async def discard(_: RunEvent) -> None:
    """An Emit for callers that do not watch the run."""


def short(text: str, limit: int = SHORT_RESULT) -> str:
    """Text cut to `limit` characters, marked when cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"
