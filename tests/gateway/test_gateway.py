"""The gateway end to end: the real loopback adapter polling a fake bridge over HTTP, the real SQLite store in a
temporary state directory, and the fake LLM server. Tests wait for events with generous timeouts, not for time."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from configs import config_of, loopback
from fakes.bridge import FakeBridge
from fakes.llm import FakeLLM, Reply, ToolCallSpec
from helpers import WAIT, FakeClock, eventually, read_state, unstamped
from pydantic import BaseModel

from agent.messages import AssistantMessage, UserMessage
from agent.runner import Runner, RunOutcome, RunSpec
from agent.sessions import read_transcript, transcript_for
from bot.app import App
from bot.config.settings import Config
from bot.gateway.process import Gateway
from bot.intake.access import MAX_PENDING_PAIRINGS
from bot.intake.commands import HELP
from bot.intake.handlers import PAIR_MISS_WINDOW_SECONDS
from bot.store import SqliteStore
from channels.base import Capabilities, ChannelAdapter, ChatTarget, OnAction, OnMessage, OutboundMessage
from tools.base import Tool, ToolContext, ToolResult, json_result
from tools.registry import ToolRegistry

DM_KEY = "agent:main:loopback:direct:{}"


# --- helpers ----------------------------------------------------------------------------------------------------


def make_config(llm: FakeLLM, bridge: FakeBridge, tmp_path: Path, **extra: Any) -> Config:
    """The loopback account on `bridge`, one turn per message; `extra` merged over it, key by key."""
    timeout = {"providers": {"fake": {"timeout_seconds": 60}}}
    session = {"session": {"queue": {"mode": "followup", "debounce_ms": 50}}}
    return config_of(tmp_path, llm, loopback(bridge), timeout, session, **extra)


async def acknowledged(bridge: FakeBridge, update: dict[str, Any]) -> None:
    """Wait until the adapter has polled past `update`: the gateway's on_message returned for it."""
    await eventually(lambda: max(bridge.offsets, default=0) > update["update_id"], f"update {update['update_id']}")


def journal(state_dir: Path) -> dict[str, tuple[str, str | None]]:
    """message id -> (status, error), read straight from state.db."""
    rows = read_state(state_dir, "SELECT message_id, status, error FROM inbound ORDER BY id")
    return {message_id: (status, error) for message_id, status, error in rows}


def outbox_peers(state_dir: Path) -> list[str]:
    """The peer id of every reply the gateway has recorded for sending, sent or not, read straight from state.db."""
    rows = read_state(state_dir, "SELECT target FROM outbox ORDER BY id")
    return [json.loads(target)["peer"]["id"] for (target,) in rows]


async def _no_unsent(gateway: Gateway) -> bool:
    return await gateway.store.unsent_outbox() == []


def texts(bridge: FakeBridge) -> list[str]:
    return [body["message"]["text"] for body in bridge.sent]


def last_user_text(request_body: dict[str, Any]) -> str:
    """The text of the last user message in an OpenAI chat request."""
    return user_texts(request_body)[-1]


def user_texts(request_body: dict[str, Any]) -> list[str]:
    """The text of every user message in an OpenAI chat request, without the envelopes."""
    return [_text(message["content"]) for message in request_body["messages"] if message["role"] == "user"]


def _text(content: str | list[dict[str, Any]]) -> str:
    return unstamped(content if isinstance(content, str) else "".join(part.get("text", "") for part in content))


class _NoArgs(BaseModel):
    pass


class GateTool(Tool):
    """A tool that waits until the test opens it: a run held mid-way, released at a moment the test chooses.
    `inside` counts the runs waiting in it right now."""

    name = "gate"
    description = "Waits for the gate to open."
    parameters = _NoArgs

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.opened = asyncio.Event()
        self.inside = 0

    async def execute(self, call_id: str, args: Any, ctx: ToolContext) -> ToolResult:
        self.entered.set()
        self.inside += 1
        try:
            await self.opened.wait()
        finally:
            self.inside -= 1
        return json_result({"status": "open"})


class BrokenAdapter:
    """A ChannelAdapter whose start() fails."""

    channel = "broken"
    account = "default"
    capabilities = Capabilities()

    def __init__(self) -> None:
        self.stopped = False

    async def start(self, on_message: OnMessage, on_action: OnAction) -> None:
        raise RuntimeError("cannot connect")

    async def stop(self) -> None:
        self.stopped = True

    async def send(self, target: ChatTarget, message: OutboundMessage) -> str | None:
        raise RuntimeError("not connected")

    async def edit(self, target: ChatTarget, message_id: str, message: OutboundMessage) -> None:
        raise RuntimeError("not connected")

    async def delete(self, target: ChatTarget, message_id: str) -> None:
        raise RuntimeError("not connected")

    async def react(self, target: ChatTarget, message_id: str, emoji: str) -> None:
        raise RuntimeError("not connected")

    async def typing(self, target: ChatTarget) -> None:
        raise RuntimeError("not connected")


class Harness:
    """Starts gateways on one state directory and stops whatever is still running at the end of the test."""

    def __init__(self, llm: FakeLLM, bridge: FakeBridge, tmp_path: Path) -> None:
        self.llm = llm
        self.bridge = bridge
        self.tmp_path = tmp_path
        self.state_dir = tmp_path / "state"
        self.running: list[tuple[Gateway, SqliteStore]] = []

    def config(self, **extra: Any) -> Config:
        return make_config(self.llm, self.bridge, self.tmp_path, **extra)

    async def start(
        self,
        config: Config | None = None,
        *,
        extra_adapters: Sequence[ChannelAdapter] = (),
        runner: Runner | None = None,
        registry: ToolRegistry | None = None,
        before_start: Callable[[SqliteStore], Awaitable[None]] | None = None,
        clock: FakeClock | None = None,
    ) -> Gateway:
        """A started gateway; `clock`, if given, is the time of both the gateway and its store."""
        app = App(config or self.config(), self.state_dir, runner=runner, clock=clock or time.time)
        adapters, skipped = app.adapters()
        assert skipped == []
        store = await SqliteStore.open(self.state_dir, clock=clock or time.time)
        if before_start is not None:
            await before_start(store)
        gateway = Gateway(app, store, [*extra_adapters, *adapters], registry=registry)
        self.running.append((gateway, store))
        await gateway.start()
        return gateway

    async def stop(self, gateway: Gateway, grace: float = 5.0) -> None:
        for entry in list(self.running):
            if entry[0] is gateway:
                self.running.remove(entry)
                await gateway.stop(grace)
                await entry[1].close()

    async def close(self) -> None:
        for gateway, _ in list(self.running):
            await self.stop(gateway, grace=0.5)


@pytest.fixture
async def harness(fake_llm: FakeLLM, bridge: FakeBridge, tmp_path: Path) -> AsyncIterator[Harness]:
    setup = Harness(fake_llm, bridge, tmp_path)
    try:
        yield setup
    finally:
        await setup.close()


# --- 1. one DM, one reply ---------------------------------------------------------------------------------------


async def test_a_dm_gets_one_reply_and_is_recorded(harness: Harness, fake_llm: FakeLLM, bridge: FakeBridge) -> None:
    fake_llm.script(Reply.text("Hello, Ann!", usage=(30, 7)))
    gateway = await harness.start()

    await bridge.say("hi there", sender="ann", message_id="m-hi")
    await bridge.wait_for_sends(1)

    assert texts(bridge) == ["Hello, Ann!"]
    assert bridge.sent[0]["target"]["peer"] == {"kind": "direct", "id": "ann"}
    assert len(fake_llm.requests) == 1
    assert last_user_text(fake_llm.requests[0].body) == "hi there"

    key = DM_KEY.format("ann")
    await eventually(lambda: journal(harness.state_dir).get("m-hi", ("", None))[0] == "done", "the journal row")
    session = await gateway.store.get_session(key)
    assert session is not None
    assert session.agent == "main"
    assert session.model == "fake/m"
    assert (session.input_tokens, session.output_tokens) == (30, 7)
    assert session.last_channel == "loopback"

    messages = await read_transcript(transcript_for(harness.state_dir, session.session_id))
    assert [type(message) for message in messages] == [UserMessage, AssistantMessage]
    assert isinstance(messages[1], AssistantMessage) and messages[1].text == "Hello, Ann!"
    assert "hi there" in messages[0].model_dump_json()
    assert await gateway.store.unfinished_inbound() == []
    assert await gateway.store.unsent_outbox() == []


# --- 2. duplicate deliveries --------------------------------------------------------------------------------------


async def test_a_message_delivered_twice_is_answered_once(
    harness: Harness, fake_llm: FakeLLM, bridge: FakeBridge
) -> None:
    fake_llm.script("Only once.")
    gateway = await harness.start()

    await bridge.say("hello", sender="bo", message_id="same-id")
    second = await bridge.say("hello", sender="bo", message_id="same-id")
    await acknowledged(bridge, second)
    await bridge.wait_for_sends(1)
    await eventually(lambda: journal(harness.state_dir)["same-id"][0] == "done", "the journal row")
    assert texts(bridge) == ["Only once."]
    assert len(fake_llm.requests) == 1

    # A restart forgets the adapter's offset: the bridge hands every update over again; the journal drops them.
    await harness.stop(gateway)
    polls_before = len(bridge.offsets)
    fake_llm.script("Must not be used.")
    await harness.start()
    await eventually(
        lambda: any(offset > second["update_id"] for offset in bridge.offsets[polls_before:]),
        "the restarted adapter to poll past the redelivered updates",
    )
    assert 0 in bridge.offsets[polls_before:]  # it really started over from the beginning
    assert texts(bridge) == ["Only once."]
    assert len(fake_llm.requests) == 1
    assert list(journal(harness.state_dir)) == ["same-id"]


# --- 3. order within a session ------------------------------------------------------------------------------------


async def test_followup_answers_quick_messages_one_by_one_in_order(
    harness: Harness, fake_llm: FakeLLM, bridge: FakeBridge
) -> None:
    fake_llm.script("answer one", "answer two", "answer three")
    await harness.start()

    for text in ("one", "two", "three"):
        await bridge.say(text, sender="cy")
    await bridge.wait_for_sends(3)

    assert texts(bridge) == ["answer one", "answer two", "answer three"]
    assert [last_user_text(request.body) for request in fake_llm.requests] == ["one", "two", "three"]
    # Each turn saw the turns before it: they ran one after the other, not side by side.
    assert user_texts(fake_llm.requests[2].body) == ["one", "two", "three"]


async def test_collect_folds_a_burst_during_a_busy_run_into_one_turn(
    harness: Harness, fake_llm: FakeLLM, bridge: FakeBridge
) -> None:
    gate = GateTool()
    fake_llm.script(Reply.tool_calls(ToolCallSpec("gate")), "first answer", "combined answer")
    gateway = await harness.start(
        harness.config(session={"queue": {"mode": "collect", "debounce_ms": 50}}), registry=ToolRegistry([gate])
    )
    key = DM_KEY.format("di")

    await bridge.say("first", sender="di")
    await eventually(gate.entered.is_set, "the run to reach the gate")
    for text in ("second", "third", "fourth"):
        await bridge.say(text, sender="di")
    await eventually(lambda: gateway.lanes.depth(key) == 3, "the burst to queue behind the running turn")
    gate.opened.set()
    await bridge.wait_for_sends(2)

    assert texts(bridge) == ["first answer", "combined answer"]
    assert len(fake_llm.requests) == 3  # the first turn's two model calls, then one for the whole burst
    combined = last_user_text(fake_llm.requests[2].body)
    assert re.search(r"second.*\n.*third.*\n.*fourth", combined), combined
    await eventually(lambda: all(status == "done" for status, _ in journal(harness.state_dir).values()), "journal")
    assert len(journal(harness.state_dir)) == 4


async def test_messages_folded_at_the_queue_cap_are_all_answered_and_closed(
    harness: Harness, fake_llm: FakeLLM, bridge: FakeBridge
) -> None:
    gate = GateTool()
    fake_llm.script(Reply.tool_calls(ToolCallSpec("gate")), "first answer", "combined answer")
    gateway = await harness.start(
        harness.config(session={"queue": {"mode": "collect", "debounce_ms": 50, "cap": 2}}),
        registry=ToolRegistry([gate]),
    )
    key = DM_KEY.format("eve")

    await bridge.say("first", sender="eve", message_id="q0")
    await eventually(gate.entered.is_set, "the run to reach the gate")
    for number in (1, 2, 3):
        await bridge.say(f"queued {number}", sender="eve", message_id=f"q{number}")
    await bridge.wait_for_sends(1)  # the notice that the oldest were combined
    assert texts(bridge)[0].startswith("Too many messages waiting")
    assert gateway.lanes.depth(key) == 2
    gate.opened.set()
    await bridge.wait_for_sends(3)

    assert texts(bridge)[1:] == ["first answer", "combined answer"]
    combined = last_user_text(fake_llm.requests[2].body)
    assert re.search(r"queued 1.*\n.*queued 2.*\n.*queued 3", combined), combined
    # Every message folded into the summary is finished too: a restart must not answer any of them again.
    await eventually(lambda: all(status == "done" for status, _ in journal(harness.state_dir).values()), "journal")
    assert list(journal(harness.state_dir)) == ["q0", "q1", "q2", "q3"]


# --- 4. parallel sessions up to max_concurrent --------------------------------------------------------------------


async def test_sessions_run_in_parallel_up_to_max_concurrent(
    harness: Harness, fake_llm: FakeLLM, bridge: FakeBridge
) -> None:
    gate = GateTool()
    # The first two runs to reach the model call the gate and wait in it; every later model call answers at once.
    fake_llm.script(Reply.tool_calls(ToolCallSpec("gate")), Reply.tool_calls(ToolCallSpec("gate")), *["answer"] * 3)
    owners = [f"loopback:{sender}" for sender in ("p1", "p2", "p3")]  # strangers would share fewer slots
    config = harness.config(defaults={"max_concurrent": 2}, owners=owners)
    gateway = await harness.start(config, registry=ToolRegistry([gate]))

    for sender in ("p1", "p2", "p3"):
        await bridge.say(f"question from {sender}", sender=sender)
    # In parallel: two runs are in the gate at once, so both started before either finished.
    await eventually(lambda: gate.inside == 2, "two runs to wait in the gate together")
    # Never more than two: the third session waits for a slot, and has not reached the model.
    await eventually(lambda: gateway.lanes.waiting_count() == 1, "the third session to wait for a slot")
    assert gateway.lanes.running_count() == 2
    assert len(fake_llm.requests) == 2
    assert bridge.sent == []

    gate.opened.set()  # a slot frees up: the third session runs
    await bridge.wait_for_sends(3)
    assert sorted(body["target"]["peer"]["id"] for body in bridge.sent) == ["p1", "p2", "p3"]
    assert texts(bridge) == ["answer"] * 3
    assert len(fake_llm.requests) == 5  # two model calls for each gated run, one for the third


# --- 5. chat commands ---------------------------------------------------------------------------------------------


async def test_new_and_reset_start_a_new_transcript_and_keep_the_old_one(
    harness: Harness, fake_llm: FakeLLM, bridge: FakeBridge
) -> None:
    fake_llm.script("first reply", "second reply", "third reply")
    gateway = await harness.start()
    key = DM_KEY.format("ed")

    await bridge.say("remember the number 7", sender="ed")
    await bridge.wait_for_sends(1)
    first = await gateway.store.get_session(key)
    assert first is not None

    await bridge.say("/new", sender="ed")
    await bridge.wait_for_sends(2)
    assert texts(bridge)[1] == "Started a new conversation."

    await bridge.say("what number?", sender="ed")
    await bridge.wait_for_sends(3)
    second = await gateway.store.get_session(key)
    assert second is not None and second.session_id != first.session_id
    assert user_texts(fake_llm.requests[1].body) == ["what number?"]  # the old conversation is not sent again

    await bridge.say("/reset", sender="ed")
    await bridge.wait_for_sends(4)
    assert texts(bridge)[3] == "Started a new conversation."
    await bridge.say("hello again", sender="ed")
    await bridge.wait_for_sends(5)
    third = await gateway.store.get_session(key)
    assert third is not None and third.session_id not in (first.session_id, second.session_id)

    old = await read_transcript(transcript_for(harness.state_dir, first.session_id))
    middle = await read_transcript(transcript_for(harness.state_dir, second.session_id))
    new = await read_transcript(transcript_for(harness.state_dir, third.session_id))
    assert "remember the number 7" in old[0].model_dump_json() and len(old) == 2
    assert "what number?" in middle[0].model_dump_json() and len(middle) == 2
    assert "hello again" in new[0].model_dump_json() and len(new) == 2
    assert (third.input_tokens, third.output_tokens) == (21, 8)  # counted from zero again


async def test_new_as_the_very_first_message_is_answered(
    harness: Harness, fake_llm: FakeLLM, bridge: FakeBridge
) -> None:
    fake_llm.script("hi")
    await harness.start()
    await bridge.say("/new", sender="fay", message_id="cmd")
    await bridge.wait_for_sends(1)
    assert texts(bridge) == ["Started a new conversation."]
    await eventually(lambda: journal(harness.state_dir)["cmd"][0] == "done", "the command's journal row")
    await bridge.say("hello", sender="fay")
    await bridge.wait_for_sends(2)
    assert texts(bridge)[1] == "hi"


async def test_stop_cancels_the_run_and_drops_the_queue(
    harness: Harness, fake_llm: FakeLLM, bridge: FakeBridge
) -> None:
    fake_llm.script(Reply.stall(60), "after the stop")
    gateway = await harness.start()
    key = DM_KEY.format("gus")

    await bridge.say("write me a novel", sender="gus", message_id="long")
    await eventually(lambda: len(fake_llm.requests) == 1, "the run to reach the model")
    await bridge.say("and a poem", sender="gus", message_id="queued")
    await eventually(lambda: gateway.lanes.depth(key) == 1, "the second message to queue")

    await bridge.say("/stop", sender="gus", message_id="stop")
    await bridge.wait_for_sends(1)
    assert texts(bridge) == ["Stopped. 1 queued message dropped."]
    await eventually(lambda: not gateway.lanes.busy(key), "the run to end")
    assert len(fake_llm.requests) == 1  # the queued message never reached the model

    # Nothing of it is left for a restart to run again.
    await eventually(
        lambda: all(status in ("done", "failed") for status, _ in journal(harness.state_dir).values()),
        "every journal row to be finished",
    )
    assert await gateway.store.unfinished_inbound() == []

    await bridge.say("/stop", sender="gus")
    await bridge.wait_for_sends(2)
    assert texts(bridge)[1] == "Nothing was running."
    await bridge.say("still there?", sender="gus")
    await bridge.wait_for_sends(3)
    assert texts(bridge)[2] == "after the stop"


async def test_status_reports_agent_model_session_tokens_and_queue(
    harness: Harness, fake_llm: FakeLLM, bridge: FakeBridge
) -> None:
    gate = GateTool()
    fake_llm.script(Reply.text("ok", usage=(100, 20)), Reply.tool_calls(ToolCallSpec("gate")), "done", "later")
    gateway = await harness.start(registry=ToolRegistry([gate]))
    key = DM_KEY.format("hal")

    await bridge.say("hello", sender="hal")
    await bridge.wait_for_sends(1)
    await bridge.say("/status", sender="hal")
    await bridge.wait_for_sends(2)
    status = texts(bridge)[1]
    assert "Agent: main" in status
    assert "Model: fake/m" in status
    assert f"Session: {key}" in status
    assert "Tokens used: 100 in, 20 out" in status
    assert "Queue: 0 waiting" in status
    assert "answering now" not in status

    await bridge.say("hold on", sender="hal")
    await eventually(gate.entered.is_set, "the run to reach the gate")
    await bridge.say("one more", sender="hal")
    await eventually(lambda: gateway.lanes.depth(key) == 1, "the next message to queue")
    await bridge.say("/status", sender="hal")
    await bridge.wait_for_sends(3)
    assert "Queue: 1 waiting, answering now" in texts(bridge)[2]
    gate.opened.set()
    await bridge.wait_for_sends(5)
    assert texts(bridge)[3:] == ["done", "later"]


async def test_help_lists_the_commands(harness: Harness, bridge: FakeBridge, fake_llm: FakeLLM) -> None:
    await harness.start()
    await bridge.say("/help", sender="ida")
    await bridge.wait_for_sends(1)
    assert texts(bridge) == [HELP]
    assert fake_llm.requests == []


async def test_a_command_for_another_bot_goes_to_the_agent(
    harness: Harness, fake_llm: FakeLLM, bridge: FakeBridge
) -> None:
    fake_llm.script("first", "that was not for me")
    gateway = await harness.start()
    key = DM_KEY.format("jo")
    await bridge.say("hello", sender="jo")
    await bridge.wait_for_sends(1)
    before = await gateway.store.get_session(key)

    await bridge.say("/new@otherbot", sender="jo")
    await bridge.wait_for_sends(2)
    assert texts(bridge)[1] == "that was not for me"
    assert last_user_text(fake_llm.requests[1].body) == "/new@otherbot"
    after = await gateway.store.get_session(key)
    assert before is not None and after is not None and after.session_id == before.session_id


# --- 6. chunking and send retries ---------------------------------------------------------------------------------


async def test_a_long_answer_is_chunked_and_a_failed_send_is_retried_in_order(
    harness: Harness, fake_llm: FakeLLM, bridge: FakeBridge
) -> None:
    words = [f"w{n:05d}" for n in range(2000)]  # 12,000 characters
    answer = "\n".join(" ".join(words[start : start + 10]) for start in range(0, len(words), 10))
    fake_llm.script(Reply(answer=answer, chunk_size=1000))
    bridge.fail_sends = 1
    gateway = await harness.start()

    await bridge.say("tell me everything", sender="kim", message_id="big")
    await eventually(lambda: bridge.fail_sends == 0, "the first send to fail")
    await eventually(
        lambda: len(bridge.sent) >= 3 and not gateway.lanes.lane_count(), "the chunks to be delivered", timeout=30
    )
    await eventually(lambda: _no_unsent(gateway), "the outbox to drain")

    chunks = texts(bridge)
    assert len(chunks) >= 3
    assert all(len(chunk) <= 4000 for chunk in chunks)
    assert re.findall(r"w\d{5}", "\n".join(chunks)) == words  # every word once, in order
    assert len(fake_llm.requests) == 1


# --- 7. graceful shutdown -----------------------------------------------------------------------------------------


async def test_stop_lets_a_run_finish_within_the_grace_period(
    harness: Harness, fake_llm: FakeLLM, bridge: FakeBridge
) -> None:
    gate = GateTool()
    fake_llm.script(Reply.tool_calls(ToolCallSpec("gate")), "finished in time")
    gateway = await harness.start(registry=ToolRegistry([gate]))

    await bridge.say("work", sender="lu", message_id="work")
    await eventually(gate.entered.is_set, "the run to reach the gate")
    stopping = asyncio.create_task(harness.stop(gateway, grace=WAIT))
    await eventually(lambda: gateway.lanes.closed, "shutdown to begin")
    # A message that arrives during the grace period is journaled (the adapter acknowledges it), not run now.
    late = await bridge.say("late question", sender="zed", message_id="late")
    await acknowledged(bridge, late)
    gate.opened.set()
    await asyncio.wait_for(stopping, WAIT * 2)

    assert texts(bridge) == ["finished in time"]
    assert journal(harness.state_dir)["work"][0] == "done"
    assert journal(harness.state_dir)["late"][0] == "pending"

    fake_llm.script("late answer")
    await harness.start()
    await bridge.wait_for_sends(2)
    await eventually(lambda: journal(harness.state_dir)["late"][0] == "done", "the late message to be answered")
    assert bridge.texts_to("zed") == ["late answer"]
    assert len(fake_llm.requests) == 3


async def test_a_run_that_outlasts_the_grace_is_run_again_by_the_next_start(
    harness: Harness, fake_llm: FakeLLM, bridge: FakeBridge
) -> None:
    fake_llm.script(Reply.stall(60, after_text="never finished"))
    gateway = await harness.start()

    await bridge.say("slow question", sender="mo", message_id="slow")
    await eventually(lambda: len(fake_llm.requests) == 1, "the run to reach the model")
    await harness.stop(gateway, grace=0.2)

    assert bridge.sent == []
    assert journal(harness.state_dir)["slow"][0] in ("pending", "running")

    fake_llm.script("the answer, at last")
    gateway = await harness.start()
    await bridge.wait_for_sends(1)
    await eventually(lambda: journal(harness.state_dir)["slow"][0] == "done", "the re-run to finish")
    assert texts(bridge) == ["the answer, at last"]
    assert len(fake_llm.requests) == 2
    assert last_user_text(fake_llm.requests[1].body) == "slow question"
    assert user_texts(fake_llm.requests[1].body) == ["slow question"]  # the interrupted try left nothing behind
    await harness.stop(gateway)
    assert texts(bridge) == ["the answer, at last"]


# --- 8. crash containment -----------------------------------------------------------------------------------------


async def test_an_adapter_that_fails_to_start_does_not_stop_the_others(
    harness: Harness, fake_llm: FakeLLM, bridge: FakeBridge
) -> None:
    fake_llm.script("still here")
    broken = BrokenAdapter()
    gateway = await harness.start(extra_adapters=[broken])
    await bridge.say("anyone?", sender="nia")
    await bridge.wait_for_sends(1)
    assert texts(bridge) == ["still here"]
    await harness.stop(gateway)
    assert broken.stopped


class _FailingRunner(Runner):
    """Raises out of the run for one session, as a bug in the turn machinery would."""

    def __init__(self, bad_key: str) -> None:
        super().__init__()
        self.bad_key = bad_key

    async def run(self, spec: RunSpec) -> RunOutcome:
        if spec.session_key == self.bad_key:
            raise RuntimeError("boom: a bug deep inside the turn")
        return await super().run(spec)


async def test_a_turn_that_raises_gets_an_apology_and_other_sessions_keep_working(
    harness: Harness, fake_llm: FakeLLM, bridge: FakeBridge
) -> None:
    fake_llm.script("fine here", "fine again")
    await harness.start(runner=_FailingRunner(DM_KEY.format("bad")))

    await bridge.say("break", sender="bad", message_id="b1")
    await bridge.say("hello", sender="good", message_id="g1")
    await bridge.wait_for_sends(2)
    assert bridge.texts_to("good") == ["fine here"]
    [apology] = bridge.texts_to("bad")
    assert apology.startswith("Sorry") and "boom" not in apology
    await eventually(lambda: journal(harness.state_dir)["b1"] == ("failed", "RuntimeError"), "the failed row")

    await bridge.say("again", sender="good")
    await bridge.wait_for_sends(3)
    assert bridge.texts_to("good") == ["fine here", "fine again"]


async def test_a_model_error_gets_an_apology_and_other_sessions_keep_working(
    harness: Harness, fake_llm: FakeLLM, bridge: FakeBridge
) -> None:
    fake_llm.script(Reply.error(400, message="bad request: the model rejected this"), "fine")
    await harness.start()
    await bridge.say("break it", sender="ola")
    await bridge.wait_for_sends(1)
    [apology] = bridge.texts_to("ola")
    assert apology.startswith("Sorry")
    await bridge.say("hello", sender="pat")
    await bridge.wait_for_sends(2)
    assert bridge.texts_to("pat") == ["fine"]


# --- 9. recovery --------------------------------------------------------------------------------------------------


async def test_recovery_sends_the_outbox_and_does_not_answer_twice(
    harness: Harness, fake_llm: FakeLLM, bridge: FakeBridge
) -> None:
    target = {"channel": "loopback", "account": "default", "peer": {"kind": "direct", "id": "quinn"}}

    async def leftovers(store: SqliteStore) -> None:
        await store.enqueue_outbox(
            inbound_id=None, channel="loopback", account="default", target=target, payload={"text": "left over 1"}
        )
        payload = {
            "channel": "loopback",
            "account": "default",
            "peer": {"kind": "direct", "id": "quinn"},
            "sender_id": "quinn",
            "text": "answered before the crash",
            "message_id": "old",
        }
        record = await store.record_inbound("loopback", "default", "direct:quinn", "old", payload)
        assert record is not None
        await store.mark_inbound(record.id, "running")  # as earlier versions marked a turn under way
        await store.enqueue_outbox(
            inbound_id=record.id, channel="loopback", account="default", target=target, payload={"text": "left over 2"}
        )

    gateway = await harness.start(before_start=leftovers)
    await bridge.wait_for_sends(2)
    await eventually(lambda: journal(harness.state_dir)["old"][0] == "done", "the answered row to be closed")
    assert texts(bridge) == ["left over 1", "left over 2"]
    await eventually(lambda: _no_unsent(gateway), "the outbox to be marked sent")
    assert fake_llm.requests == []

    # And nothing more shows up: a later message is the next thing answered.
    fake_llm.script("new answer")
    await bridge.say("new question", sender="quinn")
    await bridge.wait_for_sends(3)
    assert texts(bridge) == ["left over 1", "left over 2", "new answer"]
    assert len(fake_llm.requests) == 1


# --- 10. bot senders ----------------------------------------------------------------------------------------------


async def test_a_message_from_a_bot_gets_no_reply(harness: Harness, fake_llm: FakeLLM, bridge: FakeBridge) -> None:
    fake_llm.script("for the human")
    await harness.start()
    from_bot = await bridge.say("I am a bot", sender="robo", message_id="bot-msg", sender_is_bot=True)
    await acknowledged(bridge, from_bot)
    await bridge.say("I am a human", sender="rae")
    await bridge.wait_for_sends(1)

    assert texts(bridge) == ["for the human"]
    assert bridge.texts_to("robo") == []
    assert len(fake_llm.requests) == 1
    assert last_user_text(fake_llm.requests[0].body) == "I am a human"
    assert journal(harness.state_dir)["bot-msg"][0] == "done"


# --- 11. provider failure -----------------------------------------------------------------------------------------


async def test_refused_keys_give_one_short_apology_without_the_keys(
    harness: Harness, fake_llm: FakeLLM, bridge: FakeBridge
) -> None:
    keys = ["sk-live-AAAA1111secret", "sk-live-BBBB2222secret"]
    fake_llm.script(Reply.error(401), Reply.error(401))
    config = harness.config(providers={"fake": {"api_keys": keys}})
    gateway = await harness.start(config)

    await bridge.say("hello?", sender="sam", message_id="k")
    await bridge.wait_for_sends(1)
    await eventually(lambda: journal(harness.state_dir)["k"][0] in ("done", "failed"), "the row to finish")

    [apology] = texts(bridge)
    assert apology.startswith("Sorry") and len(apology) < 200
    for key in keys:
        assert key not in apology and key[:12] not in apology
    assert len(fake_llm.requests) == 2  # each key tried once
    session = await gateway.store.get_session(DM_KEY.format("sam"))
    assert session is not None
    transcript = transcript_for(harness.state_dir, session.session_id)
    if transcript.exists():
        assert not any(key in transcript.read_text() for key in keys)
    assert await gateway.store.unfinished_inbound() == []


# --- who may talk to the bot --------------------------------------------------------------------------------------

PAIRING = {"channels": {"loopback": {"accounts": {"default": {"dm_policy": "pairing"}}}}, "owners": ["loopback:boss"]}


async def test_a_stranger_gets_a_pairing_code_and_is_served_once_an_owner_approves(
    harness: Harness, fake_llm: FakeLLM, bridge: FakeBridge
) -> None:
    await harness.start(harness.config(**PAIRING))
    await bridge.say("hello?", sender="stranger")
    [first] = await bridge.wait_for_sends(1)
    code = re.search(r"pairing code is ([A-Z2-9]{8})", first["message"]["text"])
    assert code is not None, first
    await bridge.say("anyone?", sender="stranger")
    await bridge.wait_for_sends(2)
    assert code.group(1) in bridge.texts_to("stranger")[1]  # the same code, not a new one
    assert fake_llm.requests == []  # a stranger reaches no agent
    fake_llm.script("Welcome!")
    await bridge.say(f"/pair {code.group(1)}", sender="boss")
    await bridge.wait_for_sends(4)
    assert bridge.texts_to("boss") == ["Approved stranger."]
    assert bridge.texts_to("stranger")[-1] == "You're approved: I'm listening now."
    await bridge.say("hello again", sender="stranger")
    await bridge.wait_for_sends(5)
    assert bridge.texts_to("stranger")[-1] == "Welcome!"


async def test_only_owners_can_approve_and_strangers_cannot_use_up_the_pairing_codes(
    harness: Harness, bridge: FakeBridge
) -> None:
    gateway = await harness.start(harness.config(**PAIRING))
    strangers = [f"stranger{number}" for number in range(MAX_PENDING_PAIRINGS + 2)]
    for stranger in strangers:
        await bridge.say("hi", sender=stranger, message_id=f"hi-{stranger}")
    pair = await bridge.say("/pair AAAAAAAA", sender="stranger0")
    # The adapter hands updates over one at a time: once it is past the last one, every message has been handled,
    # and each reply is recorded in the outbox in the same step that finishes its message.
    await acknowledged(bridge, pair)
    await eventually(lambda: _no_unsent(gateway), "the replies to go out")
    assert outbox_peers(harness.state_dir) == [*strangers, "stranger0"]  # more strangers than slots: each has a code
    assert all(bridge.texts_to(stranger)[0].startswith("Hi! I don't know you yet") for stranger in strangers)
    assert bridge.texts_to("stranger0")[-1].startswith("Hi! I don't know you yet")  # /pair from a stranger: no


async def test_an_allowlist_serves_only_the_listed_senders(
    harness: Harness, fake_llm: FakeLLM, bridge: FakeBridge
) -> None:
    await harness.start(
        harness.config(
            channels={"loopback": {"accounts": {"default": {"dm_policy": "allowlist", "allow_from": ["friend"]}}}}
        )
    )
    fake_llm.script("Hi friend.")
    stranger = await bridge.say("hello", sender="someone", message_id="stranger")
    await bridge.say("hello", sender="friend")
    await bridge.wait_for_sends(1)
    await acknowledged(bridge, stranger)
    # Turned away as it arrived: its message is finished, with no reply recorded for it and no run.
    assert journal(harness.state_dir)["stranger"] == ("done", "ignored: sender not in allow_from")
    assert outbox_peers(harness.state_dir) == ["friend"]
    assert [body["target"]["peer"]["id"] for body in bridge.sent] == ["friend"]
    assert len(fake_llm.requests) == 1


async def test_in_groups_the_bot_answers_only_when_mentioned_or_replied_to(
    harness: Harness, fake_llm: FakeLLM, bridge: FakeBridge
) -> None:
    await harness.start()
    fake_llm.script("Mentioned.", "Replied.")
    room = ("group", "-100")
    await bridge.say("just chatting", sender="a", peer=room)
    await bridge.say("@bot what time is it?", sender="a", peer=room, was_mentioned=True)
    await bridge.wait_for_sends(1)
    await bridge.say("and you?", sender="b", peer=room, reply_to_bot=True)
    await bridge.wait_for_sends(2)
    assert texts(bridge) == ["Mentioned.", "Replied."]
    assert len(fake_llm.requests) == 2


async def test_a_disabled_group_policy_ignores_groups(harness: Harness, fake_llm: FakeLLM, bridge: FakeBridge) -> None:
    gateway = await harness.start(
        harness.config(channels={"loopback": {"accounts": {"default": {"group_policy": "disabled"}}}})
    )
    update = await bridge.say("@bot hi", sender="a", peer=("group", "-100"), was_mentioned=True, message_id="hi")
    await acknowledged(bridge, update)
    # Finished the moment it arrived: a run would leave it unfinished or failed, and a reply would be in the outbox.
    assert journal(harness.state_dir)["hi"] == ("done", "ignored: groups are disabled for this account")
    assert outbox_peers(harness.state_dir) == []
    assert gateway.lanes.lane_count() == 0
    assert bridge.sent == []
    assert fake_llm.requests == []


# --- streaming replies ------------------------------------------------------------------------------------------

STREAMING = {"channels": {"loopback": {"accounts": {"default": {"streaming": "partial"}}}}}


async def test_a_streamed_answer_arrives_as_one_message_edited_to_the_final_text(
    harness: Harness, fake_llm: FakeLLM, bridge: FakeBridge
) -> None:
    await harness.start(harness.config(**STREAMING))
    answer = "This answer is streamed in many small pieces, and edited in place until it is complete."
    fake_llm.script(Reply.text(answer))
    await bridge.say("stream please", sender="s1", message_id="stream")
    await answered_and_delivered(harness, "stream")
    sends = [body for method, body in bridge.calls if method == "send"]
    edits = [body for method, body in bridge.calls if method == "edit"]
    assert len(sends) == 1  # one message, never a second copy of the answer
    texts_seen = [body["message"]["text"] for _, body in edits_and_sends(bridge)]
    assert texts_seen[-1] == answer
    assert all(answer.startswith(text) for text in texts_seen)
    assert len(texts_seen) == len(set(texts_seen))  # never an identical edit
    assert all(body["message_id"] == edits[0]["message_id"] for body in edits)


async def test_a_streamed_answer_too_long_for_one_message_continues_in_new_ones(
    harness: Harness, fake_llm: FakeLLM, bridge: FakeBridge
) -> None:
    await harness.start(harness.config(**STREAMING))
    answer = "\n\n".join(f"Paragraph {number}: " + "word " * 150 for number in range(12))  # about 9,000 characters
    fake_llm.script(Reply.text(answer))
    await bridge.say("a long one", sender="s2", message_id="long")
    await answered_and_delivered(harness, "long")
    sends = [body["message"]["text"] for method, body in bridge.calls if method == "send"]
    edits = [body["message"]["text"] for method, body in bridge.calls if method == "edit"]
    first = edits[-1] if edits else sends[0]
    delivered = [first, *sends[1:]]
    assert all(len(text) <= 4000 for text in delivered)
    assert " ".join(" ".join(delivered).split()) == " ".join(answer.split())


async def answered_and_delivered(harness: Harness, message_id: str) -> None:
    """Wait until the message's turn is finished and the outbox is empty. After that nothing more can reach the
    chat for it: a streamed message is edited for the last time before its turn is finished, and the rest of the
    answer is recorded in the outbox in the same step."""
    await eventually(lambda: journal(harness.state_dir).get(message_id, ("", None))[0] == "done", "the turn to end")
    [(gateway, _)] = harness.running
    await eventually(lambda: _no_unsent(gateway), "the outbox to drain")


def edits_and_sends(bridge: FakeBridge) -> list[tuple[str, dict[str, Any]]]:
    return [(method, body) for method, body in bridge.calls if method in ("send", "edit")]


def previews(state_dir: Path) -> list[tuple[int, str]]:
    """(inbound id, message id) of every streamed answer recorded as unfinished, read straight from state.db."""
    return read_state(state_dir, "SELECT inbound_id, message_id FROM previews ORDER BY inbound_id")


async def cut_short_then_run_again(harness: Harness, fake_llm: FakeLLM, bridge: FakeBridge, answer: str) -> str:
    """A streamed answer half written when the gateway stops (its grace runs out), then a new start whose run
    of the same turn answers `answer`; returns the half-written message's id."""
    fake_llm.script(Reply.stall(60, after_text="The first half of an answer"))
    gateway = await harness.start(harness.config(**STREAMING))
    await bridge.say("slow question", sender="mo", message_id="slow")
    await bridge.wait_for_sends(1)  # the preview
    await eventually(lambda: len(previews(harness.state_dir)) == 1, "the preview to be recorded")
    await harness.stop(gateway, grace=0.2)
    [(_, preview_id)] = previews(harness.state_dir)  # kept: the turn runs again

    fake_llm.script(answer)
    await harness.start(harness.config(**STREAMING))
    await eventually(lambda: journal(harness.state_dir)["slow"][0] == "done", "the re-run to finish")
    return preview_id


async def test_a_streamed_answer_cut_short_by_shutdown_is_finished_in_its_message_by_the_next_start(
    harness: Harness, fake_llm: FakeLLM, bridge: FakeBridge
) -> None:
    preview_id = await cut_short_then_run_again(harness, fake_llm, bridge, "The whole answer.")
    sends = [body for method, body in bridge.calls if method == "send"]
    last_edit = [body for method, body in bridge.calls if method == "edit"][-1]
    assert len(sends) == 1  # no second message beside the half-written one
    assert (last_edit["message_id"], last_edit["message"]["text"]) == (preview_id, "The whole answer.")
    await eventually(lambda: previews(harness.state_dir) == [], "the finished preview to be forgotten")


async def test_a_half_written_answer_is_taken_back_when_the_next_start_decides_not_to_reply(
    harness: Harness, fake_llm: FakeLLM, bridge: FakeBridge
) -> None:
    preview_id = await cut_short_then_run_again(harness, fake_llm, bridge, "NO_REPLY")
    assert [body["message_id"] for method, body in bridge.calls if method == "delete"] == [preview_id]
    await eventually(lambda: previews(harness.state_dir) == [], "the taken-back preview to be forgotten")


async def test_a_recorded_preview_of_a_finished_turn_is_forgotten_at_start(
    harness: Harness, fake_llm: FakeLLM, bridge: FakeBridge
) -> None:
    async def finished_turn_with_a_preview(store: SqliteStore) -> None:
        record = await store.record_inbound("loopback", "default", "mo", "old", {"text": "answered already"})
        assert record is not None
        await store.set_preview(record.id, "loopback", "default", {"channel": "loopback"}, "m-1")
        await store.mark_inbound(record.id, "done")  # answered, but the process died before forgetting the preview

    await harness.start(harness.config(**STREAMING), before_start=finished_turn_with_a_preview)
    assert previews(harness.state_dir) == []
    assert fake_llm.requests == []
    assert bridge.calls == []


async def test_wrong_pairing_codes_are_rate_limited(harness: Harness, bridge: FakeBridge) -> None:
    clock = FakeClock()
    await harness.start(harness.config(**PAIRING), clock=clock)
    for _ in range(6):
        await bridge.say("/pair WRONGCOD", sender="boss")
    await bridge.wait_for_sends(6)
    replies = bridge.texts_to("boss")
    assert replies[:5] == ["No pending request has that code (it may have expired)."] * 5
    assert replies[5] == "Too many wrong codes; try again in a few minutes."

    clock.advance(PAIR_MISS_WINDOW_SECONDS)  # the wrong tries have left the window: guessing may go on
    await bridge.say("/pair WRONGCOD", sender="boss")
    await bridge.wait_for_sends(7)
    assert bridge.texts_to("boss")[6] == "No pending request has that code (it may have expired)."
