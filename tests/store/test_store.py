"""The state store's roles, each test run on both backends (tests/stores.py: `[sqlite]` on a real file, `[postgres]` on
a throwaway server): sessions and usage, the inbound journal, the outbox, previews, pairing, approvals, jobs,
subagents, pruning; and several stores (several processes) on one database. What only one backend has is in
tests/store/test_store_sqlite.py and tests/store/test_store_postgres.py."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from helpers import FakeClock
from stores import NOW, AnyStore, Backend

from agent.messages import Usage
from bot.store import InboundRecord, OutboxEntry, StoreError
from bot.store.approvals import ApprovalRecord
from bot.store.database import QUICK_TURN
from bot.store.journal import JournalEntry
from bot.store.sessions import ModelUsage, SessionTouch, UsageRow
from bot.store.subagents import SubagentRecord

TARGET = {"chat_id": "42", "thread_id": None}


async def inbound(store: AnyStore, message_id: str, chat: str = "42", account: str = "default") -> InboundRecord:
    record = await store.record_inbound("telegram", account, chat, message_id, {"text": f"message {message_id}"})
    assert record is not None
    return record


def reply(inbound_id: int | None, text: str, key: str | None = None) -> OutboxEntry:
    return OutboxEntry(
        inbound_id=inbound_id, channel="telegram", account="default", target=TARGET, payload={"t": text}, key=key
    )


def entry(message_id: str, text: str = "task") -> JournalEntry:
    return JournalEntry(channel="internal", account="default", chat="c", message_id=message_id, payload={"t": text})


def approval(approval_id: str, created: float, **fields: object) -> ApprovalRecord:
    values: dict[str, object] = {
        "id": approval_id, "agent": "main", "session_key": "s", "command": "ls", "cwd": ".",
        "approvers": ["telegram:1"], "created": created, "expires": created + 60, "status": "pending",
    }  # fmt: skip
    return ApprovalRecord.model_validate(values | fields)


# --- opening and closing -------------------------------------------------------------------------------------------


async def test_a_closed_store_refuses_calls_and_closing_twice_is_fine(store: AnyStore) -> None:
    await store.close()
    await store.close()
    with pytest.raises(StoreError, match="closed"):
        await store.count_sessions()


# --- sessions and usage --------------------------------------------------------------------------------------------


async def test_ensure_session_creates_once_then_returns_the_same_session(store: AnyStore, clock: FakeClock) -> None:
    assert await store.get_session("agent:main:telegram:direct:7") is None
    created = await store.ensure_session("agent:main:telegram:direct:7", "main")
    assert created.agent == "main"
    assert created.created == created.updated == clock.now
    assert len(created.session_id) >= 16
    assert (created.input_tokens, created.output_tokens, created.model, created.last_target) == (0, 0, None, None)

    clock.advance(5)
    again = await store.ensure_session("agent:main:telegram:direct:7", "main")
    assert again == created
    assert await store.get_session("agent:main:telegram:direct:7") == created
    other = await store.ensure_session("agent:main:telegram:direct:8", "main")
    assert other.session_id != created.session_id
    assert await store.count_sessions() == 2


async def test_the_person_a_run_acts_for_joins_the_sessions_people_as_the_run_starts(store: AnyStore) -> None:
    """Before the run can reach another session (sessions_send, a subagent): what it says there is never taken for
    words of a session without that person, whenever the run's own end is recorded."""
    key = "agent:main:telegram:direct:7"
    started = await store.ensure_session(key, "main", principal="telegram:7")
    assert started.people == ["telegram:7"]
    assert (await store.ensure_session(key, "main", principal="telegram:7")).people == ["telegram:7"]  # once
    assert (await store.ensure_session(key, "main", principal="owners")).people == ["telegram:7", "owners"]
    assert (await store.ensure_session(key, "main")).people == ["telegram:7", "owners"]
    touched = await store.touch_session(key, principal="telegram:7")  # the run's end adds no one twice
    assert touched.people == ["telegram:7", "owners"]


async def test_touch_session_adds_token_totals_and_keeps_fields_not_given(store: AnyStore, clock: FakeClock) -> None:
    await store.ensure_session("k", "main")
    clock.advance(10)
    first = await store.touch_session(
        "k",
        model="openai/gpt-x",
        usage=Usage(input_tokens=100, output_tokens=20),
        channel="telegram",
        account="default",
        target=TARGET,
    )
    assert (first.input_tokens, first.output_tokens) == (100, 20)
    assert first.updated == clock.now
    clock.advance(10)
    await store.touch_session("k", usage=Usage(input_tokens=50, output_tokens=5))
    cached = Usage(input_tokens=1000, output_tokens=2, cache_read_tokens=900, cache_write_tokens=90)
    await store.touch_session("k", usage=cached, model="anthropic/claude-y")

    record = await store.get_session("k")
    assert record is not None
    assert (record.input_tokens, record.output_tokens) == (1150, 27)
    assert (record.cache_read_tokens, record.cache_write_tokens) == (900, 90)
    assert record.model == "anthropic/claude-y"
    assert (record.last_channel, record.last_account, record.last_target) == ("telegram", "default", TARGET)
    assert record.updated == clock.now > record.created


async def test_each_touch_with_usage_records_a_usage_row_and_old_rows_are_pruned(
    store: AnyStore, clock: FakeClock
) -> None:
    await store.ensure_session("k", "main")
    clock.advance(10)
    first = await store.touch_session(
        "k", model="openai/gpt-x", usage=Usage(input_tokens=100, output_tokens=20), channel="telegram",
        account="default", target=TARGET,
    )  # fmt: skip
    assert (first.input_tokens, first.output_tokens, first.updated) == (100, 20, clock.now)
    clock.advance(10)
    await store.touch_session("k", channel="slack")  # no usage: no row
    cached = Usage(input_tokens=1000, output_tokens=2, cache_read_tokens=900, cache_write_tokens=90)
    await store.touch_session("k", usage=cached, model="anthropic/claude-y")
    record = await store.get_session("k")
    assert record is not None
    assert (record.input_tokens, record.output_tokens) == (1100, 22)
    assert (record.cache_read_tokens, record.cache_write_tokens) == (900, 90)
    assert (record.model, record.last_channel, record.last_account, record.last_target) == (
        "anthropic/claude-y", "slack", "default", TARGET,
    )  # fmt: skip
    assert await store.usage_since(0) == [
        UsageRow(at=NOW + 10, session_key="k", agent="main", model="openai/gpt-x", input_tokens=100,
                 output_tokens=20),
        UsageRow(at=NOW + 20, session_key="k", agent="main", model="anthropic/claude-y", input_tokens=1000,
                 output_tokens=2, cache_read_tokens=900, cache_write_tokens=90),
    ]  # fmt: skip
    assert [row.at for row in await store.usage_since(NOW + 11, "k")] == [NOW + 20]
    assert await store.usage_since(0, "other") == []
    await store.ensure_session("k2", "main")
    await store.touch_session("k2", model="openai/gpt-x", usage=Usage(input_tokens=5, output_tokens=1))
    assert await store.usage_by_model(0) == [  # each model's runs added up, in the order it was first used
        ModelUsage(model="openai/gpt-x", runs=2, input_tokens=105, output_tokens=21),
        ModelUsage(model="anthropic/claude-y", runs=1, input_tokens=1000, output_tokens=2, cache_read_tokens=900,
                   cache_write_tokens=90),
    ]  # fmt: skip
    assert await store.usage_by_model(NOW + 11, "k") == [
        ModelUsage(model="anthropic/claude-y", runs=1, input_tokens=1000, output_tokens=2, cache_read_tokens=900,
                   cache_write_tokens=90),
    ]  # fmt: skip
    assert await store.usage_by_model(0, "other") == []
    with pytest.raises(KeyError):  # no session: neither the totals nor a row
        await store.touch_session("nobody", usage=Usage(input_tokens=1, output_tokens=1))
    with pytest.raises(ValueError, match="negative"):
        await store.touch_session("k", usage=Usage(input_tokens=-1, output_tokens=0))
    assert len(await store.usage_since(0)) == 3
    clock.advance(100)
    assert await store.prune_usage(105) == 1  # before NOW + 15
    assert [row.at for row in await store.usage_since(0)] == [NOW + 20, NOW + 20]


async def test_reset_gives_a_new_session_id_and_zeroes_tokens(store: AnyStore, clock: FakeClock) -> None:
    old = await store.ensure_session("k", "main")
    used = Usage(input_tokens=500, output_tokens=60, cache_read_tokens=400, cache_write_tokens=50)
    await store.touch_session("k", usage=used, channel="telegram", target=TARGET)
    clock.advance(60)
    new = await store.reset_session("k")
    assert new.session_id != old.session_id
    assert (new.input_tokens, new.output_tokens, new.cache_read_tokens, new.cache_write_tokens) == (0, 0, 0, 0)
    assert (new.session_key, new.agent, new.last_channel, new.last_target) == ("k", "main", "telegram", TARGET)
    assert new.created == clock.now
    assert await store.get_session("k") == new
    assert await store.count_sessions() == 1
    with pytest.raises(KeyError):
        await store.reset_session("nobody")


async def test_sessions_survive_a_reopen(backend: Backend, store: AnyStore) -> None:
    created = await store.ensure_session("k", "main")
    touched = await store.touch_session("k", usage=Usage(input_tokens=3, output_tokens=4), target=TARGET)
    store = await backend.reopen(store)
    assert await store.get_session("k") == touched
    assert touched.session_id == created.session_id


async def test_overrides_are_stored_merged_cleared_and_kept_across_new(store: AnyStore) -> None:
    assert await store.get_session("k") is None
    made = await store.set_overrides("k", "main", model="fake/big")  # the session is made on first use
    assert made.overrides == {"model": "fake/big"} and made.agent == "main"
    both = await store.set_overrides("k", "main", thinking="high", queue="steer")
    assert both.overrides == {"model": "fake/big", "thinking": "high", "queue": "steer"}
    assert (await store.reset_session("k")).overrides == both.overrides
    assert (await store.set_overrides("k", "main", model=None, thinking=None)).overrides == {"queue": "steer"}
    await store.ensure_session("other", "main")
    assert await store.all_overrides() == {"k": {"queue": "steer"}}
    await store.set_overrides("k", "main", queue=None)
    cleared = await store.get_session("k")
    assert cleared is not None and cleared.overrides == {}
    assert await store.all_overrides() == {}
    with pytest.raises(ValueError, match="unknown session overrides"):
        await store.set_overrides("k", "main", colour="red")


async def test_sessions_are_listed_newest_first_by_agent_time_and_limit(store: AnyStore, clock: FakeClock) -> None:
    for key, agent in (("b", "main"), ("a", "main"), ("r", "research"), ("o", "ops")):
        await store.ensure_session(key, agent)
    clock.advance(10)
    await store.touch_session("r")
    assert [r.session_key for r in await store.list_sessions()] == ["r", "a", "b", "o"]  # ties: by key
    assert [r.session_key for r in await store.list_sessions(["main", "ops"], limit=2)] == ["a", "b"]
    assert [r.session_key for r in await store.list_sessions(since=clock.now)] == ["r"]
    assert await store.list_sessions([]) == []


async def test_two_processes_setting_overrides_at_once_merge_them(backend: Backend) -> None:
    one, two = await backend.open(), await backend.open()
    await asyncio.gather(
        one.set_overrides("k", "main", model="m"),
        two.set_overrides("k", "main", thinking="high"),
        one.set_overrides("k", "main", queue="steer"),
    )
    record = await two.get_session("k")
    assert record is not None and record.overrides == {"model": "m", "thinking": "high", "queue": "steer"}


# --- inbound journal -------------------------------------------------------------------------------------------


async def test_a_message_is_journaled_once_and_elsewhere_is_not_a_duplicate(store: AnyStore, clock: FakeClock) -> None:
    first = await store.record_inbound("telegram", "default", "42", "1001", {"text": "hi", "n": [1, "é"]})
    assert first is not None
    assert (first.status, first.received, first.updated) == ("pending", clock.now, clock.now)
    assert first.payload == {"text": "hi", "n": [1, "é"]}
    assert await store.record_inbound("telegram", "default", "42", "1001", {"text": "again"}) is None
    assert [record.id for record in await store.unfinished_inbound()] == [first.id]
    others = [
        await store.record_inbound("telegram", "second-bot", "42", "1001", {}),  # another account
        await store.record_inbound("telegram", "default", "43", "1001", {}),  # another chat
        await store.record_inbound("discord", "default", "42", "1001", {}),  # another channel
    ]
    assert all(record is not None for record in others)
    assert len({first.id, *(record.id for record in others if record)}) == 4


async def test_two_processes_journaling_one_message_keep_it_once(backend: Backend) -> None:
    stores = [await backend.open() for _ in range(2)]
    results = await asyncio.gather(
        *(store.record_inbound("telegram", "default", "42", str(n), {}) for n in range(20) for store in stores)
    )
    assert sum(result is not None for result in results) == 20
    assert len(await stores[0].unfinished_inbound()) == 20


async def test_inbound_status_moves_forward_and_finished_is_final(store: AnyStore, clock: FakeClock) -> None:
    record = await inbound(store, "1")
    await store.mark_inbound(record.id, "running")
    clock.advance(3)
    await store.mark_inbound(record.id, "failed", error="provider timed out")
    assert await store.unfinished_inbound() == []
    with pytest.raises(ValueError, match="already failed"):
        await store.mark_inbound(record.id, "running")
    with pytest.raises(KeyError):
        await store.mark_inbound(9999, "done")
    with pytest.raises(ValueError, match="status"):
        await store.mark_inbound(record.id, "bogus")  # type: ignore[arg-type]


async def test_finishing_records_the_replies_and_forgets_previews_in_one_step(
    backend: Backend, store: AnyStore
) -> None:
    first, second = await inbound(store, "1"), await inbound(store, "2")
    await store.set_preview(second.id, "telegram", "default", TARGET, "m-7")
    recorded = await store.finish_inbound(
        [first.id, second.id], "done", session_key="s-1", replies=[reply(second.id, "a"), reply(second.id, "b")]
    )
    assert [(entry.inbound_id, entry.payload, entry.status) for entry in recorded] == [
        (second.id, {"t": "a"}, "pending"),
        (second.id, {"t": "b"}, "pending"),
    ]
    assert [entry.id for entry in await store.unsent_outbox()] == [entry.id for entry in recorded]
    assert await store.unfinished_inbound() == []
    assert await store.previews() == []
    rows = await backend.query("SELECT status, session_key FROM inbound ORDER BY id")
    assert rows == [("done", "s-1"), ("done", "s-1")]
    await store.finish_inbound([], "done", replies=[reply(None, "a notice")])  # a reply that answers nothing
    assert len(await store.unsent_outbox()) == 3
    count, oldest = await store.outbox_backlog()  # what status.json shows, without reading the entries
    assert (count, oldest) == (3, min(entry.created for entry in await store.unsent_outbox()))
    for entry in await store.unsent_outbox():
        await store.mark_dead(entry.id, "gone")
    assert await store.outbox_backlog() == (0, None)


async def test_a_reply_recorded_with_nothing_older_pending_for_its_chat_says_so(store: AnyStore) -> None:
    """What lets delivery send a close's replies without reading the outbox back: the store says, as it records
    them, whether anything recorded before is still pending for their chat, whoever recorded it."""
    first = await inbound(store, "1")
    other = {"chat_id": "43", "thread_id": None}
    [queued] = await store.enqueue_once([reply(None, "a welcome").model_copy(update={"target": other})])
    assert not queued.nothing_ahead  # only a close's replies are told

    head, tail = await store.finish_inbound([first.id], "done", replies=[reply(first.id, "a"), reply(first.id, "b")])
    assert (head.nothing_ahead, tail.nothing_ahead) == (True, False)  # its own first piece is ahead of the second

    second = await inbound(store, "2")
    [behind] = await store.finish_inbound([second.id], "done", replies=[reply(second.id, "c")])
    assert not behind.nothing_ahead  # "a" and "b" are still pending for the chat
    await store.mark_sent(head.id, "m-1")
    await store.mark_dead(tail.id, "gone")
    third = await inbound(store, "3")
    [waiting] = await store.finish_inbound([third.id], "done", replies=[reply(third.id, "d")])
    assert not waiting.nothing_ahead  # "c" still is

    await store.mark_sent(behind.id, "m-2")
    await store.mark_sent(waiting.id, "m-3")
    fourth = await inbound(store, "4")
    [clear] = await store.finish_inbound([fourth.id], "done", replies=[reply(fourth.id, "e")])
    assert clear.nothing_ahead  # sent and dead entries are not ahead of anything
    elsewhere = reply(fourth.id, "f").model_copy(update={"target": other})
    fifth = await inbound(store, "5")
    [behind_welcome] = await store.finish_inbound([fifth.id], "done", replies=[elsewhere])
    assert not behind_welcome.nothing_ahead  # the entry recorded outside a close is ahead of it
    assert [entry.nothing_ahead for entry in await store.unsent_outbox()] == [False, False, False]


async def test_finishing_is_all_or_nothing(store: AnyStore) -> None:
    first, second = await inbound(store, "1"), await inbound(store, "2")
    await store.set_preview(first.id, "telegram", "default", TARGET, "m-1")
    await store.mark_inbound(second.id, "done")
    with pytest.raises(ValueError, match="already done"):
        await store.finish_inbound([first.id, second.id], "failed", "boom", replies=[reply(first.id, "sorry")])
    with pytest.raises(KeyError):
        await store.finish_inbound([first.id, 9999], "done", replies=[reply(first.id, "hello")])
    with pytest.raises(KeyError):  # a reply to an unknown message
        await store.finish_inbound([first.id], "done", replies=[reply(9999, "hello")])
    assert await store.unsent_outbox() == []  # no attempt left a reply behind
    assert [record.id for record in await store.unfinished_inbound()] == [first.id]
    assert [preview.inbound_id for preview in await store.previews()] == [first.id]


async def test_finishing_writes_the_runs_addition_to_its_session_in_the_same_step(
    store: AnyStore, clock: FakeClock
) -> None:
    """The run's model, tokens, target and person go into its session's row (and a usage row) with the journal's
    close: a failed close writes none of it, so a turn run again after it is not counted twice."""
    key = "agent:main:telegram:direct:7"
    await store.ensure_session(key, "main")
    first, second = await inbound(store, "1"), await inbound(store, "2")
    await store.mark_inbound(second.id, "done")
    clock.advance(4)
    touch = SessionTouch(
        session_key=key, model="openai/gpt-x", usage=Usage(input_tokens=30, output_tokens=3), channel="telegram",
        account="default", target=TARGET, principal="telegram:7",
    )  # fmt: skip
    with pytest.raises(ValueError, match="already done"):
        await store.finish_inbound([first.id, second.id], "done", replies=[reply(first.id, "hi")], touch=touch)
    untouched = await store.get_session(key)
    assert untouched is not None and (untouched.input_tokens, untouched.model, untouched.people) == (0, None, [])
    assert await store.usage_since(0) == []

    await store.finish_inbound([first.id], "done", session_key=key, replies=[reply(first.id, "hi")], touch=touch)
    session = await store.get_session(key)
    assert session is not None
    assert (session.updated, session.model, session.input_tokens, session.output_tokens) == (
        clock.now, "openai/gpt-x", 30, 3,
    )  # fmt: skip
    assert (session.last_channel, session.last_account, session.last_target) == ("telegram", "default", TARGET)
    assert session.people == ["telegram:7"]
    assert [(row.session_key, row.model, row.input_tokens) for row in await store.usage_since(0)] == [
        (key, "openai/gpt-x", 30)
    ]


async def test_a_touch_for_a_session_that_is_gone_never_costs_the_replies(
    store: AnyStore, caplog: pytest.LogCaptureFixture
) -> None:
    """The touch is logged and left out; the replies are recorded and the message finished. (A touch with a token
    count below zero cannot even be made.)"""
    first = await inbound(store, "1")
    nobody = SessionTouch(session_key="agent:main:nobody", usage=Usage(input_tokens=1, output_tokens=1))
    await store.finish_inbound([first.id], "done", replies=[reply(first.id, "a")], touch=nobody)
    assert [entry.payload for entry in await store.unsent_outbox()] == [{"t": "a"}]
    assert await store.unfinished_inbound() == []
    assert await store.usage_since(0) == []
    assert "no session 'agent:main:nobody' to record its run in" in caplog.text
    with pytest.raises(ValueError, match="negative"):
        SessionTouch(session_key="k", usage=Usage(input_tokens=-1, output_tokens=0))


async def test_unfinished_inbound_comes_back_in_arrival_order_to_another_process_and_after_reopen(
    backend: Backend, store: AnyStore
) -> None:
    records = [await inbound(store, str(number)) for number in range(1, 6)]
    await store.mark_inbound(records[0].id, "running")
    await store.mark_inbound(records[0].id, "done")
    await store.mark_inbound(records[1].id, "running")
    await store.mark_inbound(records[2].id, "running")
    await store.mark_inbound(records[2].id, "failed", error="boom")
    await store.mark_inbound(records[4].id, "running")
    expected = [("2", "running"), ("4", "pending"), ("5", "running")]
    assert [(r.message_id, r.status) for r in await (await backend.open()).unfinished_inbound()] == expected
    store = await backend.reopen(store)
    unfinished = await store.unfinished_inbound()
    assert [(record.message_id, record.status) for record in unfinished] == expected
    assert unfinished[1].payload == {"text": "message 4"}


async def test_prune_drops_only_old_finished_messages_frees_their_keys_and_unlinks_their_replies(
    store: AnyStore, clock: FakeClock
) -> None:
    old_done, old_failed, old_pending, new_done = [await inbound(store, str(number)) for number in range(4)]
    await store.set_preview(old_done.id, "telegram", "default", TARGET, "m-0")
    [sent] = await store.finish_inbound([old_done.id], "done", replies=[reply(old_done.id, "hi")])
    await store.mark_inbound(old_failed.id, "failed", error="x")
    clock.advance(23 * 3600)
    await store.mark_inbound(new_done.id, "done")
    assert await store.prune_inbound() == 0  # nothing finished a whole day ago yet
    clock.advance(2 * 3600)
    assert await store.prune_inbound() == 2
    again = await store.record_inbound("telegram", "default", "42", "0", {})  # its key was freed
    assert again is not None
    assert again.id > new_done.id  # ids are never reused, so nothing old can point at the new row
    assert await store.record_inbound("telegram", "default", "42", "3", {}) is None  # still deduplicated
    assert [record.id for record in await store.unfinished_inbound()] == [old_pending.id, again.id]
    [kept] = await store.unsent_outbox()
    assert (kept.id, kept.inbound_id) == (sent.id, None)  # the reply stays, pointing at nothing
    assert await store.previews() == []
    assert await store.outbox_for_inbound(again.id) == []
    with pytest.raises(ValueError):
        await store.prune_inbound(-1)


# --- outbox ----------------------------------------------------------------------------------------------------


async def test_outbox_lifecycle_with_a_retry_in_the_future(store: AnyStore, clock: FakeClock) -> None:
    message = await inbound(store, "1")
    assert not await store.inbound_has_replies(message.id)
    first = await store.enqueue_outbox(
        inbound_id=message.id, channel="telegram", account="default", target=TARGET, payload={"text": "one"}
    )
    second = await store.enqueue_outbox(
        inbound_id=None, channel="telegram", account="default", target=TARGET, payload={"text": "two"}, kind="edit"
    )
    assert (first.status, first.attempts, first.retry_at, first.kind, second.kind) == (
        "pending", 0, clock.now, "send", "edit"
    )  # fmt: skip
    assert await store.inbound_has_replies(message.id)
    assert await store.due_outbox() == [first, second]

    await store.mark_send_failed(first.id, "429 Too Many Requests", retry_at=clock.now + 30)
    assert [entry.id for entry in await store.due_outbox()] == [second.id]
    assert [entry.id for entry in await store.due_outbox(clock.now + 30)] == [first.id, second.id]  # `now` wins
    await store.mark_sent(second.id, "m-2")
    clock.advance(29)
    assert await store.due_outbox() == []
    assert [entry.id for entry in await store.due_outbox(now=clock.now + 1)] == [first.id]
    clock.advance(1)
    [due] = await store.due_outbox()
    assert (due.id, due.attempts, due.error) == (first.id, 1, "429 Too Many Requests")

    await store.mark_sent(first.id, "msg-555")
    assert await store.due_outbox(now=clock.now + 10_000) == []
    assert await store.unsent_outbox() == []
    [sent] = await store.outbox_for_inbound(message.id)
    assert (sent.status, sent.platform_message_id, sent.target, sent.payload) == (
        "sent",
        "msg-555",
        TARGET,
        {"text": "one"},
    )
    with pytest.raises(ValueError, match="already sent"):
        await store.mark_send_failed(first.id, "late", retry_at=clock.now)
    with pytest.raises(ValueError, match="already sent"):
        await store.mark_dead(first.id, "late")
    with pytest.raises(KeyError):
        await store.mark_sent(9999, None)
    with pytest.raises(KeyError):
        await store.enqueue_outbox(inbound_id=9999, channel="telegram", account="d", target={}, payload={})


async def test_dead_entries_are_never_due_and_unknown_ids_are_errors(store: AnyStore, clock: FakeClock) -> None:
    message = await inbound(store, "1")
    dead = await store.enqueue_outbox(
        inbound_id=message.id, channel="slack", account="T1", target={"channel": "C1"}, payload={}, kind="edit"
    )
    assert dead.kind == "edit"
    await store.mark_dead(dead.id, "channel_not_found")
    assert await store.due_outbox(now=clock.now + 10_000) == []
    assert await store.unsent_outbox() == []
    [stored] = await store.outbox_for_inbound(message.id)
    assert (stored.status, stored.error, stored.attempts) == ("dead", "channel_not_found", 0)
    with pytest.raises(ValueError, match="already dead"):
        await store.mark_sent(dead.id, None)
    with pytest.raises(KeyError):
        await store.mark_dead(9999, "gone")
    with pytest.raises(KeyError):
        await store.mark_send_failed(9999, "gone", retry_at=clock.now)
    with pytest.raises(KeyError):
        await store.enqueue_outbox(inbound_id=9999, channel="slack", account="T1", target={}, payload={})


async def test_prune_outbox_drops_old_sent_and_dead_entries(store: AnyStore, clock: FakeClock) -> None:
    sent, dead, pending = [
        await store.enqueue_outbox(inbound_id=None, channel="telegram", account="d", target={}, payload={"n": n})
        for n in range(3)
    ]
    await store.mark_sent(sent.id, "m")
    await store.mark_dead(dead.id, "403 blocked")
    assert [entry.id for entry in await store.due_outbox(clock.now + 10**6)] == [pending.id]
    clock.advance(23 * 3600)
    assert await store.prune_outbox() == 0  # nothing finished a whole day ago yet
    clock.advance(2 * 3600)
    assert await store.prune_outbox() == 2
    assert [entry.id for entry in await store.unsent_outbox()] == [pending.id]


async def test_due_and_unsent_outbox_keep_creation_order_across_a_reopen(
    backend: Backend, store: AnyStore, clock: FakeClock
) -> None:
    message = await inbound(store, "1")
    entries = [
        await store.enqueue_outbox(
            inbound_id=message.id, channel="telegram", account="default", target=TARGET, payload={"part": part}
        )
        for part in range(4)
    ]
    await store.mark_sent(entries[0].id, "m0")
    await store.mark_send_failed(entries[1].id, "timeout", retry_at=clock.now + 60)
    store = await backend.reopen(store)
    assert [entry.payload["part"] for entry in await store.unsent_outbox()] == [1, 2, 3]
    assert [entry.payload["part"] for entry in await store.due_outbox()] == [2, 3]
    assert [entry.payload["part"] for entry in await store.outbox_for_inbound(message.id)] == [0, 1, 2, 3]


async def test_enqueue_once_records_a_key_once_and_hands_back_the_first_record(store: AnyStore) -> None:
    first = await store.enqueue_once([reply(None, "card", key="k-1"), reply(None, "plain"), reply(None, "x", "k-1")])
    assert [entry.dedupe_key for entry in first] == ["k-1", None, "k-1"]
    assert first[0] == first[2]
    await store.mark_sent(first[0].id, "m-1")
    again = await store.enqueue_once([reply(None, "card again", key="k-1"), reply(None, "new", key="k-2")])
    assert (again[0].id, again[0].status, again[0].payload) == (first[0].id, "sent", {"t": "card"})
    assert [entry.payload for entry in await store.unsent_outbox()] == [{"t": "plain"}, {"t": "new"}]


async def test_two_processes_enqueueing_one_key_record_it_once(backend: Backend) -> None:
    stores = [await backend.open() for _ in range(2)]
    batches = await asyncio.gather(
        *(store.enqueue_once([reply(None, f"{n}", key=f"k-{n}")]) for n in range(10) for store in stores)
    )
    assert len({batch[0].id for batch in batches}) == 10
    assert len(await stores[0].unsent_outbox()) == 10


# --- streamed answers still being written (previews) ----------------------------------------------------------------


async def test_previews_are_kept_replaced_and_seen_by_another_process_and_after_reopen_until_cleared(
    backend: Backend, store: AnyStore, clock: FakeClock
) -> None:
    first, second, third = [await inbound(store, str(number)) for number in (1, 2, 3)]
    await store.set_preview(first.id, "telegram", "main", TARGET, "501")
    clock.advance(1)
    await store.set_preview(second.id, "telegram", "main", {"chat_id": "43"}, "502")
    clock.advance(1)
    await store.set_preview(first.id, "telegram", "main", TARGET, "503")  # one per message: the latest
    expected = [(second.id, "502", {"chat_id": "43"}), (first.id, "503", TARGET)]
    assert [(p.inbound_id, p.message_id, p.target) for p in await (await backend.open()).previews()] == expected
    store = await backend.reopen(store)
    assert [(p.inbound_id, p.message_id, p.target) for p in await store.previews()] == expected
    await store.clear_previews([])
    await store.clear_previews([second.id, third.id, 9999])  # a message without one is fine
    assert [p.inbound_id for p in await store.previews()] == [first.id]


async def test_finishing_a_message_forgets_its_preview_only(store: AnyStore) -> None:
    answered, other = await inbound(store, "1"), await inbound(store, "2")
    await store.set_preview(answered.id, "telegram", "main", TARGET, "501")
    await store.set_preview(other.id, "telegram", "main", TARGET, "502")
    await store.finish_inbound([answered.id], "done")
    assert [p.inbound_id for p in await store.previews()] == [other.id]


async def test_a_pruned_message_takes_its_preview_with_it(store: AnyStore, clock: FakeClock) -> None:
    message = await inbound(store, "1")
    await store.set_preview(message.id, "telegram", "main", TARGET, "501")
    await store.mark_inbound(message.id, "done")
    clock.advance(25 * 3600)
    assert await store.prune_inbound() == 1
    assert await store.previews() == []


# --- pairing and allowlists ----------------------------------------------------------------------------------------


async def test_a_sender_keeps_one_pairing_code_and_new_senders_always_get_one(
    store: AnyStore, clock: FakeClock
) -> None:
    async def ask(sender: str) -> str:
        return (await store.request_pairing("telegram", "main", sender, None, ttl=3600, max_pending=3)).code

    first = await ask("stranger1")
    assert await ask("stranger1") == first  # asking again is the same request
    for number in (2, 3):
        clock.advance(1)
        await ask(f"stranger{number}")
    clock.advance(1)
    newcomer = await ask("newcomer")  # three are waiting: the oldest makes room, nobody is turned away
    waiting = {record.sender_id: record.code for record in await store.pending_pairings("telegram")}
    assert waiting == {"stranger2": waiting["stranger2"], "stranger3": waiting["stranger3"], "newcomer": newcomer}
    assert await store.approve_pairing("telegram", first, "telegram:1") is None  # the dropped code is void
    approved = await store.approve_pairing("telegram", f" {newcomer.lower()} ", "telegram:1")
    assert approved is not None and (approved.sender_id, approved.status) == ("newcomer", "approved")
    assert await store.is_allowed_sender("telegram", "main", "newcomer")
    assert not await store.is_allowed_sender("telegram", "other", "newcomer")
    assert await store.approve_pairing("telegram", newcomer, "telegram:1") is None  # once
    clock.advance(3600)
    assert await store.pending_pairings() == []  # expired
    assert await store.approve_pairing("telegram", waiting["stranger2"], "telegram:1") is None


async def test_the_store_revokes_one_senders_pairing_in_one_account_or_all(store: AnyStore) -> None:
    for account in ("main", "spare"):
        request = await store.request_pairing("telegram", account, "7", "Ann", ttl=60, max_pending=5)
        assert await store.approve_pairing("telegram", request.code, "cli") is not None
    await store.request_pairing("telegram", "main", "8", "Bo", ttl=60, max_pending=5)
    assert [(r.account, r.sender_id, r.sender_name, r.approved_by) for r in await store.allowed_senders()] == [
        ("main", "7", "Ann", "cli"), ("spare", "7", "Ann", "cli"),
    ]  # fmt: skip
    assert await store.revoke_pairing("telegram", "7", "spare") == (1, 0)
    assert [r.account for r in await store.allowed_senders("telegram")] == ["main"]
    assert await store.is_allowed_sender("telegram", "main", "7")
    assert not await store.is_allowed_sender("telegram", "spare", "7")
    assert await store.revoke_pairing("discord", "8") == (0, 0)  # another channel: Bo's request stays
    assert [r.sender_id for r in await store.pending_pairings()] == ["8"]
    assert await store.revoke_pairing("telegram", "8") == (0, 1)
    assert await store.revoke_pairing("telegram", "7") == (1, 0)
    assert await store.allowed_senders() == [] and await store.pending_pairings() == []


async def test_two_processes_asking_for_one_sender_give_one_code(backend: Backend) -> None:
    one, two = await backend.open(), await backend.open()
    requests = await asyncio.gather(
        *(store.request_pairing("telegram", "main", "7", None, ttl=60, max_pending=3) for store in (one, two) * 5)
    )
    assert len({request.code for request in requests}) == 1
    assert len(await one.pending_pairings()) == 1


# --- approvals -----------------------------------------------------------------------------------------------------


async def test_an_approval_is_found_by_prefix_and_decided_once(store: AnyStore, clock: FakeClock) -> None:
    await store.create_approval(approval("abc1", clock.now, turn="t1", offer_always=False, requester="Ann"))
    clock.advance(1)
    await store.create_approval(approval("abc2", clock.now))
    await store.create_approval(approval("xyz", clock.now))
    stored = await store.get_approval("abc1")
    assert stored == approval("abc1", NOW, turn="t1", offer_always=False, requester="Ann")
    assert [r.id for r in await store.find_approvals("abc")] == ["abc2", "abc1"]  # newest first
    assert [r.id for r in await store.pending_approvals()] == ["abc1", "abc2", "xyz"]
    decided = await store.decide_approval("abc1", "allowed", "allow-once", "telegram:1")
    assert decided is not None and (decided.status, decided.decision, decided.decided_by) == (
        "allowed", "allow-once", "telegram:1",
    )  # fmt: skip
    assert await store.decide_approval("abc1", "denied", "deny", "telegram:2") is None  # decided once
    assert await store.decide_approval("nope", "denied", "deny", None) is None
    assert await store.get_approval("abc1") == decided
    assert [r.id for r in await store.find_approvals("abc")] == ["abc2"]
    assert [r.id for r in await store.find_approvals("abc", pending_only=False)] == ["abc2", "abc1"]
    assert [r.id for r in await store.find_approvals("%", pending_only=False)] == []  # no pattern
    clock.advance(100)
    assert await store.prune_approvals(50) == 1  # the decided one; pending ones stay, however old
    assert [r.id for r in await store.find_approvals("", pending_only=False)] == ["abc2", "xyz"]


async def test_the_store_knows_an_approval_card_by_its_chat_and_message(store: AnyStore) -> None:
    await store.create_approval(approval("abc123", 1.0))
    target = {"channel": "telegram", "account": "main", "peer": {"kind": "direct", "id": "1"}, "thread_id": None}
    await store.add_approval_message("abc123", {"target": target, "message_id": "7"})
    await store.add_approval_message("abc123", {"target": target, "message_id": "7"})  # shown again: once
    await store.add_approval_message("missing", {"target": target, "message_id": "9"})
    record = await store.get_approval("abc123")
    assert record is not None and record.messages == [{"target": target, "message_id": "7"}]
    assert await store.is_approval_message("telegram", "main", "direct", "1", "7")
    await store.decide_approval("abc123", "denied", "deny", "telegram:1")
    assert await store.is_approval_message("telegram", "main", "direct", "1", "7")  # decided: still a card
    assert not await store.is_approval_message("telegram", "main", "direct", "2", "7")  # same id, other chat
    assert not await store.is_approval_message("telegram", "other", "direct", "1", "7")
    assert not await store.is_approval_message("telegram", "main", "direct", "1", "8")


async def test_the_store_lists_and_revokes_allow_always_rules_by_a_stable_id(store: AnyStore) -> None:
    await store.allow_command("main", "/usr/bin/ls", ("-la",), "Ann")
    await store.allow_command("ops", "/usr/bin/python3", ("build.py",), "Bo", "aa" * 32)
    await store.allow_command("ops", "/usr/bin/python3", ("build.py",), "Bo", "bb" * 32)  # rewritten: replaced
    rules = await store.allowed_rules()
    assert [(r.agent, r.executable, r.args, r.sha256) for r in rules] == [
        ("main", "/usr/bin/ls", ("-la",), None), ("ops", "/usr/bin/python3", ("build.py",), "bb" * 32),
    ]  # fmt: skip
    assert len({rule.id for rule in rules}) == 2 and all(len(rule.id) == 10 for rule in rules)
    assert [r.id for r in await store.allowed_rules("ops")] == [rules[1].id]
    assert await store.revoke_allowed_rule(rules[1])
    assert not await store.revoke_allowed_rule(rules[1])
    assert await store.allowed_commands("ops") == []
    assert await store.allowed_commands("main") == [("/usr/bin/ls", ("-la",), None)]


@pytest.mark.parametrize(
    "forgery",
    [
        "UPDATE approvals SET status = 'allowed', decision = 'allow-once', decided_by = 'telegram:1' WHERE id = %s",
        "UPDATE approvals SET status = 'allowed', decision = 'allow-always', decided_by = NULL WHERE id = %s",
        "UPDATE approvals SET status = 'allowed', decision = 'allow-once', seal = 'ab12' WHERE id = %s",
    ],
    ids=["decided_by", "no-decider", "made-up-seal"],
)
async def test_a_decision_written_behind_the_stores_back_is_no_decision(
    backend: Backend, store: AnyStore, forgery: str
) -> None:
    await store.create_approval(approval("a1", 1.0))
    await backend.execute(forgery, "a1")
    record = await store.get_approval("a1")
    assert record is not None and (record.status, record.decision, record.decided_by) == ("expired", None, None)


async def test_a_real_decisions_seal_does_not_carry_over_to_another_request(backend: Backend, store: AnyStore) -> None:
    await store.create_approval(approval("a1", 1.0))
    await store.create_approval(approval("a2", 2.0))
    assert await store.decide_approval("a1", "allowed", "allow-once", "telegram:1") is not None
    await backend.execute(
        "UPDATE approvals SET (status, decision, decided_by, seal) ="
        " (SELECT status, decision, decided_by, seal FROM approvals WHERE id = %s) WHERE id = %s",
        "a1",
        "a2",
    )
    record = await store.get_approval("a2")
    assert record is not None and record.status == "expired"


async def test_two_processes_share_decisions_and_settle_each_request_once(backend: Backend) -> None:
    one, two = await backend.open(), await backend.open()
    for number in range(20):
        await one.create_approval(approval(f"a{number}", float(number)))
    outcomes = await asyncio.gather(
        *(store.decide_approval(f"a{n}", "allowed", "allow-once", who) for n in range(20)
          for store, who in ((one, "one"), (two, "two")))
    )  # fmt: skip
    winners = [outcome for outcome in outcomes if outcome is not None]
    assert sorted(record.id for record in winners) == sorted(f"a{n}" for n in range(20))  # each exactly once
    for record in winners:  # a decision sealed in one process counts in the other
        assert await two.get_approval(record.id) == record == await one.get_approval(record.id)


# --- jobs and their runs -------------------------------------------------------------------------------------------


async def test_jobs_are_saved_replaced_listed_and_removed(store: AnyStore, clock: FakeClock) -> None:
    saved = await store.save_job({"id": "daily", "cron": "0 9 * * *"}, created_by="owner")
    clock.advance(5)
    await store.save_job({"id": "hourly", "every": "1h"})
    replaced = await store.save_job({"id": "daily", "cron": "0 10 * * *"}, created_by="someone else")
    assert (replaced.created_by, replaced.created, replaced.updated) == ("owner", saved.created, clock.now)
    assert replaced.job == {"id": "daily", "cron": "0 10 * * *"}
    assert [job.id for job in await store.list_jobs()] == ["daily", "hourly"]
    assert await store.get_job("daily") == replaced
    assert await store.remove_job("daily")
    assert not await store.remove_job("daily")
    assert await store.get_job("daily") is None


async def test_a_tick_is_recorded_once_with_its_journal_row(store: AnyStore, clock: FakeClock) -> None:
    run = await store.start_job_run("daily", 5000.0, inbound=entry("cron:daily:5000"))
    assert run is not None and run.inbound_id is not None
    assert (run.status, run.tick, run.started, run.ended, run.manual) == ("running", 5000.0, clock.now, None, False)
    assert [record.id for record in await store.unfinished_inbound()] == [run.inbound_id]
    assert await store.start_job_run("daily", 5000.0, inbound=entry("cron:daily:5000b")) is None
    skipped = await store.start_job_run("daily", 6000.0, "skipped", "the bot was down")
    assert skipped is not None and (skipped.status, skipped.ended, skipped.detail) == (
        "skipped", clock.now, "the bot was down"
    )  # fmt: skip
    with pytest.raises(ValueError, match="already holds"):  # its journal row exists: the run is rolled back too
        await store.start_job_run("daily", 7000.0, inbound=entry("cron:daily:5000"))
    assert await store.last_job_ticks() == {"daily": 6000.0}
    assert [r.tick for r in await store.job_runs("daily")] == [6000.0, 5000.0]
    assert [r.id for r in await store.open_job_runs()] == [run.id]


async def test_two_processes_starting_one_tick_run_it_once(backend: Backend) -> None:
    stores = [await backend.open() for _ in range(3)]
    runs = await asyncio.gather(
        *(store.start_job_run("daily", 5000.0, inbound=entry(f"cron:{n}")) for n, store in enumerate(stores))
    )
    assert sum(run is not None for run in runs) == 1
    assert len(await stores[0].unfinished_inbound()) == 1  # the losers journaled nothing


async def test_a_requested_run_is_claimed_once_and_keeps_its_first_ending(backend: Backend, store: AnyStore) -> None:
    other = await backend.open()
    first, second = await store.request_job_run("daily"), await store.request_job_run("daily")  # one clock reading
    assert first.id != second.id and first.manual and first.status == "requested"
    claims = await asyncio.gather(
        store.claim_job_run(first.id, entry("run:1")), other.claim_job_run(first.id, entry("run:1b"))
    )
    [claimed] = [claim for claim in claims if claim is not None]
    assert claimed.status == "running" and claimed.inbound_id is not None
    assert len(await store.unfinished_inbound()) == 1
    await store.finish_job_run(first.id, "ok", message_ids=["m-1"])
    await store.finish_job_run(first.id, "error", "too late")
    await store.finish_job_run(second.id, "skipped", "asked twice")
    with pytest.raises(ValueError, match="final"):
        await store.finish_job_run(second.id, "running")
    runs = {run.id: run for run in await store.job_runs()}
    assert (runs[first.id].status, runs[first.id].message_ids) == ("ok", ["m-1"])
    assert runs[second.id].status == "skipped"
    assert await store.claim_job_run(second.id, entry("run:2")) is None
    assert await store.open_job_runs() == []
    assert await store.last_job_ticks() == {}  # requested runs are not ticks of the schedule


async def test_settling_ends_runs_whose_answer_has_left_the_outbox(
    backend: Backend, store: AnyStore, clock: FakeClock
) -> None:
    other = await backend.open()
    runs = [await store.start_job_run(f"job-{n}", 100.0, inbound=entry(f"cron:{n}")) for n in range(5)]
    ids = [run.inbound_id for run in runs if run is not None and run.inbound_id is not None]
    assert len(ids) == 5
    ok, quiet, dead, failed, waiting = ids
    [sent] = await store.finish_inbound([ok], "done", replies=[reply(ok, "hello")])
    await store.mark_sent(sent.id, "m-9")
    await store.finish_inbound([quiet], "done")
    [lost] = await store.finish_inbound([dead], "done", replies=[reply(dead, "hello")])
    await store.mark_dead(lost.id, "403 blocked")
    await store.finish_inbound([failed], "failed", "provider down")
    await store.finish_inbound([waiting], "done", replies=[reply(waiting, "hello")])  # still pending in the outbox
    clock.advance(7)
    settled = [*(await asyncio.gather(store.settle_job_runs(), other.settle_job_runs()))]
    ended = sorted((run for batch in settled for run in batch), key=lambda run: run.id)
    assert [(run.job_id, run.status, run.detail, run.message_ids, run.ended) for run in ended] == [
        ("job-0", "ok", None, ["m-9"], clock.now),
        ("job-1", "ok", "nothing sent (NO_REPLY or HEARTBEAT_OK)", [], clock.now),
        ("job-2", "undeliverable", "403 blocked", [], clock.now),
        ("job-3", "error", "provider down", [], clock.now),
    ]  # each ended by one process only
    assert [run.job_id for run in await store.open_job_runs()] == ["job-4"]
    assert await store.settle_job_runs() == []


async def test_a_run_answered_in_a_batch_settles_by_the_batchs_answer(store: AnyStore) -> None:
    run = await store.start_job_run("job", 100.0, inbound=entry("cron:1"))
    assert run is not None and run.inbound_id is not None
    person = await store.record_inbound("telegram", "main", "direct:1", "m-1", {"text": "and also"})
    assert person is not None
    # One turn answered both: its replies hang off its newest message, the person's.
    [sent] = await store.finish_inbound([run.inbound_id, person.id], "done", replies=[reply(person.id, "both")])
    await store.mark_sent(sent.id, "m-42")
    [ended] = await store.settle_job_runs()
    assert (ended.status, ended.detail, ended.message_ids) == ("ok", None, ["m-42"])


async def test_prune_job_runs_keeps_open_runs_and_each_jobs_latest(store: AnyStore, clock: FakeClock) -> None:
    for tick in (1.0, 2.0, 3.0):
        await store.start_job_run("daily", tick, "ok")
    await store.start_job_run("other", 1.0, "error", "x")
    running = await store.start_job_run("daily", 4.0)
    clock.advance(100)
    assert await store.prune_job_runs(50) == 3  # daily's latest is the one running; other's only run stays
    assert [run.tick for run in await store.job_runs("daily")] == [4.0]
    assert running is not None and [run.id for run in await store.open_job_runs()] == [running.id]
    assert await store.last_job_ticks() == {"daily": 4.0, "other": 1.0}


# --- subagents -----------------------------------------------------------------------------------------------------


def announce(calls: list[SubagentRecord]) -> Callable[[SubagentRecord], JournalEntry]:
    def announcement(record: SubagentRecord) -> JournalEntry:
        calls.append(record)
        return entry(f"announce:{record.id}", f"{record.status}: {record.result}")

    return announcement


async def start(store: AnyStore, run_id: str, parent: str = "parent") -> InboundRecord:
    origin: dict[str, Any] = {"chat": "42", "depth": 1}
    return await store.start_subagent(run_id, parent, f"child:{run_id}", "main", None, "do it", origin, entry(run_id))


async def test_a_child_is_journaled_with_its_task_and_announced_once(store: AnyStore, clock: FakeClock) -> None:
    task = await start(store, "r1")
    [child] = await store.subagents("parent", open_only=True)
    assert (child.id, child.status, child.inbound_id, child.origin, child.ended) == (
        "r1", "running", task.id, {"chat": "42", "depth": 1}, None
    )  # fmt: skip
    with pytest.raises(ValueError, match="already holds"):  # its task is journaled already: no second child either
        await store.start_subagent("r2", "parent", "child:r2", "main", "label", "t", {}, entry("r1"))
    assert await store.subagent("r2") is None
    clock.advance(5)
    calls: list[SubagentRecord] = []
    announced = await store.end_subagent("r1", "done", "all good", [task.id], announce(calls))
    assert announced is not None and announced.payload == {"t": "done: all good"}
    assert [(call.status, call.result, call.ended) for call in calls] == [("done", "all good", clock.now)]
    assert [record.id for record in await store.unfinished_inbound()] == [announced.id]  # the task row is done
    assert await store.end_subagent("r1", "failed", "again", [task.id], announce(calls)) is None
    assert len(calls) == 1
    assert await store.kill_subagent("r1") is None
    assert await store.subagents("parent", open_only=True) == []
    assert [child.id for child in await store.subagents()] == ["r1"]


async def test_a_kill_wins_over_the_status_the_child_ends_with(backend: Backend, store: AnyStore) -> None:
    task = await start(store, "r1")
    await store.mark_inbound(task.id, "failed", error="cut short")
    killed = await store.kill_subagent("r1")
    assert killed is not None and (killed.status, killed.ended) == ("killed", None)
    calls: list[SubagentRecord] = []
    assert await store.end_subagent("r1", "done", "partial", [task.id], announce(calls)) is not None
    assert [call.status for call in calls] == ["killed"]
    rows = await backend.query("SELECT status, session_key FROM inbound ORDER BY id")
    assert rows == [("failed", None), ("pending", None)]  # a finished row keeps its ending
    assert await store.kill_subagent("nobody") is None


async def test_two_processes_ending_one_child_announce_it_once(backend: Backend) -> None:
    stores = [await backend.open() for _ in range(3)]
    task = await start(stores[0], "r1")
    calls: list[SubagentRecord] = []
    ends = await asyncio.gather(
        *(store.end_subagent("r1", "done", f"by {n}", [task.id], announce(calls)) for n, store in enumerate(stores))
    )
    assert sum(end is not None for end in ends) == 1
    assert len(await stores[0].unfinished_inbound()) == 1  # the one announcement


async def test_children_are_listed_per_parent_and_pruned_once_ended(store: AnyStore, clock: FakeClock) -> None:
    for run_id, parent in (("a", "p1"), ("b", "p2"), ("c", "p1")):
        await start(store, run_id, parent)
        clock.advance(1)
    assert [child.id for child in await store.subagents("p1")] == ["a", "c"]
    await store.end_subagent("a", "timed_out", "slow", [], announce([]))
    assert [child.id for child in await store.subagents("p1", open_only=True)] == ["c"]
    clock.advance(100)
    assert await store.prune_subagents(50) == 1
    assert [child.id for child in await store.subagents()] == ["b", "c"]


# --- concurrency and the event loop ----------------------------------------------------------------------------


async def test_many_concurrent_calls_all_land_once(store: AnyStore) -> None:
    # 200 distinct messages, each delivered twice, all at once.
    calls = [
        store.record_inbound("telegram", "default", str(number % 7), str(number), {"n": number})
        for number in range(200)
        for _ in range(2)
    ]
    results = await asyncio.gather(*calls)
    recorded = [record for record in results if record is not None]
    assert len(recorded) == 200
    assert sorted(int(record.message_id) for record in recorded) == list(range(200))
    assert len({record.id for record in recorded}) == 200
    assert len(await store.unfinished_inbound()) == 200

    touches = [store.touch_session("k", usage=Usage(input_tokens=1, output_tokens=2)) for _ in range(100)]
    await store.ensure_session("k", "main")
    await asyncio.gather(*touches)
    record = await store.get_session("k")
    assert record is not None
    assert (record.input_tokens, record.output_tokens) == (100, 200)


async def test_a_ticker_keeps_ticking_during_500_writes(store: AnyStore) -> None:
    ticks = 0
    stop = asyncio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    for number in range(500):
        await inbound(store, str(number))
    stop.set()
    await task
    # Were the writes to hold the loop, the ticker could not run between them. Off the loop it runs during each; the
    # journal's write is a quick one on SQLite, run on the loop, which gives the others a turn every QUICK_TURN.
    assert ticks >= 500 // QUICK_TURN
    assert len(await store.unfinished_inbound()) == 500
