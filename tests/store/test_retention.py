"""Bounded state: finished records older than `state.retention_days` are pruned on a schedule, nothing unfinished."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from helpers import WAIT, FakeClock, eventually
from pydantic import ValidationError

from bot.config.settings import StateConfig
from bot.gateway.retention import DAY, keep_pruning, prune_once
from bot.store import ApprovalRecord, OutboxEntry, SqliteStore

UNUSED = {"usage": 0, "subagents": 0}  # kinds these tests make none of


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1_000_000.0)


@pytest.fixture
async def store(tmp_path: Path, clock: FakeClock) -> AsyncIterator[SqliteStore]:
    async with await SqliteStore.open(tmp_path, clock=clock) as opened:
        yield opened


def request(approval_id: str, clock: FakeClock) -> ApprovalRecord:
    return ApprovalRecord(
        id=approval_id, agent="main", session_key="k", command="ls", cwd=".", approvers=["telegram:1"],
        created=clock.now, expires=clock.now + 60, status="pending",
    )  # fmt: skip


async def fill(store: SqliteStore, clock: FakeClock, tag: str) -> None:
    """One of each record, finished and unfinished."""
    done, waiting = [await store.record_inbound("telegram", "default", "42", f"{tag}{n}", {}) for n in (1, 2)]
    assert done is not None and waiting is not None
    await store.mark_inbound(done.id, "done")
    sent, _unsent = [
        await store.enqueue_outbox(inbound_id=None, channel="t", account="a", target={}, payload={"n": n})
        for n in (1, 2)
    ]
    await store.mark_sent(sent.id, "1")
    for suffix in ("settled", "pending"):
        await store.create_approval(request(f"{tag}-{suffix}", clock))
    await store.decide_approval(f"{tag}-settled", "denied", "deny", "telegram:1")


def reply(inbound_id: int) -> OutboxEntry:
    target = {"channel": "telegram", "account": "default", "peer": {"kind": "direct", "id": "42"}}
    return OutboxEntry(
        inbound_id=inbound_id, channel="telegram", account="default", target=target, payload={"text": "y" * 2000}
    )


async def counts(store: SqliteStore) -> tuple[int, int, int]:
    unfinished = len(await store.unfinished_inbound())
    unsent = len(await store.unsent_outbox())
    pending = len(await store.pending_approvals())
    return unfinished, unsent, pending


async def test_only_what_finished_before_the_retention_window_is_pruned(store: SqliteStore, clock: FakeClock) -> None:
    await fill(store, clock, "old")
    clock.advance(31 * DAY)
    await fill(store, clock, "new")
    assert await prune_once(store, 30) == {"inbound": 1, "outbox": 1, "approvals": 1, "job_runs": 0} | UNUSED
    assert await counts(store) == (2, 2, 2)  # nothing unfinished goes, however old
    kept = {record.id for record in await store.find_approvals("", pending_only=False)}
    assert kept == {"new-settled", "new-pending", "old-pending"}
    assert await prune_once(store, 30) == {"inbound": 0, "outbox": 0, "approvals": 0, "job_runs": 0} | UNUSED


def size_on_disk(state_dir: Path) -> int:
    files = (state_dir / "state.db", state_dir / "state.db-wal")
    return sum(path.stat().st_size for path in files if path.exists())


async def test_pruning_gives_the_space_of_what_it_deleted_back(store: SqliteStore, clock: FakeClock) -> None:
    for number in range(200):
        record = await store.record_inbound("telegram", "default", "42", str(number), {"text": "x" * 2000})
        assert record is not None
        sent = await store.finish_inbound([record.id], "done", replies=[reply(record.id)])
        await store.mark_sent(sent[0].id, str(number))
    full = size_on_disk(store.path.parent)
    clock.advance(31 * DAY)
    assert await prune_once(store, 30) == {"inbound": 200, "outbox": 200, "approvals": 0, "job_runs": 0} | UNUSED
    assert size_on_disk(store.path.parent) < full / 10


async def test_pruning_runs_at_once_then_every_day_and_survives_a_failed_pass(store: SqliteStore) -> None:
    waits: list[float] = []
    passes = 0
    real_prune = store.prune_approvals

    async def flaky_prune(older_than_seconds: float) -> int:
        nonlocal passes
        passes += 1
        if passes == 1:
            raise OSError("disk hiccup")
        return await real_prune(older_than_seconds)

    async def sleep(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) >= 3:
            await asyncio.Event().wait()  # hold here until cancelled

    store.prune_approvals = flaky_prune  # type: ignore[method-assign]
    task = asyncio.create_task(keep_pruning(store, 30, sleep=sleep))
    await eventually(lambda: len(waits) == 3, "three passes", WAIT)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert passes == 3 and waits == [DAY, DAY, DAY]


def test_the_retention_is_thirty_days_and_at_least_one() -> None:
    assert StateConfig().retention_days == 30
    with pytest.raises(ValidationError):
        StateConfig(retention_days=0.5)
