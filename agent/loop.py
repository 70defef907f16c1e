"""The inner loop: stream the model, run the tool calls it asks for, feed the results back, until it is done."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeVar

import agent.xml_dispatch as xml_dispatch
from agent.cancellation import Stop, Stopped, unless_stopped
from agent.events import AssistantEvent, Emit, LifecycleEvent, ToolEvent, discard, short
from agent.images import without_images
from agent.messages import AssistantMessage, Message, TextBlock, ToolCall, ToolResultMessage, Usage, UserMessage
from agent.providers.base import (
    Completed,
    ModelRequest,
    Provider,
    ProviderError,
    TextDelta,
    ThinkingLevel,
    ToolSpec,
)
from tools.base import RunInfo, Tool, ToolContext, ToolResult, error_result
from tools.hooks import Hooks, call_tool
from tools.schema import normalize_schema

NO_REPLY = "NO_REPLY"
DEFAULT_MAX_TOOL_ITERATIONS = 50
Dispatch = Literal["native", "xml"]
LoopStop = Literal["end_turn", "no_reply", "empty", "max_tokens", "max_iterations", "cancelled"]
_T = TypeVar("_T")


@dataclass
class Turn:
    """Everything one run needs besides the conversation: the model, its tools, and who it runs for."""

    provider: Provider
    model: str
    system: str
    run: RunInfo
    tools: Sequence[Tool] = ()
    hooks: Hooks = field(default_factory=Hooks)
    dispatch: Dispatch = "native"
    sees_images: bool = True  # False: every image is left to the text that names it (agent.images)
    max_tool_iterations: int = DEFAULT_MAX_TOOL_ITERATIONS
    max_tokens: int = 4096
    thinking: ThinkingLevel = "off"
    api_key: str | None = None
    emit: Emit = discard
    cancel: asyncio.Event = field(default_factory=Stop)
    # Messages that arrived during the run (queue mode steer), taken at each tool boundary.
    steer: Callable[[], Awaitable[list[UserMessage]]] | None = None
    run_id: str = field(default_factory=lambda: f"run_{secrets.token_hex(6)}")


@dataclass
class TurnResult:
    """How a run ended. `messages` are the ones this run added, starting with the user's."""

    run_id: str
    text: str
    stop_reason: LoopStop
    messages: list[Message]
    usage: Usage = field(default_factory=Usage)
    iterations: int = 0


async def run_turn(turn: Turn, history: Sequence[Message], user: UserMessage) -> TurnResult:
    """Run one user turn to its end. Provider failures raise ProviderError (the runner decides what next);
    tool failures, unknown tools, bad arguments and cancellation are part of the conversation instead."""
    added: list[Message] = [user]
    result = TurnResult(run_id=turn.run_id, text="", stop_reason="end_turn", messages=added)
    tools = {tool.name: tool for tool in turn.tools}
    dispatch: Dispatch = turn.dispatch
    out = _TextOut(turn)
    await turn.emit(LifecycleEvent(run_id=turn.run_id, phase="start"))
    try:
        while True:
            if turn.cancel.is_set():
                raise Stopped
            completed = await _stream_once(turn, dispatch, [*history, *added], out)
            result.usage = result.usage + completed.usage
            answer = completed.message
            streamed = dispatch == "native"  # its text already went out as deltas
            calls, malformed, visible = _calls_in(answer, dispatch)
            added.append(
                AssistantMessage(text=answer.text, tool_calls=answer.tool_calls if dispatch == "native" else [])
            )
            if not streamed and visible:
                await out.add(visible)
            await out.end_round()
            if not calls and not malformed:
                result.text, result.stop_reason = _final(visible, completed.stop_reason == "max_tokens")
                break
            if result.iterations >= turn.max_tool_iterations:
                note = f"not run: the limit of {turn.max_tool_iterations} tool rounds in one turn was reached"
                _append_results(added, dispatch, [(c, error_result(c.name, note)) for c in calls], malformed)
                result.text = f"I stopped after {turn.max_tool_iterations} rounds of tool calls without finishing."
                result.stop_reason = "max_iterations"
                break
            result.iterations += 1
            finished: dict[int, ToolResult] = {}
            try:
                await unless_stopped(_run_calls(turn, tools, calls, finished), turn.cancel)
            except Stopped:
                # A call that did finish keeps its real result: "cancelled" would invite the model to redo it.
                stopped = "cancelled: the run was stopped"
                outcomes = [(call, finished.get(i) or error_result(call.name, stopped)) for i, call in enumerate(calls)]
                _append_results(added, dispatch, outcomes, malformed)
                raise
            _append_results(added, dispatch, [(call, finished[i]) for i, call in enumerate(calls)], malformed)
            if turn.steer is not None:
                added.extend(await turn.steer())
    except Stopped:
        result.stop_reason = "cancelled"
    except ProviderError as error:
        error.partial_messages = list(added)  # every tool call in it answered: safe to keep in a transcript
        await turn.emit(LifecycleEvent(run_id=turn.run_id, phase="error", error=f"{error.kind}: {error}"))
        raise
    await turn.emit(LifecycleEvent(run_id=turn.run_id, phase="end", stop_reason=result.stop_reason))
    return result


def build_request(turn: Turn, dispatch: Dispatch, messages: list[Message]) -> ModelRequest:
    """The request for one model call: tool schemas normalized for the provider, or described in the
    system prompt for XML dispatch; sorted by name either way, so every call of a session starts alike."""
    dialect = turn.provider.dialect(turn.model)
    specs = [
        ToolSpec(
            name=tool.name,
            description=tool.description,
            parameters=normalize_schema(tool.json_schema(turn.run), dialect),
        )
        for tool in sorted(turn.tools, key=lambda tool: tool.name)
    ]
    system = turn.system
    if dispatch == "xml" and specs:
        system = f"{system}\n\n{xml_dispatch.instructions(specs)}"
    # Built from objects already validated (the history's messages, the specs above): not validated again, which
    # would walk the whole conversation on every model call.
    return ModelRequest.model_construct(
        model=turn.model,
        system=system,
        messages=list(messages) if turn.sees_images else without_images(messages),
        tools=specs if dispatch == "native" else [],
        max_tokens=turn.max_tokens,
        thinking=turn.thinking,
    )


class _TextOut:
    """Emits the text people see: rounds apart by a blank line, and an answer that may still turn out to be
    exactly NO_REPLY held back until it is clearly something else."""

    def __init__(self, turn: Turn) -> None:
        self.turn = turn
        self.shown_before = False
        self.held = ""
        self.flowing = False

    async def add(self, text: str) -> None:
        if self.flowing:
            await self._emit(text)
            return
        self.held += text
        if not NO_REPLY.startswith(self.held.strip()):
            await self._release()

    async def end_round(self) -> None:
        if not self.flowing and self.held.strip() not in ("", NO_REPLY):
            await self._release()
        self.held, self.flowing = "", False

    async def _release(self) -> None:
        self.flowing = True
        text, self.held = self.held.lstrip(), ""
        await self._emit(f"\n\n{text}" if self.shown_before else text)

    async def _emit(self, text: str) -> None:
        if text:
            self.shown_before = True
            await self.turn.emit(AssistantEvent(run_id=self.turn.run_id, delta=text))


async def _stream_once(turn: Turn, dispatch: Dispatch, messages: list[Message], out: _TextOut) -> Completed:
    """One model call; text deltas go out as they arrive (native dispatch only: XML calls are text)."""
    request = build_request(turn, dispatch, messages)

    async def consume() -> Completed:
        events = turn.provider.stream(request, api_key=turn.api_key)
        try:
            async for event in events:
                if isinstance(event, TextDelta) and dispatch == "native" and event.text:
                    await out.add(event.text)
                elif isinstance(event, Completed):
                    return event
        finally:
            # Closed here, when Completed comes (a generator has a line or two after it): left to the garbage
            # collector, the stream and the response it reads would be closed later, in a task of their own.
            close = getattr(events, "aclose", None)
            if close is not None:
                await close()
        raise ProviderError("network", "the model's stream ended without completing")

    return await unless_stopped(consume(), turn.cancel)


def _calls_in(answer: AssistantMessage, dispatch: Dispatch) -> tuple[list[ToolCall], list[str], str]:
    """The calls to run, the malformed ones (XML only) and the text meant for the user."""
    if dispatch == "native":
        return list(answer.tool_calls), [], answer.text
    parsed = xml_dispatch.parse_answer(answer.text)
    return parsed.calls, parsed.errors, parsed.text


def _final(text: str, cut_short: bool) -> tuple[str, LoopStop]:
    stripped = text.strip()
    if stripped == NO_REPLY:
        return "", "no_reply"
    if not stripped:
        return "", "empty"
    return stripped, "max_tokens" if cut_short else "end_turn"


async def _run_calls(
    turn: Turn, tools: dict[str, Tool], calls: list[ToolCall], finished: dict[int, ToolResult]
) -> None:
    """Run a turn's calls concurrently; each result lands in `finished` under its call's index as soon as it is done."""

    async def run(index: int, call: ToolCall) -> None:
        finished[index] = await _run_call(turn, tools, call)

    await asyncio.gather(*(run(index, call) for index, call in enumerate(calls)))


async def _run_call(turn: Turn, tools: dict[str, Tool], call: ToolCall) -> ToolResult:
    await turn.emit(ToolEvent(run_id=turn.run_id, phase="start", call_id=call.id, name=call.name, args=call.arguments))
    started = time.perf_counter()
    tool = tools.get(call.name)
    if tool is None:
        available = ", ".join(sorted(tools)) or "none"
        outcome = error_result(call.name, f"unknown tool {call.name!r}; available tools: {available}")
    elif call.arguments_error:
        outcome = error_result(call.name, f"invalid arguments: {call.arguments_error}")
    else:

        async def on_update(text: str) -> None:
            event = ToolEvent(run_id=turn.run_id, phase="update", call_id=call.id, name=call.name, update=short(text))
            await turn.emit(event)

        ctx = ToolContext(turn.run, cancelled=turn.cancel, on_update=on_update)
        try:
            outcome = await call_tool(tool, call.id, call.arguments, ctx, turn.hooks)
        except asyncio.CancelledError:  # still end what was started, or a watcher shows the call running forever
            await _end_event(turn, call, error_result(call.name, "cancelled: the run was stopped"), started)
            raise
    await _end_event(turn, call, outcome, started)
    return outcome


async def _end_event(turn: Turn, call: ToolCall, outcome: ToolResult, started: float) -> None:
    await turn.emit(
        ToolEvent(
            run_id=turn.run_id,
            phase="end",
            call_id=call.id,
            name=call.name,
            result=short(outcome.text),
            is_error=outcome.is_error,
            duration_ms=round((time.perf_counter() - started) * 1000, 2),
        )
    )


def _append_results(
    added: list[Message], dispatch: Dispatch, outcomes: list[tuple[ToolCall, ToolResult]], malformed: list[str]
) -> None:
    """Feed results back: native tool messages in call order, or one XML user message."""
    if dispatch == "native":
        for call, outcome in outcomes:
            added.append(
                ToolResultMessage(call_id=call.id, name=call.name, content=outcome.content, is_error=outcome.is_error)
            )
        return
    blocks = [xml_dispatch.render_result(call.name, not outcome.is_error, outcome.text) for call, outcome in outcomes]
    blocks += [xml_dispatch.render_result("(malformed tool call)", False, problem) for problem in malformed]
    added.append(UserMessage(content=[TextBlock(text="\n".join(blocks))]))
