"""Two gateways on one PostgreSQL database, in one process, each with its own door to the same chat account: a
message that arrives through one for a session the other is running is run by the other, as one process would (its
queue mode, its /stop); a process whose session was taken over writes nothing more for it (the fence)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from configs import config_of
from fakes.llm import FakeLLM, RecordedRequest, Reply, ToolCallSpec
from helpers import eventually

from bot.app import App
from bot.gateway.process import Gateway
from bot.store import OutboxEntry
from bot.store.base import Fence, FencedOut, fenced
from bot.store.postgres import PostgresStore
from bot.store.postgres.cluster import LockKind, PgMember
from channels import MemoryChannel
from channels.base import InboundMessage
from routing import Peer


def make_app(tmp_path: Path, llm: FakeLLM, chat: MemoryChannel, url: str, **extra: Any) -> App:
    config = config_of(tmp_path, llm, state={"backend": "postgres", "url": url}, **extra)
    return App(config, tmp_path / "state", adapters=[chat])


@asynccontextmanager
async def two_gateways(
    tmp_path: Path, llm: FakeLLM, url: str, **extra: Any
) -> AsyncIterator[tuple[MemoryChannel, Gateway, MemoryChannel, Gateway]]:
    """Two gateways on one database; the second starts full (it takes no session), so every session goes to the
    first until a test makes room in the second: which process takes a lane nobody holds is otherwise a race."""
    first, second = MemoryChannel(), MemoryChannel()
    async with AsyncExitStack() as stack:
        one = await stack.enter_async_context(make_app(tmp_path / "one", llm, first, url, **extra).running())
        two = await stack.enter_async_context(make_app(tmp_path / "two", llm, second, url, **extra).running())
        full(two)
        yield first, one, second, two


def full(gateway: Gateway, room: int = 0) -> None:
    """Let `gateway` hold at most `room` sessions (0: it takes none; the sessions it holds stay)."""
    assert gateway.cluster is not None
    gateway.cluster.capacity = room


async def test_a_message_for_a_session_running_elsewhere_joins_it_there_in_collect_mode(
    tmp_path: Path, fake_llm: FakeLLM, postgres_url: str
) -> None:
    fake_llm.script(Reply.held("First answer."), "Both later ones.")
    async with two_gateways(tmp_path, fake_llm, postgres_url, session={"queue": {"debounce_ms": 0}}) as gateways:
        first, one, second, _two = gateways
        await first.say("one", sender="alice")
        await eventually(lambda: fake_llm.holding == 1, "the first turn to run in the first process")
        key = next(iter(one.cluster.held)) if one.cluster else ""
        await second.say("two", sender="alice")  # arrives through the other process
        await second.say("three", sender="alice")
        await eventually(lambda: one.lanes.depth(key) == 2, "both to be queued behind the running turn, there")
        fake_llm.release()
        assert [sent.text for sent in await first.replies(2)] == ["First answer.", "Both later ones."]
    assert second.sent == []  # the process holding the chat sent it all
    last = fake_llm.requests[-1].body["messages"][-1]["content"]
    assert "two" in json.dumps(last) and "three" in json.dumps(last)  # one turn for both (collect)


async def test_stop_sent_through_another_process_stops_the_turn_where_it_runs(
    tmp_path: Path, fake_llm: FakeLLM, postgres_url: str
) -> None:
    fake_llm.script(Reply.held("Never finished."))
    async with two_gateways(tmp_path, fake_llm, postgres_url) as (first, one, second, _two):
        await first.say("a long one", sender="alice")
        await eventually(lambda: fake_llm.holding == 1, "the turn to run in the first process")
        await second.say("/stop", sender="alice")
        [stopped] = await first.replies(1)
        assert stopped.text == "Stopped."
        await eventually(lambda: one.lanes.lane_count() == 0, "the turn to end")
    assert second.sent == []


async def test_the_sessions_spread_over_the_processes_and_each_chat_keeps_its_order(
    tmp_path: Path, fake_llm: FakeLLM, postgres_url: str
) -> None:
    people = [f"p{n}" for n in range(6)]
    for person in people:
        first_answer = Reply.held("p0 a0") if person == "p0" else f"{person} a0"
        fake_llm.script_for(f"{person} m0", first_answer, *(f"{person} a{n}" for n in range(1, 3)))
    extra = {"defaults": {"max_concurrent": 1}, "session": {"queue": {"mode": "followup"}}}
    async with two_gateways(tmp_path, fake_llm, postgres_url, **extra) as (first, _one, second, two):
        assert two.cluster is not None
        full(two, room=1)  # both processes take sessions here
        for n in range(3):
            for person in people:
                await first.say(f"{person} m{n}", sender=person)
        # The first process is full (one session at a time, p0's turn held): the others wait for the second.
        await eventually(lambda: bool(two.cluster.held), "the second process to take a session")
        fake_llm.release()
        await eventually(lambda: len(first.sent) + len(second.sent) == 18, "every message answered")
    for person in people:
        said = [sent.text for sent in [*first.sent, *second.sent] if sent.target.peer.id == person]
        assert sorted(said) == [f"{person} a{n}" for n in range(3)]
        for channel in (first, second):
            mine = [sent.text for sent in channel.sent if sent.target.peer.id == person]
            assert mine == sorted(mine)  # in order wherever sent
    assert first.sent and second.sent  # both processes ran sessions


async def test_a_process_whose_session_was_taken_over_writes_nothing_more_for_it(postgres_url: str) -> None:
    async with await PostgresStore.open(postgres_url) as store:
        record = await store.record_inbound("memory", "default", "direct:alice", "m1", {"text": "hi"})
        assert record is not None
        lost, taker = PgMember(store.db, "lost"), PgMember(store.db, "taker")
        await lost.connect()
        await taker.connect()
        try:
            await lost.set_lane(record.id, "lane")
            assert await lost.try_lock(LockKind.LANE, "lane")
            old = await lost.next_fence("lane")
            assert [claimed.id for claimed in await lost.claim("lane", taken_over=True)] == [record.id]
            assert not await taker.try_lock(LockKind.LANE, "lane")  # held

            await lost.connect()  # its connection went (a network cut): its locks with it
            assert await taker.try_lock(LockKind.LANE, "lane")
            new = await taker.next_fence("lane")
            assert [claimed.id for claimed in await taker.claim("lane", taken_over=True)] == [record.id]

            reply = OutboxEntry(
                inbound_id=record.id, channel="memory", account="default", target={}, payload={"text": "late"}
            )
            with fenced(Fence("lane", old)), pytest.raises(FencedOut):
                await store.finish_inbound([record.id], "done", replies=[reply])
            with fenced(Fence("lane", old)), pytest.raises(FencedOut):
                await store.mark_inbound(record.id, "failed", "cut off")
            assert await store.outbox_for_inbound(record.id) == []  # nothing of the old holder's was written

            with fenced(Fence("lane", new)):
                await store.finish_inbound([record.id], "done", replies=[reply])
            assert [entry.payload for entry in await store.outbox_for_inbound(record.id)] == [{"text": "late"}]
        finally:
            await lost.close()
            await taker.close()


async def test_a_process_that_loses_its_database_connection_leaves_its_session_to_the_other_answered_once(
    tmp_path: Path, fake_llm: FakeLLM, postgres_url: str
) -> None:
    fake_llm.script(Reply.held("Cut off."), "Answered by the other.")
    async with two_gateways(tmp_path, fake_llm, postgres_url) as (first, one, second, two):
        assert one.cluster is not None and two.cluster is not None
        await first.say("hello", sender="alice")
        await eventually(lambda: fake_llm.holding == 1, "the turn to run in the first process")
        full(one)  # once connected again, the first process takes no session back
        full(two, room=1)
        with psycopg.connect(postgres_url, autocommit=True) as admin:  # the first process's lock connection dies
            admin.execute("SELECT pg_terminate_backend(%s)", (one.cluster.member.holder,))
        await eventually(lambda: len(fake_llm.requests) == 2, "the second process to run the message again")
        [answer] = await second.replies(1)
        assert answer.text == "Answered by the other."
        fake_llm.release()  # the cut-off turn may go on: whatever it finishes is refused
        await eventually(lambda: one.lanes.lane_count() == 0, "the cut-off turn to end")
        await eventually(lambda: not two.cluster.held, "the second process to give the idle session back")
        async with await PostgresStore.open(postgres_url) as store:
            assert [record.status for record in await store.unfinished_inbound()] == []
            [row] = await store.db.fetch("SELECT status, claimed_by FROM inbound")
    assert row == {"status": "done", "claimed_by": two.cluster.member_id}
    assert [sent.text for sent in first.sent] == []  # nothing of the first process's was said


async def test_a_session_taken_by_another_process_keeps_the_queue_mode_set_with_queue_meanwhile(
    tmp_path: Path, fake_llm: FakeLLM, postgres_url: str
) -> None:
    fake_llm.script(Reply.held("Hello."))
    async with two_gateways(tmp_path, fake_llm, postgres_url) as (first, one, second, two):
        assert one.cluster is not None and two.cluster is not None
        await first.say("/queue interrupt", sender="alice")  # both processes were running already
        [changed] = await first.replies(1)
        assert "interrupt" in changed.text
        await eventually(lambda: not one.cluster.held, "the first process to give the idle session back")
        full(one)  # the first process is full: the second takes the session
        full(two, room=1)
        await second.say("hello", sender="alice")
        await eventually(lambda: fake_llm.holding == 1, "the turn to run in the second process")
        [key] = two.cluster.held
        assert two.lanes.mode(key) == "interrupt"
        fake_llm.release()
        await second.replies(1)


async def test_a_message_journaled_by_a_process_that_died_before_offering_it_is_answered(
    tmp_path: Path, fake_llm: FakeLLM, postgres_url: str
) -> None:
    fake_llm.script("Found it.")
    async with two_gateways(tmp_path, fake_llm, postgres_url) as (first, _one, second, _two):
        left = InboundMessage(
            channel="memory", account="default", peer=Peer("direct", "alice"), sender_id="alice", text="anyone?",
            message_id="orphan-1",
        )  # fmt: skip
        async with await PostgresStore.open(postgres_url) as store:  # journaled, then the process was gone
            await store.record_inbound("memory", "default", "direct:alice", "orphan-1", left.model_dump(mode="json"))
        await eventually(lambda: len(first.sent) + len(second.sent) == 1, "the orphan to be answered")
    assert [sent.text for sent in [*first.sent, *second.sent]] == ["Found it."]


AGENTS = {
    "defaults": {"max_concurrent": 1},  # a process runs one session at a time: the asked one runs in the other
    "agents": [{"id": "main", "default": True}, {"id": "ops"}],
    "bindings": [{"agent": "ops", "match": {"channel": "memory", "peer": {"kind": "direct", "id": "bob"}}}],
    "tools": {"agent_to_agent": {"allow": [["main", "ops"]]}},
    "owners": ["memory:alice"],  # the session tools are the owners'
}


async def ops_session(
    one: Gateway, second: MemoryChannel, two: Gateway, llm: FakeLLM, url: str, *answers: Reply | str
) -> str:
    """Bob says hello to `ops` through the second process, which answers and gives the session back: its key. From
    then on each process takes one session at a time, and the first takes them first."""
    assert two.cluster is not None
    llm.script_for("hello ops", "Hi.", *answers)
    full(one)
    full(two, room=1)
    await second.say("hello ops", sender="bob")
    assert [sent.text for sent in await second.replies(1)] == ["Hi."]
    await eventually(lambda: not two.cluster.held, "the ops session to be given back")
    full(two)
    full(one, room=1)
    [ops] = await query(url, "SELECT session_key FROM sessions WHERE agent = 'ops'")
    return str(ops["session_key"])


async def alice_asks_through_the_first(first: MemoryChannel, one: Gateway, two: Gateway) -> None:
    """Alice's session is taken by the first process; then the second makes room for the session she asks."""
    assert one.cluster is not None
    await first.say("alice asks ops", sender="alice")
    await eventually(lambda: bool(one.cluster.held), "alice's session to be taken by the first process")
    full(two, room=1)


def ask(key: str, wait: float) -> Reply:
    return Reply.tool_calls(
        ToolCallSpec("sessions_send", {"session_key": key, "message": "what is it?", "wait_seconds": wait})
    )


def tool_result(request: RecordedRequest) -> str:
    [result] = [m["content"] for m in request.body["messages"] if m["role"] == "tool"]
    return str(result)


async def test_sessions_send_waiting_for_a_session_that_runs_in_the_other_process_gets_its_answer(
    tmp_path: Path, fake_llm: FakeLLM, postgres_url: str
) -> None:
    async with two_gateways(tmp_path, fake_llm, postgres_url, **AGENTS) as (first, one, second, two):
        assert one.cluster is not None and two.cluster is not None
        key = await ops_session(one, second, two, fake_llm, postgres_url, "Ops says 42.")
        fake_llm.script_for("alice asks", ask(key, 60), "Main says: got it.")
        await alice_asks_through_the_first(first, one, two)
        assert [sent.text for sent in await first.replies(1)] == ["Main says: got it."]
        [sent_by] = await query(postgres_url, "SELECT claimed_by FROM inbound WHERE message_id LIKE 'send:%'")
        assert sent_by["claimed_by"] == two.cluster.member_id  # the asked session ran in the other process
    result = tool_result(fake_llm.requests[-1])
    assert '"status": "answered"' in result and "Ops says 42." in result  # waited for, and got, in time
    assert len(fake_llm.requests) == 4  # hi, alice's ask, ops' answer, alice's last: the answer came once
    assert [sent.text for sent in first.sent] == ["Main says: got it."] and len(second.sent) == 1


async def test_an_answer_from_the_other_process_after_the_send_stopped_waiting_comes_back_as_a_message_once(
    tmp_path: Path, fake_llm: FakeLLM, postgres_url: str
) -> None:
    async with two_gateways(tmp_path, fake_llm, postgres_url, **AGENTS) as (first, one, second, two):
        key = await ops_session(one, second, two, fake_llm, postgres_url, Reply.held("Ops says 42."))
        fake_llm.script_for("alice asks", ask(key, 0.5), "Asked; waiting.", "NO_REPLY")
        await alice_asks_through_the_first(first, one, two)
        assert [sent.text for sent in await first.replies(1)] == ["Asked; waiting."]
        assert "no answer within 0.5 s" in tool_result(fake_llm.requests[-1])
        fake_llm.release()  # ops answers now, in the other process: too late to be waited for
        await eventually(lambda: len(heard(fake_llm)) == 1, "the answer to come back to alice's session")
        await eventually(lambda: one.lanes.lane_count() + two.lanes.lane_count() == 0, "every turn to end")
    assert len(heard(fake_llm)) == 1  # as a message, once
    assert [sent.text for sent in first.sent] == ["Asked; waiting."]  # NO_REPLY: nothing more said


def heard(llm: FakeLLM) -> list[RecordedRequest]:
    """The requests of alice's session whose newest message is ops' answer."""
    found = []
    for request in llm.requests:
        messages = request.body["messages"]
        if "alice asks" in json.dumps(messages[:3]) and "Ops says 42." in json.dumps(messages[-1]):
            found.append(request)
    return found


async def query(url: str, sql: str) -> list[dict[str, Any]]:
    async with await PostgresStore.open(url) as store:
        return await store.db.fetch(sql)
