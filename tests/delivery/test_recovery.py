"""Nothing stale after a long outage (`recovery.max_age`): a message left unanswered and a reply left unsent are
dropped at start when older than it, logged, and the person in a DM gets one line saying the bot was offline; younger
ones are answered and sent as before; a subagent whose task went stale ends as failed and its parent hears of it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from configs import config_of
from fakes.llm import FakeLLM, Reply, ToolCallSpec
from helpers import FakeClock, eventually, read_state

from bot import App
from bot.config.settings import Config
from bot.delivery.recovery import OFFLINE
from bot.store import SqliteStore
from channels import AccountSettings, MemoryChannel
from channels.base import ChatTarget, OutboundMessage
from routing import Peer

HOUR = 3600.0
OWNER = "ann"


def config(llm: FakeLLM, tmp_path: Path, **extra: Any) -> Config:
    return config_of(tmp_path, llm, owners=[f"memory:{OWNER}"], **extra)


@pytest.fixture
def chat() -> MemoryChannel:
    return MemoryChannel(settings=AccountSettings(dm_policy="open"))


async def left_unanswered(app: App, chat: MemoryChannel, llm: FakeLLM, text: str, sender: str) -> None:
    """`sender` says `text`, and the bot stops while the answer is still being written (its turn left unfinished)."""
    llm.script(Reply.held("half an answer"))
    async with app.running(grace_seconds=0.01):
        await chat.say(text, sender=sender)
        await eventually(lambda: llm.holding == 1, "the answer to be under way")
    llm.release()  # the held stream of the stopped process ends


def journal(state: Path) -> list[tuple[str, str | None]]:
    return [tuple(row) for row in read_state(state, "SELECT status, error FROM inbound ORDER BY id")]  # type: ignore[misc]


async def test_a_message_left_unanswered_past_max_age_is_not_answered_and_the_dm_is_told_once(
    fake_llm: FakeLLM, chat: MemoryChannel, tmp_path: Path
) -> None:
    clock = FakeClock(1_800_000_000.0)
    app = App(config(fake_llm, tmp_path), tmp_path / "state", adapters=[chat], clock=clock)
    await left_unanswered(app, chat, fake_llm, "what is the weather?", "bob")
    asked = len(fake_llm.requests)

    clock.advance(2 * HOUR)  # over the default max_age of an hour
    async with app.running():
        [told] = await chat.replies()
        assert told.text == OFFLINE and told.target.peer == Peer("direct", "bob")
        await chat.say("hello again", sender="bob")
        fake_llm.script("Hello!")
        assert [sent.text for sent in await chat.replies()] == ["Hello!"]
    assert len(fake_llm.requests) == asked + 1  # only the new message reached the model
    [(status, error), (after, _)] = journal(tmp_path / "state")
    assert (status, after) == ("failed", "done")
    assert error is not None and error.startswith("stale: received 2.0 h before this start")


async def test_a_message_left_unanswered_within_max_age_is_answered_after_the_restart(
    fake_llm: FakeLLM, chat: MemoryChannel, tmp_path: Path
) -> None:
    clock = FakeClock(1_800_000_000.0)
    app = App(config(fake_llm, tmp_path, recovery={"max_age": "3h"}), tmp_path / "state", adapters=[chat], clock=clock)
    await left_unanswered(app, chat, fake_llm, "what is the weather?", "bob")
    clock.advance(2 * HOUR)
    fake_llm.script("Sunny.")
    async with app.running():
        assert [sent.text for sent in await chat.replies()] == ["Sunny."]
    assert journal(tmp_path / "state") == [("done", None)]


async def test_a_reply_left_unsent_past_max_age_is_not_sent(
    fake_llm: FakeLLM, chat: MemoryChannel, tmp_path: Path
) -> None:
    clock = FakeClock(1_800_000_000.0)
    target = ChatTarget(channel="memory", peer=Peer("direct", "bob"))
    group = ChatTarget(channel="memory", peer=Peer("group", "g1"))
    async with await SqliteStore.open(tmp_path / "state", clock=clock) as store:
        for where, text in ((target, "an old answer"), (group, "an old group answer")):
            payload = OutboundMessage(text=text).model_dump(mode="json")
            await store.enqueue_outbox(inbound_id=None, channel="memory", account="default",
                                       target=where.model_dump(mode="json"), payload=payload)  # fmt: skip
    clock.advance(90 * 60)
    app = App(config(fake_llm, tmp_path, recovery={"max_age": "1h"}), tmp_path / "state", adapters=[chat], clock=clock)
    async with app.running():
        [told] = await chat.replies()
    assert (told.text, told.target) == (OFFLINE, target)  # the group hears nothing: no stale answer, no notice
    assert [sent.text for sent in chat.sent] == [OFFLINE]
    dead = read_state(tmp_path / "state", "SELECT status, error FROM outbox WHERE status = 'dead'")
    assert len(dead) == 2 and all(error.startswith("stale: recorded 1.5 h before") for _, error in dead)


async def test_a_subagent_whose_task_went_stale_ends_as_failed_and_its_parent_is_told(
    fake_llm: FakeLLM, chat: MemoryChannel, tmp_path: Path
) -> None:
    clock = FakeClock(1_800_000_000.0)
    settings = config(fake_llm, tmp_path, defaults={"max_concurrent": 1})
    app = App(settings, tmp_path / "state", adapters=[chat], clock=clock)
    spawn = ToolCallSpec("sessions_spawn", {"task": "STALE-TASK"})
    fake_llm.script_for("research", Reply.tool_calls(spawn), Reply.held("Started."))  # the child waits for the slot
    async with app.running(grace_seconds=0.01):
        await chat.say("research", sender=OWNER)
        await eventually(lambda: fake_llm.holding == 1, "the parent's answer to be under way")
    fake_llm.release()

    clock.advance(2 * HOUR)
    # The parent's first turn was cut short unrecorded: the announcement starts its conversation.
    fake_llm.script_for("the background task", "The research could not run.")
    async with app.running():
        sent = [item.text for item in await chat.replies(2)]
    assert sent == [OFFLINE, "The research could not run."]
    [(status, result)] = read_state(tmp_path / "state", "SELECT status, result FROM subagent_runs")
    assert status == "failed" and result.startswith("not run: stale")
    assert not [r for r in fake_llm.requests if "STALE-TASK" in json.dumps(r.body["messages"][1]["content"])]
