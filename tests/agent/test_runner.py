"""The outer runner against a real local LLM server: key rotation and cooldowns, model fallback, compaction on
overflow, time limits, waiting on runs, and never retrying once a turn has shown output or run tools."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, cast

import pytest
from fakes.llm import FakeLLM, RecordedRequest, Reply, ToolCallSpec
from helpers import WAIT, FakeClock, eventually
from pydantic import BaseModel

from agent.compaction import SUMMARY_HEADER, SUMMARY_SYSTEM, summary_message
from agent.events import AssistantEvent, RunEvent
from agent.keys import NO_KEY, KeyPool, fingerprint
from agent.loop import Turn
from agent.messages import AssistantMessage, Message, UserMessage
from agent.providers.base import Provider
from agent.providers.config import ModelOptions, split_model
from agent.runner import STOPPED_PARTWAY, ModelCandidate, Runner, RunnerEvent, RunOutcome, RunSpec
from agent.sessions import append_compaction, append_transcript, load_history, load_transcript, transcript_for
from tools.base import RunInfo, Tool, ToolContext, ToolResult, json_result

RUN = RunInfo(agent="main", session_key="agent:main:console:direct:me")
SYSTEM = "You are a careful test agent."
GRACE = 5.0  # the runner's grace period after a time limit: here it passes only when a test expires it
K1 = "sk-first-key-1111-aaaa"
K2 = "sk-second-key-2222-bbbb"
K3 = "sk-third-key-3333-cccc"
Kind = Literal["openai", "anthropic"]


class Timers:
    """The runner's waits (time limits, grace periods, retry delays) in the test's hands: a wait of 0 s ends at once,
    any other only when the test calls `expire`, so no limit strikes by chance on a slow machine."""

    def __init__(self) -> None:
        self.waiting: list[tuple[float, asyncio.Future[None]]] = []

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            return
        entry = (seconds, asyncio.get_running_loop().create_future())
        self.waiting.append(entry)
        try:
            await entry[1]
        finally:
            self.waiting.remove(entry)

    async def expire(self, seconds: float) -> None:
        """End the runner's wait of `seconds` (waiting for it to begin, if need be)."""
        await eventually(lambda: any(length == seconds for length, _ in self.waiting), f"a wait of {seconds:g} s")
        for length, ends in self.waiting:
            if length == seconds and not ends.done():
                ends.set_result(None)


class NoArgs(BaseModel):
    pass


class Count(Tool):
    """Counts its calls: the side effect a retry must not repeat."""

    name = "count"
    description = "Count one."
    parameters = NoArgs

    def __init__(self) -> None:
        self.calls = 0

    async def execute(self, call_id: str, args: Any, ctx: ToolContext) -> ToolResult:
        self.calls += 1
        return json_result({"count": self.calls})


@dataclass
class Harness:
    llm: FakeLLM
    clock: FakeClock
    timers: Timers
    pool: KeyPool
    runner: Runner
    decisions: list[RunnerEvent] = field(default_factory=list)
    run_events: list[RunEvent] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    compacted: list[tuple[str, list[Message]]] = field(default_factory=list)
    tools: Sequence[Tool] = ()

    def candidate(self, ref: str, kind: Kind = "openai", **settings: Any) -> ModelCandidate:
        provider_name, model_id = split_model(ref)
        return ModelCandidate(ref, provider_name, model_id, self.llm.provider_config(kind, **settings))

    async def record(self, event: RunEvent) -> None:
        self.run_events.append(event)

    async def decide(self, event: RunnerEvent) -> None:
        self.decisions.append(event)

    async def on_compacted(self, summary: str, kept: list[Message]) -> None:
        self.compacted.append((summary, kept))

    def make_turn(self, candidate: ModelCandidate, provider: Provider, api_key: str | None) -> Turn:
        turn = Turn(
            provider=provider, model=candidate.model_id, system=SYSTEM, run=RUN, tools=self.tools, emit=self.record
        )
        self.turns.append(turn)
        return turn

    def spec(self, *candidates: ModelCandidate, text: str = "Hello?", **fields: Any) -> RunSpec:
        fields.setdefault("run_id", f"run_{len(self.turns)}_{len(self.decisions)}_{len(self.llm.requests)}")
        fields.setdefault("history", [])
        return RunSpec(
            session_key=RUN.session_key,
            candidates=list(candidates),
            make_turn=fields.pop("make_turn", self.make_turn),
            user=UserMessage.of(text),
            on_compacted=fields.pop("on_compacted", self.on_compacted),
            emit=self.decide,
            **fields,
        )

    async def ask(self, *candidates: ModelCandidate, **fields: Any) -> RunOutcome:
        return await asyncio.wait_for(self.runner.run(self.spec(*candidates, **fields)), WAIT)

    def keys_sent(self) -> list[str | None]:
        return [sent_key(request) for request in self.llm.requests]

    def models_asked(self) -> list[str]:
        return [cast(dict[str, Any], request.body)["model"] for request in self.llm.requests]

    def kinds(self) -> list[str]:
        return [event.decision for event in self.decisions]


def sent_key(request: RecordedRequest) -> str | None:
    if "x-api-key" in request.headers:
        return request.headers["x-api-key"]
    authorization = request.headers.get("authorization")
    return authorization.removeprefix("Bearer ") if authorization else None


@pytest.fixture
async def h(fake_llm: FakeLLM) -> AsyncIterator[Harness]:
    clock, timers = FakeClock(), Timers()
    pool = KeyPool(clock=clock)
    runner = Runner(key_pool=pool, sleep=timers.sleep, server_retry_delay=0, cancel_grace_seconds=GRACE)
    try:
        yield Harness(fake_llm, clock, timers, pool, runner)
    finally:
        await runner.aclose()


def text_of(message: Message) -> str:
    if isinstance(message, AssistantMessage):
        return message.text
    return "\n".join(getattr(block, "text", "") for block in message.content)


def openai_text(message: dict[str, Any]) -> str:
    content = message["content"]
    return content if isinstance(content, str) else "".join(part.get("text", "") for part in content)


def history_of(turns: int) -> list[Message]:
    history: list[Message] = []
    for number in range(1, turns + 1):
        history += [UserMessage.of(f"question {number}"), AssistantMessage(text=f"answer {number}")]
    return history


# --- the key pool on its own --------------------------------------------------------------------------------------


def test_keys_are_taken_in_order_and_a_cooling_key_is_skipped_until_its_cooldown_passes() -> None:
    clock = FakeClock()
    pool = KeyPool(clock=clock, auth_cooldown=60)
    assert pool.next_key("p", [K1, K2]) == K1
    assert pool.cool("p", K1, "auth") == 60
    assert pool.next_key("p", [K1, K2]) == K2
    assert pool.next_key("other", [K1, K2]) == K1  # cooldowns belong to one provider
    pool.cool("p", K2, "auth")
    assert pool.next_key("p", [K1, K2]) is None
    assert pool.free_in("p", [K1, K2]) == 60
    clock.advance(59.5)
    assert pool.next_key("p", [K1, K2]) is None
    clock.advance(0.5)
    assert pool.next_key("p", [K1, K2]) == K1
    assert pool.next_key("p", [K1, K2], skip={K1}) == K2


def test_a_provider_without_keys_yields_no_key_which_is_not_none_and_can_cool_too() -> None:
    clock = FakeClock()
    pool = KeyPool(clock=clock)
    assert pool.next_key("local", []) == NO_KEY
    assert pool.next_key("local", []) is not None
    pool.cool("local", NO_KEY, "rate_limit", retry_after=10)
    assert pool.next_key("local", []) is None
    clock.advance(10)
    assert pool.next_key("local", []) == NO_KEY


def test_rate_limits_double_the_cooldown_until_the_key_succeeds_and_retry_after_wins() -> None:
    pool = KeyPool(clock=FakeClock(), rate_limit_cooldown=300, rate_limit_max=1000)
    assert [pool.cool("p", K1, "rate_limit") for _ in range(4)] == [300, 600, 1000, 1000]
    assert pool.cool("p", K1, "rate_limit", retry_after=7) == 7
    pool.succeeded("p", K1)
    assert pool.cooling_for("p", K1) == 0
    assert pool.cool("p", K1, "rate_limit") == 300


def test_a_fingerprint_is_short_stable_and_not_the_key() -> None:
    assert fingerprint(K1) == fingerprint(K1) != fingerprint(K2)
    assert len(fingerprint(K1)) == 8
    assert fingerprint(K1) not in K1
    assert fingerprint(NO_KEY) == "none"


# --- keys: rotation and cooldowns ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_a_rejected_key_cools_down_and_the_next_key_answers(h: Harness, kind: Kind) -> None:
    model = h.candidate("alpha/model-a", kind, api_keys=[K1, K2])
    h.llm.script(Reply.error(401), "Hi there.")
    outcome = await h.ask(model, run_id="run_one")
    assert outcome.status == "ok"
    assert outcome.result is not None and outcome.result.text == "Hi there."
    assert outcome.model_ref == "alpha/model-a"
    assert h.keys_sent() == [K1, K2]
    [rotated] = h.decisions
    assert (rotated.run_id, rotated.decision, rotated.model, rotated.key_index) == (
        "run_one",
        "next_key",
        "alpha/model-a",
        0,
    )
    assert (rotated.error_kind, rotated.cooldown_seconds, rotated.key_hash) == ("auth", 3600, fingerprint(K1))
    assert all(turn.run_id == "run_one" for turn in h.turns)  # every attempt's events carry the run's id

    h.llm.script("Still here.")
    await h.ask(model)
    assert h.keys_sent()[2:] == [K2]  # the cooling key is skipped without a request

    h.clock.advance(3600)
    h.llm.script("Back again.")
    await h.ask(model)
    assert h.keys_sent()[3:] == [K1]  # its cooldown passed


async def test_a_rate_limit_cools_the_key_for_the_retry_after_the_server_gave(h: Harness) -> None:
    model = h.candidate("alpha/model-a", api_keys=[K1, K2])
    h.llm.script(Reply.error(429, retry_after=30), "Fine.")
    outcome = await h.ask(model)
    assert outcome.status == "ok"
    assert h.keys_sent() == [K1, K2]
    assert h.pool.cooling_for("alpha", K1) == 30
    assert h.decisions[0].cooldown_seconds == 30
    h.clock.advance(29)
    h.llm.script("Second.")
    await h.ask(model)
    h.clock.advance(1)
    h.llm.script("Third.")
    await h.ask(model)
    assert h.keys_sent()[2:] == [K2, K1]


async def test_rate_limits_without_retry_after_double_until_the_key_works_again(h: Harness) -> None:
    model = h.candidate("alpha/model-a", api_keys=[K1, K2])
    h.llm.script(Reply.error(429), "one")
    await h.ask(model)
    h.clock.advance(300)
    h.llm.script(Reply.error(429), "two")
    await h.ask(model)
    h.clock.advance(600)
    h.llm.script("three")  # K1 works: its run of rate limits is over
    await h.ask(model)
    h.llm.script(Reply.error(429), "four")
    await h.ask(model)
    assert h.keys_sent() == [K1, K2, K1, K2, K1, K1, K2]
    assert [event.cooldown_seconds for event in h.decisions] == [300, 600, 300]


async def test_a_provider_without_keys_sends_no_key(h: Harness) -> None:
    h.llm.script("Local answer.")
    outcome = await h.ask(h.candidate("local/llama"))
    assert outcome.status == "ok"
    assert h.keys_sent() == [None]
    assert h.turns[0].api_key is None


# --- model fallback -----------------------------------------------------------------------------------------------


async def test_when_every_key_is_cooling_the_fallback_answers_without_a_request_to_the_first(h: Harness) -> None:
    first = h.candidate("alpha/model-a", api_keys=[K1, K2])
    second = h.candidate("beta/model-b", api_key=K3)
    h.pool.cool("alpha", K1, "rate_limit")
    h.pool.cool("alpha", K2, "rate_limit", retry_after=45)
    h.llm.script("From b.")
    outcome = await h.ask(first, second)
    assert outcome.status == "ok"
    assert outcome.model_ref == "beta/model-b"
    assert (h.models_asked(), h.keys_sent()) == (["model-b"], [K3])
    [moved] = h.decisions
    assert (moved.decision, moved.model, moved.error_kind) == ("next_model", "alpha/model-a", None)
    assert "cooling" in moved.reason and "45 s" in moved.reason


async def test_when_every_key_is_refused_the_fallback_model_answers(h: Harness) -> None:
    first = h.candidate("alpha/model-a", api_keys=[K1, K2])
    second = h.candidate("beta/model-b", "anthropic", api_key=K3)
    h.llm.script(Reply.error(401), Reply.error(401), "From b.")
    outcome = await h.ask(first, second)
    assert outcome.status == "ok"
    assert h.keys_sent() == [K1, K2, K3]
    assert h.models_asked() == ["model-a", "model-a", "model-b"]
    assert h.kinds() == ["next_key", "next_model"]


async def test_a_server_error_is_retried_once_on_the_same_model_then_the_fallback_answers(h: Harness) -> None:
    first, second = h.candidate("alpha/model-a", api_key=K1), h.candidate("beta/model-b", api_key=K3)
    h.llm.script(Reply.error(500), Reply.error(503), "From b.")
    outcome = await h.ask(first, second)
    assert outcome.status == "ok"
    assert outcome.result is not None and outcome.result.text == "From b."
    assert h.models_asked() == ["model-a", "model-a", "model-b"]
    assert h.kinds() == ["retry", "next_model"]
    assert [event.error_kind for event in h.decisions] == ["server", "server"]
    assert h.pool.cooling_for("alpha", K1) == 0  # a server error says nothing about the key


async def test_one_server_error_is_absorbed_by_the_retry(h: Harness) -> None:
    first, second = h.candidate("alpha/model-a", api_key=K1), h.candidate("beta/model-b", api_key=K3)
    h.llm.script(Reply.error(503), "Second try.")
    outcome = await h.ask(first, second)
    assert outcome.result is not None and outcome.result.text == "Second try."
    assert h.models_asked() == ["model-a", "model-a"]


async def test_a_bad_request_goes_straight_to_the_fallback(h: Harness) -> None:
    first, second = h.candidate("alpha/model-a", api_key=K1), h.candidate("beta/model-b", api_key=K3)
    h.llm.script(Reply.error(404), "From b.")
    outcome = await h.ask(first, second)
    assert outcome.status == "ok"
    assert h.models_asked() == ["model-a", "model-b"]
    [moved] = h.decisions
    assert (moved.decision, moved.error_kind) == ("next_model", "bad_request")


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_a_rejected_thinking_level_is_retried_one_level_lower(h: Harness, kind: Kind) -> None:
    model = replace(h.candidate("alpha/model-a", kind, api_key=K1), options=ModelOptions(thinking="high"))
    h.llm.script(
        Reply.error(400, message="reasoning_effort 'high' is not supported by this model"),
        Reply.error(400, message="thinking is not supported at level medium"),
        "Thought about it.",
    )
    outcome = await h.ask(model)
    assert outcome.status == "ok"
    bodies = [cast(dict[str, Any], request.body) for request in h.llm.requests]
    if kind == "openai":
        assert [body.get("reasoning_effort") for body in bodies] == ["high", "medium", "low"]
    else:
        assert [body["thinking"]["budget_tokens"] for body in bodies] == [16384, 4096, 1024]
        assert all(body["max_tokens"] > body["thinking"]["budget_tokens"] for body in bodies)
    assert h.kinds() == ["retry", "retry"]


async def test_a_bad_request_about_something_else_does_not_touch_the_thinking_level(h: Harness) -> None:
    first = replace(h.candidate("alpha/model-a", api_key=K1), options=ModelOptions(thinking="low"))
    second = h.candidate("beta/model-b", api_key=K3)
    h.llm.script(Reply.error(400, message="messages: field required"), "From b.")
    outcome = await h.ask(first, second)
    assert outcome.status == "ok"
    assert h.models_asked() == ["model-a", "model-b"]
    assert "reasoning_effort" not in cast(dict[str, Any], h.llm.requests[1].body)


# --- compaction on context overflow -------------------------------------------------------------------------------


async def test_an_overflow_compacts_the_history_and_retries_with_the_summary_first(h: Harness) -> None:
    model = h.candidate("alpha/model-a", api_key=K1)
    history = history_of(6)
    h.llm.script(Reply.context_overflow(), "The user asked questions 1 and 2.", "Answer 7.")
    outcome = await h.ask(model, history=history, text="question 7")
    assert outcome.status == "ok"
    assert outcome.result is not None and outcome.result.text == "Answer 7."
    assert len(h.llm.requests) == 3
    assert h.kinds() == ["compact"]
    assert h.decisions[0].error_kind == "context_overflow"

    summarizing = cast(dict[str, Any], h.llm.requests[1].body)
    assert summarizing["messages"][0] == {"role": "system", "content": SUMMARY_SYSTEM}
    assert "tools" not in summarizing
    asked = openai_text(summarizing["messages"][1])
    assert "question 1" in asked and "answer 2" in asked
    assert "question 3" not in asked  # the last four turns are kept verbatim, not summarized

    retried = cast(dict[str, Any], h.llm.requests[2].body)["messages"]
    assert retried[0]["role"] == "system"
    assert openai_text(retried[1]).startswith(SUMMARY_HEADER)
    assert "The user asked questions 1 and 2." in openai_text(retried[1])
    assert [openai_text(message) for message in retried[2:]] == [text_of(m) for m in history[4:]] + ["question 7"]

    [(summary, kept)] = h.compacted
    assert summary == "The user asked questions 1 and 2."
    assert kept == history[4:]
    assert outcome.history == [summary_message(summary), *kept]
    assert outcome.compaction is not None and outcome.compaction.summarized == 4


async def test_a_compaction_is_recorded_in_the_transcript_and_the_next_run_starts_at_it(
    h: Harness, tmp_path: Path
) -> None:
    path = transcript_for(tmp_path, "Zq3_x-9KpL0mN2bV4cX6zA")
    model = h.candidate("alpha/model-a", api_key=K1)
    history = history_of(6)
    await append_transcript(path, history)
    h.llm.script(Reply.context_overflow(), "The user asked questions 1 and 2.", "Answer 7.")

    async def on_compacted(summary: str, kept: list[Message]) -> None:
        await append_compaction(path, summary, kept)  # as the bot does

    outcome = await h.ask(model, history=load_history(path), text="question 7", on_compacted=on_compacted)
    assert outcome.status == "ok"
    await append_transcript(path, outcome.messages)

    summary = summary_message("The user asked questions 1 and 2.")
    assert load_history(path) == [summary, *history[4:], *outcome.messages]
    assert load_transcript(path) == [*history, summary, *history[4:], *outcome.messages]  # nothing lost on disk

    h.llm.script("Answer 8.")
    await h.ask(model, history=load_history(path), text="question 8")
    sent = cast(dict[str, Any], h.llm.requests[-1].body)["messages"]
    assert openai_text(sent[1]) == text_of(summary)
    assert "question 1" not in str(sent)


async def test_a_second_overflow_moves_on_and_the_fallback_gets_the_compacted_history(h: Harness) -> None:
    first, second = h.candidate("alpha/model-a", api_key=K1), h.candidate("beta/model-b", api_key=K3)
    h.llm.script(Reply.context_overflow(), "Summary.", Reply.context_overflow(), "From b.")
    outcome = await h.ask(first, second, history=history_of(3))
    assert outcome.status == "ok"
    assert h.models_asked() == ["model-a", "model-a", "model-a", "model-b"]
    assert h.kinds() == ["compact", "next_model"]
    sent = cast(dict[str, Any], h.llm.requests[3].body)["messages"]
    assert openai_text(sent[1]).startswith(SUMMARY_HEADER)
    assert len(h.compacted) == 1


async def test_an_overflow_without_history_cannot_be_compacted_and_moves_on(h: Harness) -> None:
    first, second = h.candidate("alpha/model-a", api_key=K1), h.candidate("beta/model-b", api_key=K3)
    h.llm.script(Reply.context_overflow(), "From b.")
    outcome = await h.ask(first, second, text="x" * 1000)
    assert outcome.status == "ok"
    assert h.models_asked() == ["model-a", "model-b"]
    assert h.compacted == []


# --- time limits --------------------------------------------------------------------------------------------------


async def test_a_run_past_its_time_limit_is_stopped_through_the_turns_cancel(h: Harness) -> None:
    h.llm.script(Reply.held("Let me think"))  # never finished
    spec = h.spec(h.candidate("alpha/model-a", api_key=K1), timeout_seconds=0.3)
    running = asyncio.create_task(h.runner.run(spec))
    await eventually(lambda: any(isinstance(e, AssistantEvent) for e in h.run_events), "the model's first words")
    h.clock.advance(0.3)
    await h.timers.expire(0.3)  # the limit passes while the model is writing
    outcome = await asyncio.wait_for(running, WAIT)
    assert outcome.status == "timeout"
    [turn] = h.turns
    assert turn.cancel.is_set()
    assert outcome.result is None
    assert outcome.partial_messages == [spec.user]  # the cancelled turn, for the transcript
    assert outcome.user_message == "Sorry — this took longer than my 0.3-second limit, so I stopped."
    assert h.kinds() == ["timeout"]


async def test_a_turn_that_ignores_its_cancel_is_cancelled_after_the_grace_period(h: Harness) -> None:
    never = asyncio.Event()

    async def stuck(candidate: ModelCandidate, provider: Provider, api_key: str | None) -> Turn:
        await never.wait()
        raise AssertionError("unreachable")

    spec = h.spec(h.candidate("alpha/model-a"), make_turn=stuck, timeout_seconds=0.1)
    running = asyncio.create_task(h.runner.run(spec))
    await h.timers.expire(0.1)  # the limit passes: the turn is told to stop...
    await h.timers.expire(GRACE)  # ...and has not stopped when the grace period is over
    outcome = await asyncio.wait_for(running, WAIT)
    assert outcome.status == "timeout"
    assert outcome.partial_messages == []
    assert h.kinds() == ["timeout", "timeout"]
    assert "cancelling" in h.decisions[1].reason


async def test_in_real_time_the_limit_and_the_grace_period_are_the_event_loop_s_timers(h: Harness) -> None:
    """Without a sleep of its own, the runner waits out the limit and the grace period on the loop's timers (no
    task sleeps for them): a stuck turn still ends as a timeout, cancelled once the grace period is over."""
    never = asyncio.Event()

    async def stuck(candidate: ModelCandidate, provider: Provider, api_key: str | None) -> Turn:
        await never.wait()
        raise AssertionError("unreachable")

    runner = Runner(cancel_grace_seconds=0.01)
    try:
        spec = h.spec(h.candidate("alpha/model-a"), make_turn=stuck, timeout_seconds=0.01)
        outcome = await asyncio.wait_for(runner.run(spec), WAIT)
    finally:
        await runner.aclose()
    assert outcome.status == "timeout"
    assert h.kinds() == ["timeout", "timeout"]
    assert "cancelling" in h.decisions[1].reason


async def test_no_retry_once_a_tool_has_run(h: Harness) -> None:
    count = Count()
    h.tools = [count]
    first, second = h.candidate("alpha/model-a", api_key=K1), h.candidate("beta/model-b", api_key=K3)
    h.llm.script(Reply.tool_calls(ToolCallSpec("count", {}, id="c1")), Reply.error(500), "never sent")
    outcome = await h.ask(first, second)
    assert outcome.status == "error"
    assert count.calls == 1
    assert len(h.llm.requests) == 2  # no retry on model-a, no fallback to model-b
    assert [message.role for message in outcome.partial_messages] == ["user", "assistant", "tool"]
    assert outcome.messages == outcome.partial_messages
    assert outcome.user_message == STOPPED_PARTWAY
    assert h.kinds() == ["stop"]


async def test_no_retry_once_text_was_shown(h: Harness) -> None:
    first, second = h.candidate("alpha/model-a", api_key=K1), h.candidate("beta/model-b", api_key=K3)
    h.llm.script(Reply.stream_error(after_text="The answer is"), "never sent")
    outcome = await h.ask(first, second)
    assert outcome.status == "error"
    assert len(h.llm.requests) == 1
    assert outcome.user_message == STOPPED_PARTWAY
    assert h.kinds() == ["stop"]


# --- when everything fails ----------------------------------------------------------------------------------------


async def test_when_every_key_is_refused_the_person_gets_one_sentence_and_no_key_anywhere(
    h: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    first = h.candidate("alpha/model-a", api_keys=[K1, K2])
    second = h.candidate("beta/model-b", "anthropic", api_key=K3)
    h.llm.script(Reply.error(401), Reply.error(401), Reply.error(401))  # each 401 body echoes the key it got
    with caplog.at_level(logging.INFO, logger="agent.runner"):
        outcome = await h.ask(first, second)
    assert outcome.status == "error"
    assert outcome.result is None and outcome.partial_messages == []
    assert outcome.user_message == (
        "Sorry — I can't use the model right now: its API key was refused. Please tell whoever runs this bot."
    )
    assert outcome.reason is not None and "alpha/model-a key #1: auth" in outcome.reason
    assert h.kinds() == ["next_key", "next_model", "give_up"]
    everything = "\n".join(
        [outcome.user_message, outcome.reason, caplog.text, *(event.model_dump_json() for event in h.decisions)]
    )
    for key in (K1, K2, K3):
        assert key not in everything
    assert "Traceback" not in everything


async def test_when_every_model_is_down_the_sentence_counts_the_models_tried(h: Harness) -> None:
    first, second = h.candidate("alpha/model-a", api_key=K1), h.candidate("beta/model-b", api_key=K3)
    h.llm.script(*[Reply.error(500)] * 4)
    outcome = await h.ask(first, second)
    assert outcome.status == "error"
    assert (
        outcome.user_message
        == "Sorry — the model is not answering right now (tried 2 models). Please try again in a minute."
    )
    assert h.kinds() == ["retry", "next_model", "retry", "give_up"]


async def test_when_every_key_is_rate_limited_the_sentence_says_so(h: Harness) -> None:
    h.llm.script(Reply.error(429))
    outcome = await h.ask(h.candidate("alpha/model-a", api_key=K1))
    assert outcome.user_message is not None and "rate limit" in outcome.user_message
    assert "tried 1 model)" in outcome.user_message


async def test_a_run_without_candidates_fails_honestly(h: Harness) -> None:
    outcome = await h.ask()
    assert outcome.status == "error"
    assert outcome.user_message == "Sorry — no model is configured for me, so I can't answer."
