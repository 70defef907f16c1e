"""The store's sessions, pairing and approvals on both backends (SQLite and a throwaway PostgreSQL server), and what
only PostgreSQL has: its migrations, its shared decision key, and several processes using one database at once."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import postgres as postgres_plugin
import psycopg
import pytest
from helpers import FakeClock
from postgres import MISSING, PostgresServer, start_postgres

from agent.messages import Usage
from bot.store import SqliteStore, StoreError
from bot.store.approvals import ApprovalRecord
from bot.store.database import DB_FILE
from bot.store.postgres import PgDatabase, PostgresStore
from bot.store.postgres.schema import SCHEMA_VERSION
from bot.store.sessions import UsageRow

AnyStore = SqliteStore | PostgresStore
NOW = 1_000_000.0
TARGET = {"chat_id": "42", "thread_id": None}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(NOW)


@pytest.fixture(params=["sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock) -> AsyncIterator[AnyStore]:
    """The same store on each backend: the roles behave alike on both."""
    opened: AnyStore
    if request.param == "sqlite":
        opened = await SqliteStore.open(tmp_path, clock=clock)
    else:
        opened = await PostgresStore.open(request.getfixturevalue("postgres_url"), clock=clock)
    async with opened:
        yield opened


def approval(approval_id: str, created: float, **fields: object) -> ApprovalRecord:
    values: dict[str, object] = {
        "id": approval_id, "agent": "main", "session_key": "s", "command": "ls", "cwd": ".",
        "approvers": ["telegram:1"], "created": created, "expires": created + 60, "status": "pending",
    }  # fmt: skip
    return ApprovalRecord.model_validate(values | fields)


# --- sessions ---------------------------------------------------------------------------------------------------


async def test_ensure_session_creates_once_then_returns_the_same_session(store: AnyStore, clock: FakeClock) -> None:
    assert await store.get_session("agent:main:telegram:direct:7") is None
    created = await store.ensure_session("agent:main:telegram:direct:7", "main")
    assert created.agent == "main" and created.created == created.updated == clock.now
    assert len(created.session_id) >= 16
    assert (created.input_tokens, created.output_tokens, created.model, created.last_target) == (0, 0, None, None)
    clock.advance(5)
    assert await store.ensure_session("agent:main:telegram:direct:7", "main") == created
    assert await store.get_session("agent:main:telegram:direct:7") == created
    other = await store.ensure_session("agent:main:telegram:direct:8", "main")
    assert other.session_id != created.session_id
    assert await store.count_sessions() == 2


async def test_touch_session_adds_tokens_keeps_fields_not_given_and_records_usage(
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
    with pytest.raises(KeyError):  # no session: neither the totals nor a row
        await store.touch_session("nobody", usage=Usage(input_tokens=1, output_tokens=1))
    with pytest.raises(ValueError, match="negative"):
        await store.touch_session("k", usage=Usage(input_tokens=-1, output_tokens=0))
    assert len(await store.usage_since(0)) == 2
    clock.advance(100)
    assert await store.prune_usage(105) == 1  # before NOW + 15
    assert [row.at for row in await store.usage_since(0)] == [NOW + 20]


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
    with pytest.raises(KeyError):
        await store.reset_session("nobody")


async def test_overrides_are_stored_merged_cleared_and_kept_across_new(store: AnyStore) -> None:
    made = await store.set_overrides("k", "main", model="fake/big")  # the session is made on first use
    assert made.overrides == {"model": "fake/big"} and made.agent == "main"
    both = await store.set_overrides("k", "main", thinking="high", queue="steer")
    assert both.overrides == {"model": "fake/big", "thinking": "high", "queue": "steer"}
    assert (await store.reset_session("k")).overrides == both.overrides
    assert (await store.set_overrides("k", "main", model=None, thinking=None)).overrides == {"queue": "steer"}
    await store.ensure_session("other", "main")
    assert await store.all_overrides() == {"k": {"queue": "steer"}}
    await store.set_overrides("k", "main", queue=None)
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


# --- pairing ------------------------------------------------------------------------------------------------------


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
    assert await store.revoke_pairing("telegram", "8") == (0, 1)
    assert await store.revoke_pairing("telegram", "7") == (1, 0)
    assert await store.allowed_senders() == [] and await store.pending_pairings() == []


# --- approvals ----------------------------------------------------------------------------------------------------


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
    assert [r.id for r in await store.allowed_rules("ops")] == [rules[1].id]
    assert await store.revoke_allowed_rule(rules[1])
    assert not await store.revoke_allowed_rule(rules[1])
    assert await store.allowed_commands("ops") == []
    assert await store.allowed_commands("main") == [("/usr/bin/ls", ("-la",), None)]


# --- PostgreSQL only: its database ----------------------------------------------------------------------------


async def version(url: str) -> int:
    async with await psycopg.AsyncConnection.connect(url) as connection:
        cursor = await connection.execute("SELECT version FROM schema_version")
        row = await cursor.fetchone()
        assert row is not None
        return int(row[0])


async def test_opening_twice_keeps_the_version_and_a_newer_schema_is_refused(postgres_url: str) -> None:
    first = await PgDatabase.open(postgres_url)
    await first.close()
    await first.close()  # closing twice is fine
    with pytest.raises(StoreError, match="closed"):
        await first.fetch("SELECT 1")
    again, concurrent = await asyncio.gather(PgDatabase.open(postgres_url), PgDatabase.open(postgres_url))
    assert again.key == concurrent.key == first.key and len(first.key) == 32  # one key, made once
    await again.close()
    await concurrent.close()
    assert await version(postgres_url) == SCHEMA_VERSION
    async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as connection:
        await connection.execute("UPDATE schema_version SET version = %s", (SCHEMA_VERSION + 1,))
    with pytest.raises(StoreError, match="newer than this Switchboard"):
        await PostgresStore.open(postgres_url)


async def test_a_database_that_cannot_be_reached_is_a_store_error_at_once(postgres_server: PostgresServer) -> None:
    with pytest.raises(StoreError, match=r'cannot connect to PostgreSQL: .*"missing" does not exist'):
        await PostgresStore.open(postgres_server.url("missing"))


async def test_the_schema_has_every_sqlite_table_with_the_same_columns(tmp_path: Path, postgres_url: str) -> None:
    await (await SqliteStore.open(tmp_path)).close()
    with sqlite3.connect(tmp_path / DB_FILE) as lite:
        tables = [row[0] for row in lite.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        expected = {
            table: sorted(row[1] for row in lite.execute(f"PRAGMA table_info({table})"))
            for table in tables
            if not table.startswith("sqlite_")
        }
    await (await PgDatabase.open(postgres_url)).close()
    async with await psycopg.AsyncConnection.connect(postgres_url) as connection:
        cursor = await connection.execute(
            "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = 'public'"
        )
        found: dict[str, list[str]] = {}
        for table, column in await cursor.fetchall():
            found.setdefault(table, []).append(column)
    assert {table: sorted(columns) for table, columns in found.items() if table in expected} == expected
    assert set(found) - set(expected) == {"schema_version", "store_keys"}


async def test_a_transaction_commits_together_or_not_at_all(postgres_url: str) -> None:
    db = await PgDatabase.open(postgres_url)
    try:
        sql = "INSERT INTO jobs (id, payload, created, updated) VALUES (%s, '{}', 1, 1)"
        with pytest.raises(RuntimeError, match="midway"):
            async with db.transaction() as tx:
                assert await tx.execute(sql, "a") == 1
                raise RuntimeError("midway")
        assert await db.fetch("SELECT id FROM jobs") == []
        async with db.transaction() as tx:
            await tx.execute(sql, "a")
            await tx.execute(sql, "b")
            assert await tx.fetchone("SELECT count(*) AS n FROM jobs") == {"n": 2}
        assert await db.fetch("SELECT id FROM jobs ORDER BY id") == [{"id": "a"}, {"id": "b"}]
        assert await db.execute("DELETE FROM jobs") == 2
        assert await db.fetchone("SELECT id FROM jobs") is None
    finally:
        await db.close()


async def forge(url: str, sql: str, *params: object) -> None:
    """Write the database behind the store's back, as a command with access to it could."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as connection:
        await connection.execute(sql, params)


@pytest.mark.parametrize(
    "forgery",
    [
        "UPDATE approvals SET status = 'allowed', decision = 'allow-once', decided_by = 'telegram:1' WHERE id = %s",
        "UPDATE approvals SET status = 'allowed', decision = 'allow-once', seal = 'ab12' WHERE id = %s",
    ],
)
async def test_a_decision_written_behind_the_stores_back_is_no_decision(postgres_url: str, forgery: str) -> None:
    async with await PostgresStore.open(postgres_url) as store:
        await store.create_approval(approval("a1", 1.0))
        await forge(postgres_url, forgery, "a1")
        record = await store.get_approval("a1")
        assert record is not None and (record.status, record.decision, record.decided_by) == ("expired", None, None)


async def test_a_real_decisions_seal_does_not_carry_over_to_another_request(postgres_url: str) -> None:
    async with await PostgresStore.open(postgres_url) as store:
        await store.create_approval(approval("a1", 1.0))
        await store.create_approval(approval("a2", 2.0))
        assert await store.decide_approval("a1", "allowed", "allow-once", "telegram:1") is not None
        await forge(
            postgres_url,
            "UPDATE approvals SET (status, decision, decided_by, seal) ="
            " (SELECT status, decision, decided_by, seal FROM approvals WHERE id = %s) WHERE id = %s",
            "a1",
            "a2",
        )
        record = await store.get_approval("a2")
        assert record is not None and record.status == "expired"


# --- PostgreSQL only: several processes on one database ----------------------------------------------------------


async def test_two_processes_share_decisions_and_settle_each_request_once(postgres_url: str) -> None:
    async with await PostgresStore.open(postgres_url) as one, await PostgresStore.open(postgres_url) as two:
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


async def test_two_processes_asking_for_one_sender_give_one_code_and_merge_overrides(postgres_url: str) -> None:
    async with await PostgresStore.open(postgres_url) as one, await PostgresStore.open(postgres_url) as two:
        requests = await asyncio.gather(
            *(store.request_pairing("telegram", "main", "7", None, ttl=60, max_pending=3) for store in (one, two) * 5)
        )
        assert len({request.code for request in requests}) == 1
        assert len(await one.pending_pairings()) == 1
        await asyncio.gather(
            one.set_overrides("k", "main", model="m"),
            two.set_overrides("k", "main", thinking="high"),
            one.set_overrides("k", "main", queue="steer"),
        )
        record = await two.get_session("k")
        assert record is not None and record.overrides == {"model": "m", "thinking": "high", "queue": "steer"}


# --- the throwaway server -----------------------------------------------------------------------------------------


def test_without_postgresql_the_tests_fail_and_name_make_test(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(postgres_plugin, "find_postgres_bin", lambda: None)
    with pytest.raises(pytest.fail.Exception, match="make test"):
        start_postgres()
    assert "make test" in MISSING


def test_the_server_listens_on_loopback_only(postgres_server: PostgresServer) -> None:
    with psycopg.connect(postgres_server.url()) as connection:
        row = connection.execute("SHOW listen_addresses").fetchone()
    assert row == ("127.0.0.1",)
