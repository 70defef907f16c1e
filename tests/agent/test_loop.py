"""The inner loop against a real local LLM server: answers, tool rounds, concurrency, bad calls, cancellation, XML."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import pytest
from fakes.llm import FakeLLM, Reply, ToolCallSpec
from helpers import WAIT, FakeClock
from pydantic import BaseModel

from agent.events import AssistantEvent, LifecycleEvent, RunEvent, ToolEvent
from agent.loop import Turn, TurnResult, run_turn
from agent.messages import AssistantMessage, Message, TextBlock, ToolResultMessage, UserMessage
from agent.providers.base import Provider, ProviderError
from agent.providers.builtins import build_provider
from tools.base import RunInfo, Tool, ToolContext, ToolResult, json_result
from tools.hooks import Block, Hooks, Rewrite, ToolInvocation

RUN = RunInfo(agent="main", session_key="agent:main:console:direct:me")
SYSTEM = "You are a careful test agent."

# --- tools --------------------------------------------------------------------------------------------------------


class AddArgs(BaseModel):
    a: int
    b: int


class Add(Tool):
    name = "add"
    description = "Add two integers."
    parameters = AddArgs

    def __init__(self) -> None:
        self.seen: list[AddArgs] = []

    async def execute(self, call_id: str, args: Any, ctx: ToolContext) -> ToolResult:
        self.seen.append(args)
        return json_result({"sum": args.a + args.b})


class EchoArgs(BaseModel):
    text: str


class Echo(Tool):
    name = "echo"
    description = "Say the text back."
    parameters = EchoArgs

    async def execute(self, call_id: str, args: Any, ctx: ToolContext) -> ToolResult:
        return ToolResult(content=[TextBlock(text=args.text)])


class SlowArgs(BaseModel):
    seconds: float


class Slow(Tool):
    """Sleeps (by `sleep`: real time unless a test passes a fake clock's); records the calls that finished, and
    whether a stopped call could see the run's cancel."""

    name = "slow"
    description = "Wait a while."
    parameters = SlowArgs

    def __init__(self, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.sleep = sleep
        self.finished: list[str] = []
        self.stopped: dict[str, bool] = {}  # call id -> ctx.cancelled was set when the call was stopped
        self.running = asyncio.Event()

    async def execute(self, call_id: str, args: Any, ctx: ToolContext) -> ToolResult:
        self.running.set()
        try:
            await self.sleep(args.seconds)
        except asyncio.CancelledError:
            self.stopped[call_id] = ctx.cancelled.is_set()
            raise
        self.finished.append(call_id)
        return json_result({"slept": args.seconds})


class WaitArgs(BaseModel):
    until_done: str | None = None  # the id of another call this one waits for


class Wait(Tool):
    """Logs when each call starts and ends; a call given `until_done` ends only after that other call has ended, so
    both can end only if they run at the same time."""

    name = "wait"
    description = "Wait for another call to end."
    parameters = WaitArgs

    def __init__(self) -> None:
        self.log: list[str] = []
        self.ended: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)

    async def execute(self, call_id: str, args: Any, ctx: ToolContext) -> ToolResult:
        self.log.append(f"{call_id} started")
        if args.until_done is not None:
            await self.ended[args.until_done].wait()
        self.log.append(f"{call_id} ended")
        self.ended[call_id].set()
        return json_result({"waited_for": args.until_done})


class NoArgs(BaseModel):
    pass


class Explode(Tool):
    name = "explode"
    description = "Always fails."
    parameters = NoArgs

    async def execute(self, call_id: str, args: Any, ctx: ToolContext) -> ToolResult:
        raise RuntimeError("the fuse was short")


class StepsArgs(BaseModel):
    steps: int


class Progress(Tool):
    """Reports each step through ctx.on_update, then returns a long result."""

    name = "progress"
    description = "Work in steps."
    parameters = StepsArgs

    async def execute(self, call_id: str, args: Any, ctx: ToolContext) -> ToolResult:
        for step in range(1, args.steps + 1):
            await ctx.on_update(f"step {step} of {args.steps}")
        return ToolResult(content=[TextBlock(text="x" * 500)])


# --- the harness: a real provider against the fake server, and every event of the run ---------------------------

Kind = Literal["openai", "anthropic"]


@pytest.fixture(params=["openai", "anthropic"])
def kind(request: pytest.FixtureRequest) -> Kind:
    return cast(Kind, request.param)


@dataclass
class Agent:
    llm: FakeLLM
    kind: Kind
    provider: Provider
    events: list[RunEvent] = field(default_factory=list)

    async def record(self, event: RunEvent) -> None:
        self.events.append(event)

    def turn(self, *tools: Tool, **fields: Any) -> Turn:
        fields.setdefault("emit", self.record)
        return Turn(provider=self.provider, model="test-model", system=SYSTEM, run=RUN, tools=tools, **fields)

    async def ask(self, text: str, *tools: Tool, history: Sequence[Message] = (), **fields: Any) -> TurnResult:
        return await asyncio.wait_for(run_turn(self.turn(*tools, **fields), history, UserMessage.of(text)), WAIT)

    def body(self, index: int) -> dict[str, Any]:
        return cast(dict[str, Any], self.llm.requests[index].body)

    def deltas(self) -> list[str]:
        return [event.delta for event in self.events if isinstance(event, AssistantEvent)]

    def lifecycle(self) -> list[LifecycleEvent]:
        return [event for event in self.events if isinstance(event, LifecycleEvent)]

    def tool_events(self, phase: str | None = None) -> list[ToolEvent]:
        return [e for e in self.events if isinstance(e, ToolEvent) and (phase is None or e.phase == phase)]


@pytest.fixture
async def agent(fake_llm: FakeLLM, kind: Kind) -> AsyncIterator[Agent]:
    provider = build_provider("fake", fake_llm.provider_config(kind, api_key="sk-test-loop"))
    try:
        yield Agent(fake_llm, kind, provider)
    finally:
        await provider.aclose()


def tool_results(messages: Sequence[Message]) -> list[ToolResultMessage]:
    return [message for message in messages if isinstance(message, ToolResultMessage)]


def text_of(message: ToolResultMessage | UserMessage) -> str:
    return "\n".join(block.text for block in message.content if isinstance(block, TextBlock))


@dataclass(frozen=True)
class Sent:
    """A tool result as it went over the wire. OpenAI has no error flag: the model reads `"status": "error"`."""

    call_id: str
    text: str
    is_error: bool


def _error_text(text: str) -> bool:
    try:
        payload = json.loads(text)
    except ValueError:
        return False
    return isinstance(payload, dict) and payload.get("status") == "error"


def results_sent(kind: Kind, body: dict[str, Any]) -> list[Sent]:
    """The tool results a request ends with, in the order they were sent."""
    messages = body["messages"]
    if kind == "openai":
        trailing: list[dict[str, Any]] = []
        for message in reversed(messages):
            if message["role"] != "tool":
                break
            trailing.insert(0, message)
        return [Sent(m["tool_call_id"], m["content"], _error_text(m["content"])) for m in trailing]
    last = messages[-1]
    assert last["role"] == "user"
    return [
        Sent(
            block["tool_use_id"],
            "\n".join(part["text"] for part in block.get("content", []) if part["type"] == "text"),
            block.get("is_error", False),
        )
        for block in last["content"]
        if block["type"] == "tool_result"
    ]


def system_prompt(kind: Kind, body: dict[str, Any]) -> str:
    if kind == "openai":
        first = body["messages"][0]
        assert first["role"] == "system"
        return cast(str, first["content"])
    return "".join(block["text"] for block in body["system"])


def last_user_text(kind: Kind, body: dict[str, Any]) -> str:
    last = body["messages"][-1]
    assert last["role"] == "user"
    if kind == "openai":
        return cast(str, last["content"])
    return "\n".join(block["text"] for block in last["content"] if block["type"] == "text")


def assert_every_call_answered(kind: Kind, body: dict[str, Any]) -> None:
    """What the real APIs insist on: each tool call is answered, in order, right after the turn that made it."""
    messages = body["messages"]
    if kind == "openai":
        for index, message in enumerate(messages):
            if message["role"] == "assistant" and message.get("tool_calls"):
                ids = [call["id"] for call in message["tool_calls"]]
                following = messages[index + 1 : index + 1 + len(ids)]
                assert [(m["role"], m.get("tool_call_id")) for m in following] == [("tool", i) for i in ids]
        return
    roles = [turn["role"] for turn in messages]
    assert roles[0] == "user"
    assert all(a != b for a, b in itertools.pairwise(roles)), roles
    for index, turn in enumerate(messages):
        uses = [block["id"] for block in turn["content"] if block["type"] == "tool_use"]
        if uses:
            answered = [b["tool_use_id"] for b in messages[index + 1]["content"] if b["type"] == "tool_result"]
            assert answered == uses


def every_call_has_a_result(messages: Sequence[Message]) -> bool:
    calls = [call.id for message in messages if isinstance(message, AssistantMessage) for call in message.tool_calls]
    return calls == [result.call_id for result in tool_results(messages)]


# --- 1. a plain answer --------------------------------------------------------------------------------------------


async def test_a_plain_answer_streams_and_ends_the_turn(agent: Agent) -> None:
    answer = "Paris is the capital of France."
    agent.llm.script(Reply.text(answer, usage=(30, 9)))
    result = await agent.ask("Capital of France?")
    assert result.text == answer
    assert result.stop_reason == "end_turn"
    assert result.iterations == 0
    assert result.messages == [UserMessage.of("Capital of France?"), AssistantMessage(text=answer)]
    assert (result.usage.input_tokens, result.usage.output_tokens) == (30, 9)
    assert len(agent.deltas()) > 1  # streamed in pieces, not handed over at the end
    assert "".join(agent.deltas()) == answer
    assert [(event.phase, event.run_id) for event in agent.lifecycle()] == [
        ("start", result.run_id),
        ("end", result.run_id),
    ]
    assert agent.events[0] == LifecycleEvent(run_id=result.run_id, phase="start")
    assert agent.events[-1] == LifecycleEvent(run_id=result.run_id, phase="end", stop_reason="end_turn")
    assert all(event.run_id == result.run_id for event in agent.events)
    assert system_prompt(agent.kind, agent.body(0)) == SYSTEM


async def test_the_history_goes_before_the_new_message(agent: Agent) -> None:
    history: list[Message] = [UserMessage.of("My name is Ada."), AssistantMessage(text="Hello Ada.")]
    agent.llm.script("Your name is Ada.")
    result = await agent.ask("What is my name?", history=history)
    assert result.messages[0] == UserMessage.of("What is my name?")  # only what this run added
    sent = agent.body(0)["messages"]
    texts = [m["content"] if isinstance(m["content"], str) else m["content"][0]["text"] for m in sent]
    assert texts[-3:] == ["My name is Ada.", "Hello Ada.", "What is my name?"]


async def test_an_answer_cut_by_the_token_limit_says_so(agent: Agent) -> None:
    agent.llm.script(Reply.text("The list goes on and on and", stop="max_tokens"))
    result = await agent.ask("List everything.")
    assert (result.text, result.stop_reason) == ("The list goes on and on and", "max_tokens")


# --- 2. several calls in one model turn ---------------------------------------------------------------------------


async def test_two_calls_in_one_turn_both_run_and_their_results_go_back_in_call_order(agent: Agent) -> None:
    add = Add()
    agent.llm.script(
        Reply.tool_calls(
            ToolCallSpec("add", {"a": 2, "b": 3}, id="c1"), ToolCallSpec("echo", {"text": "hi"}, id="c2"), text="On it."
        ),
        Reply.text("2 + 3 = 5, and hi."),
    )
    result = await agent.ask("Add 2 and 3, then say hi.", add, Echo())
    assert result.text == "2 + 3 = 5, and hi."
    assert (result.stop_reason, result.iterations) == ("end_turn", 1)
    assert add.seen == [AddArgs(a=2, b=3)]
    assert [message.role for message in result.messages] == ["user", "assistant", "tool", "tool", "assistant"]
    assert [(r.call_id, text_of(r), r.is_error) for r in tool_results(result.messages)] == [
        ("c1", json_result({"sum": 5}).text, False),
        ("c2", "hi", False),
    ]
    assert len(agent.llm.requests) == 2
    sent = agent.body(1)["messages"]
    sum_text = json_result({"sum": 5}).text
    if agent.kind == "openai":
        assert [call["id"] for call in sent[-3]["tool_calls"]] == ["c1", "c2"]
        assert sent[-2:] == [
            {"role": "tool", "tool_call_id": "c1", "content": sum_text},
            {"role": "tool", "tool_call_id": "c2", "content": "hi"},
        ]
    else:
        assert [block["id"] for block in sent[-2]["content"] if block["type"] == "tool_use"] == ["c1", "c2"]
        assert sent[-1] == {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "c1", "content": [{"type": "text", "text": sum_text}]},
                {
                    "type": "tool_result",
                    "tool_use_id": "c2",
                    "content": [{"type": "text", "text": "hi"}],
                    "cache_control": {"type": "ephemeral"},  # the newest message is a cache breakpoint
                },
            ],
        }


# --- 3. chained rounds --------------------------------------------------------------------------------------------


async def test_chained_rounds_feed_each_result_to_the_next_call(agent: Agent) -> None:
    add = Add()
    agent.llm.script(
        Reply.tool_calls(ToolCallSpec("add", {"a": 1, "b": 2}, id="r1"), usage=(10, 1)),
        Reply.tool_calls(ToolCallSpec("add", {"a": 3, "b": 4}, id="r2"), usage=(20, 2)),
        Reply.text("1 + 2 + 3 + 4 = 10.", usage=(30, 3)),
    )
    result = await agent.ask("Add up 1 to 4, two at a time.", add)
    assert len(agent.llm.requests) == 3
    assert result.iterations == 2
    assert (result.text, result.stop_reason) == ("1 + 2 + 3 + 4 = 10.", "end_turn")
    assert (result.usage.input_tokens, result.usage.output_tokens) == (60, 6)  # summed over the three calls
    assert add.seen == [AddArgs(a=1, b=2), AddArgs(a=3, b=4)]
    assert results_sent(agent.kind, agent.body(1)) == [Sent("r1", json_result({"sum": 3}).text, False)]
    assert results_sent(agent.kind, agent.body(2)) == [Sent("r2", json_result({"sum": 7}).text, False)]
    assert_every_call_answered(agent.kind, agent.body(2))


# --- 4. concurrency -----------------------------------------------------------------------------------------------


async def test_calls_in_one_turn_overlap_yet_results_keep_call_order(agent: Agent) -> None:
    wait = Wait()
    agent.llm.script(
        Reply.tool_calls(
            ToolCallSpec("wait", {"until_done": "short"}, id="long"), ToolCallSpec("wait", {}, id="short")
        ),
        "Both done.",
    )
    result = await agent.ask("Wait twice.", wait)  # run one at a time, "long" would wait for "short" forever
    assert result.text == "Both done."
    # the second began while the first was still running, and it finished first...
    assert wait.log == ["long started", "short started", "short ended", "long ended"]
    assert [event.call_id for event in agent.tool_events("end")] == ["short", "long"]
    assert [r.call_id for r in tool_results(result.messages)] == ["long", "short"]  # ...yet results keep call order
    assert [sent.call_id for sent in results_sent(agent.kind, agent.body(1))] == ["long", "short"]


# --- 5. bad calls are answered, and the run goes on ---------------------------------------------------------------


async def answered_with_an_error(agent: Agent, reply: Reply, *tools: Tool) -> Sent:
    """Run a turn whose first answer is a bad call; check the run went on to the next answer; the result sent."""
    agent.llm.script(reply, "Sorry about that.")
    result = await agent.ask("Do the thing.", *tools)
    assert (result.text, result.stop_reason) == ("Sorry about that.", "end_turn")
    assert len(agent.llm.requests) == 2
    [message] = tool_results(result.messages)
    assert message.is_error
    [sent] = results_sent(agent.kind, agent.body(1))
    assert sent.is_error
    assert sent.text == text_of(message)
    return sent


async def test_arguments_of_the_wrong_type_are_an_error_naming_the_field(agent: Agent) -> None:
    add = Add()
    sent = await answered_with_an_error(agent, Reply.tool_calls(ToolCallSpec("add", {"a": "two", "b": 3})), add)
    error = json.loads(sent.text)
    assert (error["status"], error["tool"]) == ("error", "add")
    assert error["error"].startswith("invalid arguments: a: ")
    assert "b:" not in error["error"]
    assert add.seen == []


async def test_malformed_json_arguments_are_an_error(agent: Agent) -> None:
    add = Add()
    sent = await answered_with_an_error(agent, Reply.malformed_tool_call("add", '{"a": 1, "b": '), add)
    error = json.loads(sent.text)["error"]
    assert error.startswith("invalid arguments:")
    assert "not valid JSON" in error
    assert '{"a": 1, "b": ' in error  # the model sees what it sent
    assert add.seen == []


async def test_an_unknown_tool_is_an_error_listing_the_available_tools(agent: Agent) -> None:
    sent = await answered_with_an_error(agent, Reply.tool_calls(ToolCallSpec("multiply", {"a": 2})), Echo(), Add())
    assert json.loads(sent.text) == {
        "status": "error",
        "tool": "multiply",
        "error": "unknown tool 'multiply'; available tools: add, echo",
    }


async def test_a_tool_that_raises_is_an_error_result(agent: Agent) -> None:
    sent = await answered_with_an_error(agent, Reply.tool_calls(ToolCallSpec("explode")), Explode())
    assert json.loads(sent.text)["error"] == "RuntimeError: the fuse was short"


# --- 6. cancellation ----------------------------------------------------------------------------------------------


async def test_cancelling_mid_tool_stops_it_and_leaves_a_valid_conversation(agent: Agent) -> None:
    slow = Slow()
    agent.llm.script(Reply.tool_calls(ToolCallSpec("slow", {"seconds": 60}, id="nap")))
    turn = agent.turn(slow)

    async def stop_once_running() -> None:
        await slow.running.wait()
        turn.cancel.set()

    stopper = asyncio.create_task(stop_once_running())
    result = await asyncio.wait_for(run_turn(turn, [], UserMessage.of("Take a nap.")), WAIT)
    await stopper
    assert result.stop_reason == "cancelled"
    assert slow.stopped == {"nap": True}  # the tool was stopped, and could see that the run was cancelled
    assert slow.finished == []
    assert [m.role for m in result.messages] == ["user", "assistant", "tool"]
    [cancelled] = tool_results(result.messages)
    assert cancelled.call_id == "nap"
    assert cancelled.is_error
    assert json.loads(text_of(cancelled))["error"].startswith("cancelled")
    assert agent.lifecycle()[-1].stop_reason == "cancelled"
    [end] = agent.tool_events("end")  # a started call is always ended, so a UI never shows it running forever
    assert (end.call_id, end.is_error) == ("nap", True)

    agent.llm.script("I'm awake.")
    follow = await agent.ask("Still there?", slow, history=result.messages)
    assert (follow.text, follow.stop_reason) == ("I'm awake.", "end_turn")
    assert_every_call_answered(agent.kind, agent.body(1))
    assert last_user_text(agent.kind, agent.body(1)).endswith("Still there?")


async def test_a_call_that_finished_before_the_cancel_keeps_its_real_result(agent: Agent) -> None:
    # Telling the model that a call which did run was cancelled invites it to run it again (send twice, pay twice).
    slow, add = Slow(), Add()
    agent.llm.script(
        Reply.tool_calls(ToolCallSpec("add", {"a": 1, "b": 1}, id="done"), ToolCallSpec("slow", {"seconds": 60}))
    )
    turn = agent.turn(add, slow)

    async def stop_once_running() -> None:
        await slow.running.wait()
        turn.cancel.set()

    stopper = asyncio.create_task(stop_once_running())
    result = await asyncio.wait_for(run_turn(turn, [], UserMessage.of("Add, then nap.")), WAIT)
    await stopper
    assert result.stop_reason == "cancelled"
    assert add.seen == [AddArgs(a=1, b=1)]
    first, second = tool_results(result.messages)
    assert (first.call_id, first.is_error, text_of(first)) == ("done", False, json_result({"sum": 2}).text)
    assert second.is_error
    assert "cancelled" in text_of(second)


async def test_cancelling_while_the_model_streams_stops_the_stream(agent: Agent) -> None:
    agent.llm.script(Reply.held("Let me think"))  # never finished

    async def cancel_on_first_words(event: RunEvent) -> None:
        await agent.record(event)
        if isinstance(event, AssistantEvent):
            turn.cancel.set()

    turn = agent.turn(emit=cancel_on_first_words)
    result = await asyncio.wait_for(run_turn(turn, [], UserMessage.of("Think hard.")), WAIT)
    assert result.stop_reason == "cancelled"
    assert result.messages == [UserMessage.of("Think hard.")]  # a half-streamed answer is not kept
    assert agent.lifecycle()[-1] == LifecycleEvent(run_id=result.run_id, phase="end", stop_reason="cancelled")


async def test_a_run_cancelled_before_it_starts_calls_no_model(agent: Agent) -> None:
    turn = agent.turn()
    turn.cancel.set()
    result = await run_turn(turn, [], UserMessage.of("Never mind."))
    assert result.stop_reason == "cancelled"
    assert agent.llm.requests == []


# --- 7. the round limit -------------------------------------------------------------------------------------------


async def test_a_model_that_never_stops_calling_tools_hits_the_round_limit(agent: Agent) -> None:
    add = Add()
    agent.llm.script(*(Reply.tool_calls(ToolCallSpec("add", {"a": n, "b": n}, id=f"loop{n}")) for n in range(3)))
    result = await agent.ask("Keep adding.", add, max_tool_iterations=2)
    assert result.stop_reason == "max_iterations"
    assert len(agent.llm.requests) == 3
    assert (result.iterations, len(add.seen)) == (2, 2)  # the third round's call was not run
    assert every_call_has_a_result(result.messages)
    last = tool_results(result.messages)[-1]
    assert last.is_error
    assert "limit of 2 tool rounds" in text_of(last)
    assert "stopped" in result.text
    assert "2 rounds" in result.text
    assert agent.lifecycle()[-1].stop_reason == "max_iterations"


# --- 8. NO_REPLY and empty answers --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "text", "stop_reason"),
    [
        ("NO_REPLY", "", "no_reply"),
        ("  NO_REPLY\n", "", "no_reply"),
        ("NO_REPLY, but one thing: the build is red.", "NO_REPLY, but one thing: the build is red.", "end_turn"),
        ("", "", "empty"),
        ("   \n", "", "empty"),
    ],
)
async def test_silent_and_empty_answers(agent: Agent, answer: str, text: str, stop_reason: str) -> None:
    agent.llm.script(Reply.text(answer))
    result = await agent.ask("(group chatter)")
    assert (result.text, result.stop_reason) == (text, stop_reason)
    assert agent.lifecycle()[-1].stop_reason == stop_reason


async def test_a_streamed_no_reply_never_reaches_the_chat(agent: Agent) -> None:
    agent.llm.script(Reply.text("NO_REPLY"))
    await agent.ask("(group chatter)")
    assert agent.deltas() == []


async def test_an_answer_that_starts_like_no_reply_is_shown_whole(agent: Agent) -> None:
    agent.llm.script(Reply.text("NO_REPLY, but one thing: the build is red."), Reply.text("NO"))
    await agent.ask("status?")
    assert "".join(agent.deltas()) == "NO_REPLY, but one thing: the build is red."
    agent.events.clear()
    await agent.ask("yes or no?")
    assert agent.deltas() == ["NO"]


async def test_text_from_separate_rounds_is_shown_a_blank_line_apart(agent: Agent) -> None:
    agent.llm.script(
        Reply.tool_calls(ToolCallSpec("add", {"a": 2, "b": 3}, id="c1"), text="Adding now."), Reply.text("2 + 3 = 5.")
    )
    await agent.ask("What is 2 + 3?", Add())
    assert "".join(agent.deltas()) == "Adding now.\n\n2 + 3 = 5."


# --- 9. XML dispatch ----------------------------------------------------------------------------------------------

XML_ADD = '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>'


async def test_xml_dispatch_lists_tools_in_the_prompt_and_runs_calls_written_as_text(agent: Agent) -> None:
    add = Add()
    agent.llm.script(Reply.text(f"Let me add.\n{XML_ADD}"), Reply.text("<think>5, easy</think>2 + 3 = 5."))
    result = await agent.ask("What is 2 + 3?", add, dispatch="xml")
    first = agent.body(0)
    assert "tools" not in first  # nothing native is offered
    prompt = system_prompt(agent.kind, first)
    assert prompt.startswith(SYSTEM)
    assert "<tool_call>" in prompt
    schema = '{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}},"required":["a","b"]}'
    assert f"- add: Add two integers.\n  parameters: {schema}" in prompt
    assert add.seen == [AddArgs(a=2, b=3)]
    fed_back = last_user_text(agent.kind, agent.body(1))
    assert fed_back.startswith('<tool_result name="add" status="ok">')
    assert '"sum": 5' in fed_back
    assert results_sent(agent.kind, agent.body(1)) == []  # a user message, not native tool results
    assert (result.text, result.stop_reason, result.iterations) == ("2 + 3 = 5.", "end_turn", 1)
    assert [m.role for m in result.messages] == ["user", "assistant", "user", "assistant"]
    assert "think" not in "".join(agent.deltas())
    assert "".join(agent.deltas()).endswith("2 + 3 = 5.")


async def test_a_malformed_xml_call_is_reported_back_not_dropped(agent: Agent) -> None:
    add = Add()
    agent.llm.script(
        Reply.text('<tool_call>{"name": "add", "arguments": {"a": 2,</tool_call>'), "Sorry, I garbled that."
    )
    result = await agent.ask("What is 2 + 3?", add, dispatch="xml")
    assert len(agent.llm.requests) == 2
    fed_back = last_user_text(agent.kind, agent.body(1))
    assert fed_back.startswith('<tool_result name="(malformed tool call)" status="error">')
    assert "tool call #1 is not valid JSON" in fed_back
    assert add.seen == []
    assert (result.text, result.stop_reason) == ("Sorry, I garbled that.", "end_turn")


@pytest.mark.parametrize(
    "answer",
    [
        f"Adding now. {XML_ADD}",
        XML_ADD.upper().replace("ADD", "add"),
        f"The page said:\n```\n{XML_ADD}\n```",
        f'Quoting the file: "{XML_ADD}" (that is all).',
    ],
)
async def test_tool_markup_in_a_native_models_text_is_only_text(agent: Agent, answer: str) -> None:
    """A native-tools model that quotes `<tool_call>` (from a page, a file, a person) calls nothing: only the
    provider's own tool calls run, and the run never switches to XML dispatch."""
    add = Add()
    agent.llm.script(Reply.text(answer))
    result = await agent.ask("What is 2 + 3?", add)
    assert add.seen == []
    assert len(agent.llm.requests) == 1
    assert "tools" in agent.body(0)
    assert (result.text, result.stop_reason) == (answer, "end_turn")


# --- 10. hooks ----------------------------------------------------------------------------------------------------


async def test_a_blocking_hook_stops_the_call_and_the_model_reads_why(agent: Agent) -> None:
    add, hooks = Add(), Hooks()

    @hooks.before_tool_call
    def closed(call: ToolInvocation) -> Block | None:
        return Block(reason="adding is closed today") if call.tool == "add" else None

    agent.llm.script(Reply.tool_calls(ToolCallSpec("add", {"a": 1, "b": 2})), "Adding is closed.")
    result = await agent.ask("1 + 2?", add, hooks=hooks)
    assert add.seen == []
    [sent] = results_sent(agent.kind, agent.body(1))
    assert sent.is_error
    assert json.loads(sent.text)["error"] == "blocked: adding is closed today"
    assert result.text == "Adding is closed."


async def test_a_rewriting_hook_changes_the_arguments_the_tool_sees(agent: Agent) -> None:
    add, hooks = Add(), Hooks()

    @hooks.before_tool_call
    def answer_everything(call: ToolInvocation) -> Rewrite:
        return Rewrite(arguments={**call.arguments, "a": 40})

    agent.llm.script(Reply.tool_calls(ToolCallSpec("add", {"a": 1, "b": 2})), "42.")
    await agent.ask("1 + 2?", add, hooks=hooks)
    assert add.seen == [AddArgs(a=40, b=2)]
    [sent] = results_sent(agent.kind, agent.body(1))
    assert json.loads(sent.text) == {"sum": 42}


async def test_an_after_hook_sees_the_result_and_how_long_the_call_took(agent: Agent) -> None:
    clock = FakeClock()
    hooks = Hooks(clock=clock)
    seen: list[tuple[str, str, float]] = []

    @hooks.after_tool_call
    async def audit(call: ToolInvocation, result: ToolResult, duration: float) -> None:
        seen.append((call.tool, result.text, duration))

    agent.llm.script(Reply.tool_calls(ToolCallSpec("slow", {"seconds": 2.5})), "Rested.")
    await agent.ask("Rest a little.", Slow(sleep=clock.sleep), hooks=hooks)  # 2.5 s by the hooks' clock
    [(tool, text, duration)] = seen
    assert (tool, json.loads(text)) == ("slow", {"slept": 2.5})
    assert duration == 2.5


# --- 11. tool events ----------------------------------------------------------------------------------------------


async def test_tool_events_start_update_and_end_each_call(agent: Agent) -> None:
    agent.llm.script(
        Reply.tool_calls(
            ToolCallSpec("add", {"a": 2, "b": 2}, id="t-add"),
            ToolCallSpec("progress", {"steps": 2}, id="t-progress"),
            ToolCallSpec("explode", {}, id="t-explode"),
        ),
        "Done.",
    )
    result = await agent.ask("Go.", Add(), Progress(), Explode())
    tool_events = agent.tool_events()
    assert all(event.run_id == result.run_id for event in tool_events)
    starts = {event.call_id: event for event in agent.tool_events("start")}
    assert {call_id: (e.name, e.args) for call_id, e in starts.items()} == {
        "t-add": ("add", {"a": 2, "b": 2}),
        "t-progress": ("progress", {"steps": 2}),
        "t-explode": ("explode", {}),
    }
    ends = {event.call_id: event for event in agent.tool_events("end")}
    assert set(ends) == set(starts)
    assert (ends["t-add"].name, ends["t-add"].result, ends["t-add"].is_error) == ("add", '{\n  "sum": 4\n}', False)
    assert ends["t-explode"].is_error
    assert "the fuse was short" in (ends["t-explode"].result or "")
    long_result = ends["t-progress"].result or ""
    assert len(long_result) == 200  # a short form of the 500-character result
    assert long_result.endswith("…")
    assert all(e.duration_ms is not None and e.duration_ms >= 0 for e in ends.values())
    updates = agent.tool_events("update")
    assert [(e.call_id, e.name, e.update) for e in updates] == [
        ("t-progress", "progress", "step 1 of 2"),
        ("t-progress", "progress", "step 2 of 2"),
    ]
    for call_id in starts:  # per call: start, its updates, then end
        phases = [e.phase for e in tool_events if e.call_id == call_id]
        assert phases[0] == "start"
        assert phases[-1] == "end"
        assert phases.count("start") == phases.count("end") == 1
    kinds = [type(event).__name__ for event in agent.events]
    assert kinds[0] == kinds[-1] == "LifecycleEvent"  # tool events happen inside the run's lifecycle


# --- 12-13. provider failures -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("status", "error_kind"), [(401, "auth"), (500, "server"), (429, "rate_limit")])
async def test_an_http_error_from_the_model_raises_a_classified_provider_error(
    agent: Agent, status: int, error_kind: str
) -> None:
    agent.llm.script(Reply.error(status))
    with pytest.raises(ProviderError) as caught:
        await agent.ask("Hello?")
    assert (caught.value.kind, caught.value.status) == (error_kind, status)
    start, error = agent.lifecycle()
    assert (start.phase, error.phase) == ("start", "error")
    assert error.run_id == start.run_id
    assert (error.error or "").startswith(f"{error_kind}: ")
    assert "sk-test-loop" not in (error.error or "")


async def test_a_failure_after_a_tool_round_also_raises(agent: Agent) -> None:
    add = Add()
    agent.llm.script(Reply.tool_calls(ToolCallSpec("add", {"a": 1, "b": 1})), Reply.error(503))
    with pytest.raises(ProviderError) as caught:
        await agent.ask("1 + 1?", add)
    assert caught.value.kind == "server"
    assert add.seen == [AddArgs(a=1, b=1)]
    assert [event.phase for event in agent.lifecycle()] == ["start", "error"]


@pytest.mark.parametrize("abrupt", [True, False])
async def test_a_stream_cut_midway_raises_a_network_error(agent: Agent, abrupt: bool) -> None:
    agent.llm.script(Reply.cut_after_text("Half an ans", abrupt=abrupt))
    with pytest.raises(ProviderError) as caught:
        await agent.ask("Tell me everything.")
    assert caught.value.kind == "network"
    assert "".join(agent.deltas()) == "Half an ans"  # what arrived was still streamed
    assert [event.phase for event in agent.lifecycle()] == ["start", "error"]
