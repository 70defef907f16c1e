"""The gateway's status: each channel account's health, running turns, queues, approvals, the outbox, today's usage
and whether the config file on disk was refused (the last good config running), written to `<state_dir>/status.json`
every few seconds for `bot status`, removed at a clean stop. A process of a cluster (several processes on one
PostgreSQL database) also publishes it, with what it holds, in the database's `processes` table, where `bot status`
sees every process."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict

from agent.cancellation import cancel_and_wait
from channels.base import ChannelAdapter
from channels.health import UNHEALTHY, ChannelHealth, HealthSnapshot

if TYPE_CHECKING:
    from agent.lanes import Lanes
    from bot.config.errors import ConfigError
    from bot.runs.decisions import Decisions
    from bot.store import Store

__all__ = [
    "STATUS_FILE",
    "STATUS_INTERVAL",
    "ChannelBoard",
    "ClusterMember",
    "ConfigState",
    "OutboxBacklog",
    "QueueDepth",
    "StatusReport",
    "StatusWriter",
    "UsageToday",
    "WatchedConfig",
    "config_state",
    "overall",
    "read_report",
    "stale_after",
]

log = logging.getLogger(__name__)

STATUS_FILE = "status.json"
STATUS_INTERVAL = 2.0  # seconds between two writes of the file
STALE_WRITES = 3  # a file not rewritten for this many intervals belongs to a process that hangs or is gone
SHOWN_ERRORS = 5  # of a refused config file's errors, the first ones the status keeps

Health = Literal["healthy", "unhealthy"]


class QueueDepth(BaseModel):
    """Messages waiting for a session's next turn."""

    model_config = ConfigDict(frozen=True)

    session_key: str
    depth: int


class OutboxBacklog(BaseModel):
    """What the bot recorded to say and has not sent yet, and how long the oldest of it has waited (seconds)."""

    model_config = ConfigDict(frozen=True)

    unsent: int = 0
    oldest_age: float | None = None


class UsageToday(BaseModel):
    """The runs' tokens since the start of today (in the default agent's time zone)."""

    model_config = ConfigDict(frozen=True)

    since: float
    runs: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


class ConfigState(BaseModel):
    """The config file the gateway watches: when the config in use was read (at the start, or by the last reload that
    applied), and, when the file on disk was refused since, when and why (its errors as `bot config check` prints
    them, the first few, and how many there are)."""

    model_config = ConfigDict(frozen=True)

    file: str
    loaded_at: float
    refused_at: float | None = None
    errors: list[str] = []
    error_count: int = 0


class WatchedConfig(Protocol):
    """What the status reads of the gateway's config watch (bot.gateway.reload.ConfigWatch)."""

    path: Path
    loaded_at: float
    refused: ConfigError | None
    refused_at: float | None


def config_state(watch: WatchedConfig | None) -> ConfigState | None:
    """The watch's view as the status file holds it (None: no file is watched, e.g. a config built in code)."""
    if watch is None:
        return None
    refused = watch.refused
    if refused is None or watch.refused_at is None:
        return ConfigState(file=str(watch.path), loaded_at=watch.loaded_at)
    errors = [issue.render(str(watch.path)) for issue in refused.issues]
    return ConfigState(
        file=str(watch.path), loaded_at=watch.loaded_at, refused_at=watch.refused_at,
        errors=errors[:SHOWN_ERRORS], error_count=len(errors),
    )  # fmt: skip


class StatusReport(BaseModel):
    """One gateway process at one moment, as `status.json` holds it (times in seconds since the epoch)."""

    model_config = ConfigDict(frozen=True)

    pid: int
    started_at: float
    written_at: float
    interval: float = STATUS_INTERVAL  # how often the file is rewritten: `bot status` judges its age by it
    health: Health
    channels: list[HealthSnapshot]
    running_turns: int = 0
    queues: list[QueueDepth] = []
    pending_approvals: int = 0
    outbox: OutboxBacklog = OutboxBacklog()
    usage_today: UsageToday
    config: ConfigState | None = None  # None: no config file watched (or a status written before this was kept)


def overall(channels: Sequence[HealthSnapshot], config: ConfigState | None = None) -> Health:
    """`unhealthy` when any channel account is degraded or stalled, or the config file on disk was refused (the
    last good config running)."""
    down = any(channel.state in UNHEALTHY for channel in channels)
    return "unhealthy" if down or (config is not None and config.refused_at is not None) else "healthy"


def stale_after(report: StatusReport) -> float:
    """How old the file may be before its process is taken for gone or hung."""
    return STALE_WRITES * report.interval


def read_report(state_dir: Path) -> StatusReport | None:
    """The status file in `state_dir`, or None when there is none (or it cannot be read)."""
    try:
        return StatusReport.model_validate_json((state_dir / STATUS_FILE).read_bytes())
    except (OSError, ValueError):
        return None


class ChannelBoard:
    """Every channel account's health as the gateway sees it: an adapter's own `health` when it keeps one, else
    `connected` from the moment it started (`stopped` before, or when it failed to start)."""

    def __init__(self, adapters: Mapping[tuple[str, str], ChannelAdapter], clock: Callable[[], float]) -> None:
        self._adapters = adapters
        self._clock = clock
        self._started: dict[tuple[str, str], float] = {}
        self._since = clock()

    def started(self, adapter: ChannelAdapter) -> None:
        """The gateway started `adapter`."""
        self._started[(adapter.channel, adapter.account)] = self._clock()

    def snapshots(self) -> list[HealthSnapshot]:
        found = []
        for key, adapter in self._adapters.items():
            health = getattr(adapter, "health", None)
            if isinstance(health, ChannelHealth):
                found.append(health.snapshot())
                continue
            since = self._started.get(key)
            state: Literal["connected", "stopped"] = "connected" if since is not None else "stopped"
            found.append(HealthSnapshot(channel=key[0], account=key[1], state=state, since=since or self._since))
        return found


class ClusterMember(Protocol):
    """What the status needs of `gateway.cluster` (None unless several processes share a PostgreSQL database): this
    process run's id among them, when it started, and what it holds now (e.g. `{"sessions": [...], "ingress":
    [...]}`: the sessions it runs, the listeners it won)."""

    member_id: str
    started: float

    def holdings(self) -> dict[str, list[str]]: ...


class StatusWriter:
    """Keeps `<state_dir>/status.json` up to date for a gateway: once at `start()`, then every `interval` seconds;
    `stop()` removes it (a file left behind belongs to a process that did not stop cleanly). In a cluster each write
    also publishes the status, with what the process holds, as its row in the database's `processes` table (rows
    long gone are pruned at `start()`); `stop()` removes the row. A failed publish is logged, never fatal."""

    def __init__(
        self,
        state_dir: Path,
        clock: Callable[[], float],
        decisions: Decisions,
        store: Store,
        lanes: Lanes[Any],
        channels: Callable[[], list[HealthSnapshot]],
        cluster: Callable[[], ClusterMember | None] = lambda: None,
        *,
        interval: float = STATUS_INTERVAL,
        watch: Callable[[], WatchedConfig | None] = lambda: None,
    ) -> None:
        self.decisions = decisions  # the config at each write: a live reload replaces it
        self.store = store
        self.lanes = lanes
        self.channels = channels
        self.cluster = cluster  # the gateway joins its cluster (if any) at start
        self.watch = watch  # the config file's watch (made at start): whether the file on disk was refused
        self.clock = clock
        self.interval = interval
        self.path = state_dir / STATUS_FILE
        self._started_at = clock()
        self._task: asyncio.Task[None] | None = None
        self._failing = False
        self._publish_failing = False

    async def report(self) -> StatusReport:
        """The status now."""
        from bot.intake.session_commands import start_of_day

        config, store, lanes, now = self.decisions.config, self.store, self.lanes, self.clock()
        channels, watched = self.channels(), config_state(self.watch())
        unsent, oldest = await store.outbox_backlog()
        today = start_of_day(now, config.timezone_for(config.default_agent))
        models = await store.usage_by_model(today)
        return StatusReport(
            pid=os.getpid(),
            started_at=self._started_at,
            written_at=now,
            interval=self.interval,
            health=overall(channels, watched),
            channels=channels,
            running_turns=lanes.running_count(),
            queues=[QueueDepth(session_key=key, depth=lanes.depth(key)) for key in sorted(lanes.pending_items())],
            pending_approvals=len(await store.pending_approvals()),
            outbox=OutboxBacklog(unsent=unsent, oldest_age=max(0.0, now - oldest) if oldest is not None else None),
            usage_today=UsageToday(
                since=today,
                runs=sum(model.runs for model in models),
                input_tokens=sum(model.input_tokens for model in models),
                output_tokens=sum(model.output_tokens for model in models),
                cache_read_tokens=sum(model.cache_read_tokens for model in models),
                cache_write_tokens=sum(model.cache_write_tokens for model in models),
            ),
            config=watched,
        )

    async def write(self) -> None:
        """Write the status now: to a temporary file, then renamed over the old one, so a reader never sees half."""
        report = None
        try:
            report = await self.report()
            # Written in the loop's thread (a few kilobytes): a write still going on in another thread could put the
            # file back after `stop()` removed it.
            self._replace(report.model_dump_json(indent=2))
        except Exception:
            if not self._failing:  # one line per spell of failures, not one every interval
                log.exception("could not write %s", self.path)
            self._failing = True
        else:
            self._failing = False
        if report is not None:
            await self.publish(report)

    def _cluster(self) -> tuple[ClusterMember, Any] | None:
        """This process's cluster membership and the database it publishes to; None outside a cluster."""
        cluster = self.cluster()
        if cluster is None:
            return None
        return cluster, getattr(self.store, "db", None)

    async def publish(self, report: StatusReport) -> None:
        """In a cluster: `report`, with what this process holds, as its row of `processes` (nothing otherwise)."""
        member = self._cluster()
        if member is None:
            return
        from bot.store.postgres.processes import publish_process

        cluster, db = member
        try:
            if db is None:
                raise TypeError("the store has no PostgreSQL database to publish to")
            status = {**report.model_dump(mode="json"), "holds": cluster.holdings()}
            await publish_process(db, cluster.member_id, socket.gethostname(), os.getpid(), cluster.started, status)
        except Exception:
            if not self._publish_failing:  # one line per spell of failures, as for the file
                log.exception("could not publish this process's status to the database")
            self._publish_failing = True
        else:
            if self._publish_failing:
                log.info("this process's status is published to the database again")
            self._publish_failing = False

    def _replace(self, data: str) -> None:
        temporary = self.path.with_name(f".{STATUS_FILE}.{os.getpid()}.tmp")
        temporary.write_text(data, encoding="utf-8")
        os.replace(temporary, self.path)

    async def start(self) -> None:
        """Write the file once, then keep it fresh."""
        await self.write()
        await self._prune()
        self._task = asyncio.create_task(self._keep_writing(), name="status")

    async def _prune(self) -> None:
        """In a cluster: remove the rows of processes gone for long (a killed process cannot remove its own)."""
        member = self._cluster()
        if member is None or member[1] is None:
            return
        from bot.store.postgres.processes import prune_processes

        try:
            await prune_processes(member[1])
        except Exception:
            log.warning("could not prune old rows of the processes table", exc_info=True)

    async def _keep_writing(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await self.write()

    async def stop(self) -> None:
        """Stop writing and remove the file (and, in a cluster, this process's row)."""
        await cancel_and_wait(self._task)
        self._task = None
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        member = self._cluster()
        if member is None or member[1] is None:
            return
        from bot.store.postgres.processes import remove_process

        cluster, db = member
        try:
            await remove_process(db, cluster.member_id)
        except Exception:
            log.warning("could not remove this process's row from the processes table", exc_info=True)
