"""Several gateway processes serving the same bots from one PostgreSQL database: which process runs which session
(its lane, claimed through an advisory lock, with a fence), which sends a chat's outbox, which listens where only
one may (elected listeners), and the news they share (LISTEN/NOTIFY).

A message journaled by any process is offered to the cluster under its lane (the session key routing gives it).
The process holding that lane takes it and runs it as one process would (access, commands, the queue mode); a lane
nobody holds is taken by a process with a free slot. A lane is given back once it is idle. When a process dies its
locks go with its connection: another process takes its lanes over with a new fence (the dead one's writes would
fail) and runs what it left unfinished, as a restart would.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import psycopg

from agent.lanes import Lanes
from bot.store import InboundRecord, OutboxRecord
from bot.store.answers import ANSWERS_KEPT_SECONDS
from bot.store.base import Fence, fenced
from bot.store.database import dumps
from bot.store.postgres.cluster import LANES_CHANNEL, LockKind, PgMember
from bot.store.postgres.database import PgDatabase
from channels.base import ChannelAdapter, ElectedIngress

__all__ = ["APPROVALS_CHANNEL", "SWEEP_SECONDS", "Cluster"]

log = logging.getLogger(__name__)

APPROVALS_CHANNEL = "switchboard_approvals"  # NOTIFY payload: the id of an approval request just decided
ANSWERS_CHANNEL = "switchboard_answers"  # NOTIFY payload: a message between sessions whose answer is recorded
SWEEP_SECONDS = 1.0  # how often a process looks for lanes nobody holds, listeners to win, idle lanes to give back
RECONNECT_SECONDS = 2.0  # the wait before opening a lost lock connection again
UNROUTED_BATCH = 100  # journaled messages without a lane given one per pass

Take = Callable[[InboundRecord, bool], Awaitable[None]]


class Cluster:
    """This process's part in a cluster. `take(record, taken_over)` runs a claimed journal row here (taken_over: it
    came with a lane taken from another process, which may have left it half done); `adopt(lane)` readies a lane
    just taken (what another process may have changed about it meanwhile); `route(record)` is the lane of a journaled
    message nobody offered; at most `capacity` lanes are held at once (a busy process leaves new sessions to the
    others)."""

    def __init__(
        self,
        db: PgDatabase,
        lanes: Lanes[Any],
        take: Take,
        *,
        capacity: int,
        adapters: Callable[[], Mapping[tuple[str, str], ChannelAdapter]],
        on_approval: Callable[[str], None],
        on_answer: Callable[[str], Awaitable[None]],
        adopt: Callable[[str], Awaitable[None]],
        route: Callable[[InboundRecord], str],
    ) -> None:
        self.member_id = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        self.member = PgMember(db, self.member_id)
        self.started = db.clock()
        self.capacity = max(1, capacity)
        self._lanes = lanes
        self._take = take
        self._adapters = adapters
        self._on_approval = on_approval
        self._on_answer = on_answer
        self._pruned = float("-inf")  # when the answers between sessions were last pruned
        self._adopt = adopt
        self._route = route
        self.held: dict[str, int] = {}  # lane -> its fence while this process holds it
        self.listening: dict[str, ChannelAdapter] = {}  # elected listener key -> the adapter listening as it
        self._wanted: dict[str, bool] = {}  # lanes to look at, -> whether the offer came from this process
        self._idle: set[str] = set()  # held lanes whose work here just ended
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def resize(self, capacity: int) -> None:
        """Hold at most `capacity` lanes from now on (a live reload's `defaults.max_concurrent`)."""
        self.capacity = max(1, capacity)

    # --- start and stop ---------------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Take a seat (the lock connection), listen for the others' news, and begin sweeping."""
        await self.member.connect()
        self.member.listen([LANES_CHANNEL, APPROVALS_CHANNEL, ANSWERS_CHANNEL], self._heard)
        self._task = asyncio.create_task(self._run(), name="cluster")
        log.info("cluster: joined as %s", self.member_id)

    async def stop(self) -> None:
        """Stop taking work and close the listeners this process won (another process takes them over); the
        sessions held stay held until `leave()`, for the runs still finishing."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        for key in await self._close_listeners():
            with contextlib.suppress(psycopg.Error):
                await self.member.unlock(LockKind.INGRESS, key)

    async def leave(self) -> None:
        """Leave the cluster: every lock goes with the connection, so the others take over what is left at once."""
        self.held.clear()
        await self.member.close()

    # --- what the gateway calls -------------------------------------------------------------------------------------

    async def offer(self, inbound_id: int, lane: str) -> None:
        """A journaled message for `lane`: noted, and taken here or by whichever process holds (or takes) the lane."""
        await self.member.set_lane(inbound_id, lane)
        self._wanted[lane] = True
        self._wake.set()

    def fence(self, lane: str) -> Fence:
        """The fence work for `lane` runs under here: its token while held here, and this process's lock connection,
        which must still hold the lane (token 0, which no write passes, once the lane is given up)."""
        return Fence(lane, self.held.get(lane, 0), self.member.holder)

    def lane_idle(self, lane: str) -> None:
        """The lanes say `lane` has nothing running or queued here any more: give it back soon."""
        if lane in self.held:
            self._idle.add(lane)
            self._wake.set()

    async def announce_approval(self, approval_id: str) -> None:
        """Tell every process that `approval_id` was decided (the one whose run waits for it goes on at once)."""
        await self.member.notify(APPROVALS_CHANNEL, approval_id)

    # --- sessions_send between processes (bot.scheduled.subagents.AnswerRelay) ----------------------------------------

    async def busy(self, lane: str) -> bool:
        """Whether a turn of the session runs now, in any process."""
        return await self.member.running(lane)

    async def hand(self, job: str, answer: str) -> bool:
        """Give the answer to message `job` to the sessions_send waiting for it in another process; False when that
        send has stopped waiting (the answer then goes back as a message)."""
        if not await self.member.put_answer(job, answer):
            return False
        await self.member.notify(ANSWERS_CHANNEL, job)
        return True

    async def read(self, job: str) -> str | None:
        """The answer handed over for `job` (None when there is none)."""
        return (await self.member.get_answer(job))[1]

    def holdings(self) -> dict[str, list[str]]:
        """What this process holds now: its sessions and its elected listeners (`bot status`)."""
        return {"sessions": sorted(self.held), "ingress": sorted(self.listening)}

    @contextlib.asynccontextmanager
    async def sending(self, record: OutboxRecord) -> AsyncIterator[list[OutboxRecord] | None]:
        """Hold `record`'s chat for sending: its pending entries as they stand now, in order; None when another
        process is sending that chat right now."""
        name = f"{record.channel}:{record.account}:{dumps(record.target)}"
        if not await self.member.try_lock(LockKind.CHAT, name):
            yield None
            return
        try:
            yield await self.member.chat_outbox(record)
        finally:
            with contextlib.suppress(psycopg.Error):
                await self.member.unlock(LockKind.CHAT, name)

    async def settled(self, ids: list[int]) -> list[OutboxRecord]:
        """Which of the outbox entries `ids` are sent or dead by now (by any process)."""
        return await self.member.outbox_status(ids) if ids else []

    # --- the sweep --------------------------------------------------------------------------------------------------

    async def _heard(self, channel: str, payload: str) -> None:
        if channel == APPROVALS_CHANNEL:
            self._on_approval(payload)
        elif channel == ANSWERS_CHANNEL:
            await self._on_answer(payload)
        elif channel == LANES_CHANNEL:
            self._wanted.setdefault(payload, False)
            self._wake.set()

    async def _run(self) -> None:
        while True:
            try:
                await self._pass()
            except psycopg.OperationalError as error:
                await self._lost(error)
            except Exception:
                log.exception("cluster: a pass failed")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(SWEEP_SECONDS):
                    await self._wake.wait()
            self._wake.clear()

    async def _pass(self) -> None:
        """One look around: win listeners nobody holds (first: a bot nobody listens for hears nothing), give idle
        lanes back, feed the lanes asked for, take open lanes while there is room."""
        await self.member.alive()
        await self._elect()
        if self.member.db.clock() - self._pruned > 3600:
            self._pruned = self.member.db.clock()
            await self.member.prune_answers(ANSWERS_KEPT_SECONDS)
        await self._give_back()
        for record in await self.member.unrouted(UNROUTED_BATCH):
            await self.member.set_lane(record.id, self._route(record))
        wanted, self._wanted = self._wanted, {}
        for lane, ours in wanted.items():
            if lane in self.held:
                await self._feed(lane, taken_over=False)
            elif not await self._take_lane(lane) and ours:
                await self.member.notify(LANES_CHANNEL, lane)  # held elsewhere, or no room here: tell the others
        room = self.capacity - len(self.held)
        if room > 0:
            for lane in await self.member.open_lanes(room):
                await self._take_lane(lane)

    async def _take_lane(self, lane: str) -> bool:
        if len(self.held) >= self.capacity or not await self.member.try_lock(LockKind.LANE, lane):
            return False
        self.held[lane] = await self.member.next_fence(lane)
        self._idle.add(lane)  # looked at again on the next pass: nothing may be left to run, or this may fail
        await self._adopt(lane)
        await self._feed(lane, taken_over=True)
        return True

    async def _feed(self, lane: str, *, taken_over: bool) -> None:
        for record in await self.member.claim(lane, taken_over=taken_over):
            try:
                with fenced(self.fence(lane)):
                    await self._take(record, taken_over)
            except Exception:  # one bad message must not stop the others
                log.exception("cluster: message %d could not be handled", record.id)

    async def _give_back(self) -> None:
        idle, self._idle = self._idle, set()
        candidates = [lane for lane in idle if lane in self.held and not self._lanes.active(lane)]
        if not candidates:
            return
        unfinished = await self.member.unfinished_lanes(candidates)
        for lane in candidates:
            if lane in unfinished:  # work nothing here is running: (re)take all of it
                await self._feed(lane, taken_over=True)
                self._idle.add(lane)
                continue
            del self.held[lane]
            await self.member.unlock(LockKind.LANE, lane)

    async def _lost(self, error: Exception) -> None:
        """The lock connection broke: every lock is gone. Stop the turns of the lanes held (their writes would fail
        anyway), close the listeners, and take a seat again."""
        log.warning("cluster: the lock connection failed (%s); %d session(s) given up", error, len(self.held))
        lanes, self.held = list(self.held), {}
        for lane in lanes:
            await self._lanes.stop(lane)
        await self._close_listeners()
        await asyncio.sleep(RECONNECT_SECONDS)
        try:
            await self.member.connect()
        except psycopg.OperationalError as again:
            log.warning("cluster: cannot connect again yet (%s)", again)

    # --- elected listeners ------------------------------------------------------------------------------------------

    async def _elect(self) -> None:
        """Open each elected listener this process can win; let go of those whose adapter is gone or replaced."""
        current: dict[str, ChannelAdapter] = {}
        for adapter in self._adapters().values():
            if isinstance(adapter, ElectedIngress) and adapter.ingress_deferred:
                for key in adapter.ingress_keys():
                    current[key] = adapter
        for key, adapter in list(self.listening.items()):
            if current.get(key) is not adapter:
                del self.listening[key]  # its adapter stopped (a reload): the lock passes to the new one below
                if key not in current:
                    await self.member.unlock(LockKind.INGRESS, key)
                else:
                    await self._open(key, current[key])
        for key, adapter in current.items():
            if key not in self.listening and await self.member.try_lock(LockKind.INGRESS, key):
                await self._open(key, adapter)

    async def _open(self, key: str, adapter: ChannelAdapter) -> None:
        assert isinstance(adapter, ElectedIngress)
        try:
            await adapter.open_ingress(key)
        except Exception:
            log.exception("cluster: could not open listener %s; letting another process try", key)
            await self.member.unlock(LockKind.INGRESS, key)
            return
        self.listening[key] = adapter
        log.info("cluster: listening as %s (elected)", key)

    async def _close_listeners(self) -> list[str]:
        """Close every listener this process opened; their keys (the locks are still held)."""
        listening, self.listening = self.listening, {}
        for key, adapter in listening.items():
            assert isinstance(adapter, ElectedIngress)
            try:
                await adapter.close_ingress(key)
            except Exception:
                log.exception("cluster: closing listener %s failed", key)
        return list(listening)
