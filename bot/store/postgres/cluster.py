"""What several gateway processes on one PostgreSQL database coordinate through: advisory locks held on a connection
of the process's own (a session's lane, a chat's outbox, an elected listener), each session's fence, journal rows
claimed per lane, and notifications between the processes."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from enum import IntEnum
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

from bot.store.database import dumps
from bot.store.journal import InboundRecord, inbound_record
from bot.store.outbox import OutboxRecord, outbox_record
from bot.store.postgres.answers import get_answer, put_answer
from bot.store.postgres.database import LANE_LOCK, PgDatabase, lock_granted

__all__ = ["LANES_CHANNEL", "LockKind", "PgMember"]

if TYPE_CHECKING:
    from bot.store.answers import AnswerStore

log = logging.getLogger(__name__)

LANES_CHANNEL = "switchboard_lanes"  # NOTIFY payload: a lane with a message nobody has claimed yet
_UNFINISHED = "status IN ('pending', 'running')"
# The server drops a member whose machine vanished (no FIN ever comes) within about 10 s, releasing its locks.
_SERVER_KEEPALIVE = (
    "SET tcp_keepalives_idle = 4",
    "SET tcp_keepalives_interval = 2",
    "SET tcp_keepalives_count = 3",
)


class LockKind(IntEnum):
    """The first key of a two-key advisory lock: what the lock is for (the second is `hashtext` of its name). Two
    names with the same hash share a lock, which only makes them wait for each other."""

    LANE = LANE_LOCK  # a session: the process holding it runs its turns
    CHAT = 2  # a chat's outbox: the process holding it sends the chat's entries, in order
    INGRESS = 3  # an elected listener (a Telegram poller, a Discord shard)


class PgMember:
    """One process's seat in the cluster: a connection of its own holding its advisory locks (gone with the process:
    PostgreSQL releases them when the connection ends), another listening for notifications. Calls on the lock
    connection run one at a time. A broken lock connection raises `psycopg.OperationalError` from every call until
    `connect()` opens a new one: every lock it held is gone by then."""

    def __init__(self, db: PgDatabase, member_id: str) -> None:
        self.db = db
        self.id = member_id
        self._locks: psycopg.AsyncConnection[Any] | None = None
        self._guard = asyncio.Lock()
        self._listener: asyncio.Task[None] | None = None

    async def connect(self) -> None:
        """Open (again) the connection that holds the locks; none are held afterwards."""
        await self._close_locks()
        connection = await self.db.connect()
        for statement in _SERVER_KEEPALIVE:
            await connection.execute(statement)
        self._locks = connection

    async def close(self) -> None:
        """Release every lock (by closing their connection) and stop listening."""
        if self._listener is not None:
            self._listener.cancel()
            await asyncio.gather(self._listener, return_exceptions=True)
            self._listener = None
        await self._close_locks()

    async def _close_locks(self) -> None:
        connection, self._locks = self._locks, None
        if connection is not None:
            with contextlib.suppress(psycopg.Error):  # broken already: its locks are gone either way
                await connection.close()

    async def _one(self, sql: str, *params: object) -> dict[str, Any] | None:
        if self._locks is None:
            raise psycopg.OperationalError("the cluster's lock connection is closed")
        async with self._guard:
            cursor = await self._locks.execute(sql, params or None)
            return await cursor.fetchone()

    # --- locks ------------------------------------------------------------------------------------------------------

    @property
    def holder(self) -> int | None:
        """The backend pid of the lock connection: what a Fence names as the holder of this process's locks."""
        return None if self._locks is None else self._locks.info.backend_pid

    async def try_lock(self, kind: LockKind, name: str) -> bool:
        """Take the lock if nobody holds it; True when this process holds it now (taking it twice counts twice)."""
        row = await self._one("SELECT pg_try_advisory_lock(%s, hashtext(%s)) AS taken", int(kind), name)
        return bool(row and row["taken"])

    async def unlock(self, kind: LockKind, name: str) -> None:
        """Give one hold of the lock back."""
        await self._one("SELECT pg_advisory_unlock(%s, hashtext(%s)) AS released", int(kind), name)

    async def alive(self) -> None:
        """One round trip on the lock connection: `psycopg.OperationalError` when it (and so every lock) is gone."""
        await self._one("SELECT 1 AS alive")

    # --- lanes ------------------------------------------------------------------------------------------------------

    async def next_fence(self, lane: str) -> int:
        """Count one more hand-over of the session and return its new fence: writes under an older one fail."""
        row = await self.db.fetchone(
            "INSERT INTO session_fences (session_key, fence) VALUES (%s, 1) ON CONFLICT (session_key)"
            " DO UPDATE SET fence = session_fences.fence + 1 RETURNING fence",
            lane,
        )
        assert row is not None
        return int(row["fence"])

    async def set_lane(self, inbound_id: int, lane: str) -> None:
        """Note the lane (session key) a journaled message is routed to, so that any process can claim it."""
        await self.db.execute("UPDATE inbound SET lane = %s WHERE id = %s AND lane IS NULL", lane, inbound_id)

    async def unrouted(self, limit: int) -> list[InboundRecord]:
        """Unfinished messages nobody gave a lane yet (journaled by a process that died, or stopped, before it
        offered them), oldest first."""
        rows = await self.db.fetch(
            f"SELECT * FROM inbound WHERE lane IS NULL AND {_UNFINISHED} ORDER BY id LIMIT %s", limit
        )
        return [inbound_record(row) for row in rows]

    async def claim(self, lane: str, *, taken_over: bool) -> list[InboundRecord]:
        """Claim the lane's unfinished messages for this process, in arrival order: those nobody claimed yet, or,
        right after taking the lane over (`taken_over`), every one (a previous holder's are its leftovers). Rows
        another process is claiming at this moment are skipped, never waited for."""
        mine = "" if taken_over else " AND claimed_by IS NULL"
        rows = await self.db.fetch(
            "UPDATE inbound SET claimed_by = %s WHERE id IN (SELECT id FROM inbound"
            f" WHERE lane = %s AND {_UNFINISHED}{mine} ORDER BY id FOR UPDATE SKIP LOCKED) RETURNING *",
            self.id,
            lane,
        )
        return sorted((inbound_record(row) for row in rows), key=lambda record: record.id)

    async def open_lanes(self, limit: int) -> list[str]:
        """Lanes with unfinished messages that no process holds (oldest message first): work to take."""
        rows = await self.db.fetch(
            "SELECT lane FROM inbound i WHERE lane IS NOT NULL AND status IN ('pending', 'running')"
            f" AND NOT EXISTS ({lock_granted('i.lane')}) GROUP BY lane ORDER BY min(id) LIMIT %s",
            limit,
        )
        return [row["lane"] for row in rows]

    async def unfinished_lanes(self, lanes: Sequence[str]) -> set[str]:
        """Which of `lanes` still have unfinished messages."""
        rows = await self.db.fetch(
            f"SELECT DISTINCT lane FROM inbound WHERE lane = ANY(%s) AND {_UNFINISHED}", list(lanes)
        )
        return {row["lane"] for row in rows}

    async def running(self, lane: str) -> bool:
        """Whether a turn of the lane is running (in any process)."""
        row = await self.db.fetchone(
            "SELECT EXISTS (SELECT 1 FROM inbound WHERE lane = %s AND status = 'running') AS busy", lane
        )
        return bool(row and row["busy"])

    # --- answers between sessions -----------------------------------------------------------------------------------
    # The AnswerStore role (documented there) on the member's pool; old answers go by `prune_answers`, not on put.

    async def put_answer(self, job: str, answer: str | None) -> bool:
        return await put_answer(self.db, job, answer)

    async def get_answer(self, job: str) -> tuple[bool, str | None]:
        return await get_answer(self.db, job)

    async def prune_answers(self, older_than_seconds: float) -> int:
        """Forget answers recorded this long ago; how many."""
        return await self.db.execute(
            "DELETE FROM session_answers WHERE created < %s", self.db.cutoff(older_than_seconds)
        )

    # --- the outbox -------------------------------------------------------------------------------------------------

    async def chat_outbox(self, record: OutboxRecord) -> list[OutboxRecord]:
        """The pending entries of `record`'s chat, as they stand now, in creation order."""
        rows = await self.db.fetch(
            "SELECT * FROM outbox WHERE status = 'pending' AND channel = %s AND account = %s AND target = %s"
            " ORDER BY id",
            record.channel,
            record.account,
            dumps(record.target),
        )
        return [outbox_record(row) for row in rows]

    async def outbox_status(self, ids: Sequence[int]) -> list[OutboxRecord]:
        """The entries of `ids` that are no longer pending (sent or dead, maybe by another process)."""
        rows = await self.db.fetch("SELECT * FROM outbox WHERE id = ANY(%s) AND status <> 'pending'", list(ids))
        return [outbox_record(row) for row in rows]

    # --- notifications ----------------------------------------------------------------------------------------------

    async def notify(self, channel: str, payload: str) -> None:
        """Tell every member listening on `channel` (this one too)."""
        await self.db.execute("SELECT pg_notify(%s, %s)", channel, payload)

    def listen(self, channels: Sequence[str], handle: Callable[[str, str], Awaitable[None]]) -> None:
        """Call `handle(channel, payload)` for each notification on `channels`, from now until `close()`; a lost
        connection is opened again (what was sent meanwhile is missed: callers also look on a timer)."""
        self._listener = asyncio.create_task(self._listen(list(channels), handle), name="cluster listener")

    async def _listen(self, channels: list[str], handle: Callable[[str, str], Awaitable[None]]) -> None:
        while True:
            try:
                connection = await self.db.connect()
                async with connection:
                    for channel in channels:
                        await connection.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
                    async for note in connection.notifies():
                        try:
                            await handle(note.channel, note.payload)
                        except Exception:
                            log.exception("handling a notification on %s failed", note.channel)
            except psycopg.OperationalError as error:
                log.warning("cluster: the notification connection failed (%s); connecting again", error)
                await asyncio.sleep(1.0)


if TYPE_CHECKING:
    _checked: type[AnswerStore] = PgMember
