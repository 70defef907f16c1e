"""The gateway connection's watchdog: reconnect-storm backoff, heartbeat ACKs and stalls, for each connection."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Protocol

import discord

from channels.accounts import DiscordAccount
from channels.backoff import CAP_SECONDS, FIRST_SECONDS, Backoff, Timing, pause
from channels.health import ChannelHealth

log = logging.getLogger("channels.discord")  # the package's one logger, as when it was one module

# Discord's gateway asks for a heartbeat every 41.25 s; a shorter `stall_seconds` would drop healthy connections.
MIN_STALL_SECONDS = 45.0
BACKOFF_FIRST = FIRST_SECONDS  # the wait before the first connection beyond a storm's limit, doubling with each one
BACKOFF_CAP = CAP_SECONDS  # waited before a connection's CONNECT_SECONDS start (see Client.connect), so it may be long
CONNECT_SECONDS = 60.0  # a new connection's handshake, HELLO and IDENTIFY or RESUME, as discord.py allows it
HEARTBEAT_ACK = 11
# A heartbeat ACK is `{"t":null,"s":null,"op":11,"d":null}`: only frames this short are parsed to find one, never
# the events, which discord.py parses anyway.
MAX_ACK_FRAME = 96


# --- reconnect storms ------------------------------------------------------------------------------------------


class ReconnectGate:
    """Counts new gateway connections and says how long each must wait. discord.py reconnects at once after a
    dropped connection, so a gateway that closes every one would see a hot loop: up to `limit` connections within
    `window` seconds go at once; the next one starts a storm, and it and each one after wait by `backoff`
    (BACKOFF_FIRST, twice as long each time up to BACKOFF_CAP, each wait between half and all of its step). The storm
    ends when a connection stays up `window / limit` seconds after its READY (slower than a storm could be), or after
    a whole window without a connection: the count and the backoff start over."""

    def __init__(
        self,
        limit: int,
        window: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        backoff: Backoff | None = None,
    ) -> None:
        self.limit = limit
        self.window = window
        self.stable_seconds = window / limit
        self.backoff = backoff or Backoff(BACKOFF_FIRST, BACKOFF_CAP)
        self._clock = clock
        self._attempts: deque[float] = deque()
        self._ready_at: float | None = None

    @property
    def recent(self) -> int:
        """The connections within the window, as of the last attempt."""
        return len(self._attempts)

    def attempt(self) -> float:
        """A new connection is about to be made: the seconds it must wait first (0 unless in a storm)."""
        now = self._clock()
        if self._ready_at is not None and now - self._ready_at >= self.stable_seconds:
            self._attempts.clear()
        self._ready_at = None
        while self._attempts and now - self._attempts[0] >= self.window:
            self._attempts.popleft()
        if not self._attempts:
            self.backoff.reset()
        self._attempts.append(now)
        if self.backoff.waits == 0 and len(self._attempts) <= self.limit:
            return 0.0
        return self.backoff.next()

    def connected(self) -> None:
        """The connection got READY (or RESUMED); if it stays up long enough, the next attempt starts over."""
        self._ready_at = self._clock()


def _is_heartbeat_ack(frame: object) -> bool:
    """Whether a raw gateway frame (as discord.py's `socket_raw_receive` hands it over) is a heartbeat ACK."""
    if not isinstance(frame, str) or len(frame) > MAX_ACK_FRAME:
        return False
    try:
        parsed = json.loads(frame)
    except ValueError:
        return False
    return isinstance(parsed, dict) and parsed.get("op") == HEARTBEAT_ACK


# --- one connection's watchdog ---------------------------------------------------------------------------------


class LinkOwner(Protocol):
    """What a Link reads of its adapter (DiscordAdapter): the account, its settings and timing, its health."""

    account: str
    settings: DiscordAccount
    timing: Timing
    health: ChannelHealth
    stall_seconds: float


class Link:
    """One gateway connection's watchdog state (the adapter's own client's, or one shard listener's): its storm gate,
    when it last heard a frame and a heartbeat ACK, whether it was connected before (READY again then counts as a
    reconnect), and `stopping`, which cuts a storm's wait short. Connection events land in the account's `health`."""

    def __init__(self, adapter: LinkOwner, shard_id: int | None = None) -> None:
        self.adapter = adapter
        self.shard_id = shard_id  # None: the account is not sharded
        settings, timing = adapter.settings, adapter.timing
        backoff = Backoff(BACKOFF_FIRST, BACKOFF_CAP, draw=timing.draw)
        self.gate = ReconnectGate(
            settings.storm_reconnects, settings.storm_minutes * 60, clock=timing.clock, backoff=backoff
        )
        self.last_heard = time.perf_counter()  # discord.py's watchdog keeps time on the same clock
        self.last_ack = self.last_heard
        self.connected_before = False
        self.stopping = asyncio.Event()
        self.ready = asyncio.Event()  # READY on this link's client
        self.client: discord.Client | None = None  # a shard listener's own client (channels.discord.client.Client)
        self.task: asyncio.Task[None] | None = None

    def heard(self, frame: object) -> None:
        """The gateway sent a frame: an event, a heartbeat ACK, a HELLO."""
        self.last_heard = time.perf_counter()
        if _is_heartbeat_ack(frame):
            self.last_ack = self.last_heard
        self.adapter.health.heard()

    def unacknowledged(self) -> float:
        """Seconds since the gateway last acknowledged a heartbeat (or since this connection began)."""
        return time.perf_counter() - self.last_ack

    def zombie(self, silence: float) -> None:
        """The connection still delivers events but acknowledged no heartbeat for `silence` seconds: a zombie, which
        Discord says to leave and resume; discord.py's own watchdog only notices a connection that is silent."""
        self.adapter.health.set(
            "stalled",
            f"no heartbeat ACK from the gateway for {silence:.1f}s though events still arrive; "
            "leaving the connection and resuming the session",
        )

    def connected(self) -> None:
        """READY or RESUMED: the account is connected (again)."""
        if self.connected_before:
            self.adapter.health.reconnected()
        self.connected_before = True
        self.gate.connected()
        self.adapter.health.set("connected")

    def disconnected(self) -> None:
        """A gateway connection ended (a new one follows unless stopping). After `stall_seconds` of silence, it was
        discord.py's watchdog that closed it: the account stalled."""
        adapter = self.adapter
        silence = time.perf_counter() - self.last_heard
        if self.stopping.is_set() or silence < adapter.stall_seconds:
            log.debug("discord %s: gateway disconnected", adapter.account)
            return
        adapter.health.set("stalled", f"no heartbeat ACK or event from the gateway for {silence:.0f}s; reconnecting")

    async def before_connect(self) -> bool:
        """Every new gateway connection passes here first: in a reconnect storm it waits its turn, the account
        degraded. False when the adapter is stopping: no connection then."""
        adapter = self.adapter
        delay = self.gate.attempt()
        if delay > 0:
            minutes = adapter.settings.storm_minutes
            adapter.health.set(
                "degraded",
                f"{self.gate.recent} gateway connections within {minutes:g} min (reconnect storm); "
                f"the next in {delay:.1f}s",
            )
            log.debug("discord %s: reconnect storm, waiting %.1fs", adapter.account, delay)
            await pause(adapter.timing.sleep, delay, self.stopping)
        if self.stopping.is_set():
            return False
        # A new connection's silence counts from its start, as discord.py's does.
        self.last_heard = self.last_ack = time.perf_counter()
        return True


# --- the connection's health -----------------------------------------------------------------------------------


def stall_seconds(account: str, settings: DiscordAccount) -> float:
    """`stall_seconds`, but never below Discord's heartbeat interval on the real gateway (a configured gateway
    sets its own interval: a test server's may be short)."""
    if settings.gateway_url or settings.stall_seconds >= MIN_STALL_SECONDS:
        return settings.stall_seconds
    log.warning(
        "discord %s: stall_seconds %g is shorter than Discord's heartbeat interval; %g is used",
        account,
        settings.stall_seconds,
        MIN_STALL_SECONDS,
    )
    return MIN_STALL_SECONDS
