"""The gateway: one process's intake, lanes, turns and delivery put together, started and stopped in order."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

from agent.lanes import Lanes, RunControl
from bot.approvals.gate import Approvals
from bot.config.checks import bot_folders, own_files
from bot.config.loading import validate_config
from bot.config.settings import Config
from bot.delivery.outbox import Delivery
from bot.delivery.recovery import drop_stale
from bot.gateway.adapters import build_adapters
from bot.gateway.channel_start import ChannelStarter
from bot.gateway.notices import ChannelNotices
from bot.gateway.reload import ConfigWatch, changed_accounts, needs_restart, validated
from bot.gateway.retention import keep_pruning
from bot.gateway.state import transcripts_for
from bot.gateway.status import ChannelBoard, StatusWriter
from bot.intake.entry import Intake
from bot.intake.session_commands import restore_queue_mode, restore_queue_modes
from bot.observe.metrics import Metrics, Readings, counted_hooks
from bot.runs.conversation import Conversations
from bot.scheduled.cron_book import CronBook
from bot.scheduled.cron_turns import CronTurns
from bot.scheduled.heartbeats import heartbeats
from bot.scheduled.scheduler import Scheduler
from bot.scheduled.session_book import StoredSessions
from bot.scheduled.subagents import Subagents
from bot.store import ApprovalRecord, InboundRecord, Store
from bot.store.base import fenced
from bot.turns.turn import Job, Turns, fold
from channels.base import ActionEvent, ChannelAdapter, ElectedIngress, InboundMessage
from channels.http_api import ApiChannel
from channels.web import WebChannel
from tools.exec import ProcessTable
from tools.registry import ToolRegistry, ToolSetup

if TYPE_CHECKING:
    from agent.runner import Runner
    from bot.gateway.admin import AdminServer
    from bot.gateway.cluster import Cluster
    from bot.gateway.web.server import WebServer
    from bot.plugins import Plugins
    from bot.runs.decisions import Decisions
    from tools.hooks import Hooks

log = logging.getLogger(__name__)

_Account = TypeVar("_Account", WebChannel, ApiChannel)


class Assembly(Protocol):
    """What a gateway takes from what assembled it (bot.app.App): the live decisions, the clock, the state folder,
    the plugins, the runner, the hooks and the tools."""

    decisions: Decisions
    clock: Callable[[], float]
    state_dir: Path
    plugins: Plugins
    runner: Runner
    hooks: Hooks

    def registry(self, setup: ToolSetup | None = None) -> ToolRegistry: ...


class Gateway:
    """Serves `adapters` for `app` until `stop()`; one instance per process. `registry` replaces the app's tools
    (tests)."""

    def __init__(
        self, app: Assembly, store: Store, adapters: Sequence[ChannelAdapter], *, registry: ToolRegistry | None = None
    ) -> None:
        self.decisions, self.clock, self.plugins, self.state_dir = app.decisions, app.clock, app.plugins, app.state_dir
        config = app.decisions.config
        self.store = store
        self.adapters = {(adapter.channel, adapter.account): adapter for adapter in adapters}
        self.metrics = Metrics()  # one for the process: what /metrics shows
        self.admin: AdminServer | None = None  # the admin listener, when `admin.listen` is set
        self.web: WebServer | None = None  # the Control UI and WebChat, when `web.listen` is not off
        self.processes = ProcessTable(hide=bot_folders(config, app.state_dir))
        # Built first, so that every part is given what it uses; what calls back into parts built after it goes
        # through this gateway's methods and attributes, read when called.
        self.lanes: Lanes[Job] = Lanes(
            self._handle,
            fold=fold,
            notify=lambda key, job, text: self.intake.notice(key, job, text),
            max_concurrent=config.defaults.max_concurrent,
            per_sender=config.lanes.per_sender,
            principal=lambda job: job.principal,
            settings=config.session.queue,
            on_idle=self._lane_idle,
        )
        # Several processes on one PostgreSQL database (bot.gateway.cluster); None: this process serves alone.
        self.cluster: Cluster | None = self._cluster() if config.state.backend == "postgres" else None
        cluster = self.cluster
        self.delivery = Delivery(store, self.adapters, app.clock, self.metrics, chat_locks=cluster)
        self.approvals = Approvals(
            app.decisions, store, self.delivery, clock=app.clock, own_files=own_files(config, app.state_dir),
            metrics=self.metrics, announce=cluster.announce_approval if cluster is not None else None,
        )  # fmt: skip
        self.jobs = CronBook(store, app.decisions, app.clock)
        self.sessions = StoredSessions(store, app.decisions, transcripts_for(config, store, app.state_dir), app.clock)
        self.channels = ChannelBoard(self.adapters, app.clock)  # each account's health: status.json, /status, notices
        self.subagents = Subagents(
            app.decisions, store, self.delivery, self.lanes,
            lambda record, message: self.intake.accept(record, message), relay=cluster,
        )  # fmt: skip
        self.intake = Intake(
            app.decisions, store, self.delivery, self.lanes, self.approvals, app.clock, metrics=self.metrics,
            health=self.channels.snapshots, subagents=self.subagents,
            offer=cluster.offer if cluster is not None else None,
        )  # fmt: skip
        self.starter = ChannelStarter(  # each account started, and one that cannot start tried again (with backoff)
            self.intake.on_message, self.intake.on_action, started=self.channels.started,
            current=lambda adapter: self.adapters.get((adapter.channel, adapter.account)) is adapter,
        )  # fmt: skip
        self.status = StatusWriter(
            app.state_dir, app.clock, app.decisions, store, self.lanes, self.channels.snapshots, lambda: self.cluster,
            watch=lambda: self.watch,
        )  # fmt: skip
        self.notices = ChannelNotices(app.decisions, self.delivery, self.channels.snapshots, app.clock)
        setup = ToolSetup(
            self.delivery, self.approvals.authorize, self.processes, jobs=self.jobs, sessions=self.sessions,
            subagents=self.subagents, sent=self.delivery.sent,
        )  # fmt: skip
        registry = registry or app.registry(setup)
        hooks = counted_hooks(app.hooks, self.metrics)
        self.conversations = Conversations(
            app.decisions, store, app.state_dir, self.sessions.transcripts, app.runner, registry, hooks, self.metrics
        )
        self.turns = Turns(
            app.decisions, self.conversations, self.delivery, store, lambda: self.lanes.closed, self.subagents
        )
        self.scheduler = Scheduler(
            store,
            config.cron.jobs,
            CronTurns(app.decisions, self.delivery, self.intake),
            catch_up=config.cron.catch_up,
            clock=app.clock,
            heartbeats=heartbeats(config),
        )
        self._scheduler_task: asyncio.Task[None] | None = None
        self.watch: ConfigWatch | None = None  # bindings.yaml looked at for changes (when loaded from a file)
        self._watch_task: asyncio.Task[None] | None = None
        self._prune_task: asyncio.Task[None] | None = None
        self._pairing_task: asyncio.Task[None] | None = None
        self._held_task: asyncio.Task[int] | None = None

    @property
    def config(self) -> Config:
        """The config of the moment: the live decisions' (a live reload replaces it)."""
        return self.decisions.config

    def _cluster(self) -> Cluster:
        """This process as one of several: messages are offered to the process holding their session, chats are sent
        by one process at a time, approvals decided anywhere reach the run waiting for them."""
        from bot.gateway.cluster import Cluster  # psycopg, only for a database that other processes share
        from bot.store.postgres.database import PgDatabase

        db = getattr(self.store, "db", None)
        assert isinstance(db, PgDatabase)
        return Cluster(
            db, self.lanes, self._take, capacity=self.config.defaults.max_concurrent,
            adapters=lambda: self.adapters, on_approval=lambda approval: self.approvals.wake(approval),
            on_answer=lambda answer: self.subagents.answer_arrived(answer),
            adopt=lambda lane: restore_queue_mode(self.store, self.lanes, lane),
            route=lambda record: self.intake.lane_of(InboundMessage.model_validate(record.payload)),
        )  # fmt: skip

    def _lane_idle(self, key: str) -> None:
        """A lane has emptied: a cluster gives it back (to whichever process its next message finds)."""
        if self.cluster is not None:
            self.cluster.lane_idle(key)

    async def _handle(self, key: str, jobs: list[Job], control: RunControl[Job]) -> None:
        """A lane's turn; in a cluster under the session's fence, so that it writes nothing once taken over."""
        with fenced(self.cluster.fence(key)) if self.cluster is not None else contextlib.nullcontext():
            await self.turns.handle(key, jobs, control)

    async def _take(self, record: InboundRecord, taken_over: bool) -> None:
        """Run a journaled message this process claimed in a cluster; one of a lane just taken over may be a
        leftover of a process that died: too old to run, already answered, or half streamed (as at a restart)."""
        now, max_age = self.clock(), self.config.recovery.max_age
        if taken_over and record.received < now - max_age:
            await drop_stale(
                self.store, self.delivery, [record], max_age=max_age, now=now, end_child=self.subagents.end_stale
            )
            return
        if taken_over and record.status == "running":  # a turn of a previous holder began with it
            if await self.store.inbound_has_replies(record.id):
                await self.delivery.close([record.id])  # answered; the outbox finishes the delivery
                return
            await self.turns.adopt_previews([record])
        try:
            await self.intake.take(record, InboundMessage.model_validate(record.payload))
        except Exception:  # as intake does for a message it takes itself: one bad message must not come back forever
            log.exception("message %s could not be handled", record.message_id)
            await self.store.mark_inbound(record.id, "failed", "internal error")

    async def on_message(self, message: InboundMessage) -> None:
        """What adapters call with a message (intake: journal first)."""
        await self.intake.on_message(message)

    async def on_action(self, event: ActionEvent) -> str | None:
        """What adapters call with a button click."""
        return await self.intake.on_action(event)

    async def start(self) -> None:
        """Start every adapter, then redo what a previous process left unfinished."""
        if self.config.admin.listen is not None:  # first: a taken port fails the start before any channel runs
            from bot.gateway.admin import AdminServer  # aiohttp, only when asked for

            self.admin = AdminServer(self.config.admin.listen, self.metrics, lambda: read_gateway(self))
            await self.admin.start()
        await self._start_web()
        leftovers: list[InboundRecord] = []
        orphans: list[ApprovalRecord] = []
        if self.cluster is None:
            # Taken before any adapter runs: what arrives from now on is this process's own work, not a leftover
            # (re-running it too would answer it twice). In a cluster the leftovers of a process that died come with
            # the sessions taken over from it, and pending approvals may be other live processes' own.
            leftovers = await drop_stale(
                self.store, self.delivery, await self.store.unfinished_inbound(), max_age=self.config.recovery.max_age,
                now=self.clock(), end_child=self.subagents.end_stale,
            )  # fmt: skip
            orphans = await self.store.pending_approvals()
            await self.turns.keep_previews(leftovers)
        await restore_queue_modes(self.store, self.lanes)  # each session's /queue mode, before any message
        self.intake.accepting = True
        self.delivery.start()
        self._prune_task = asyncio.create_task(keep_pruning(self.store, self.config.state.retention_days), name="prune")
        self._pairing_task = asyncio.create_task(self.intake.pairing.run(), name="pairing watch")
        for adapter in list(self.adapters.values()):
            await self._start_adapter(adapter)
        # A request whose turn runs again stays pending: the turn meets it again and waits for its card's answer.
        rerun = {str(record.id) for record in leftovers}
        held = [record for record in orphans if record.turn in rerun]
        expired = await self.approvals.expire_orphans([record for record in orphans if record.turn not in rerun])
        if expired:
            log.info("expired %d approval request(s) left pending by the last run", expired)
        if held:
            self._held_task = asyncio.create_task(self.approvals.expire_when_due(held), name="held approvals")
        await self._recover(leftovers)
        if self.cluster is not None:
            await self.cluster.start()
        self._scheduler_task = asyncio.create_task(self.scheduler.run(), name="scheduler")
        if self.config.file is not None:
            state, plugins = self.state_dir, self.plugins
            self.watch = ConfigWatch(
                self.config.file, self.reload, load=lambda path: validated(path, state, plugins), clock=self.clock
            )
            self._watch_task = asyncio.create_task(self.watch.run(), name="config watch")
        await self.status.start()
        self.notices.start()

    async def _start_web(self) -> None:
        """The web side, when `web.listen` is not off and the gateway serves WebChat accounts. A port taken by something
        else fails the start when `web.listen` is written in the config; the default is only warned about (a second
        bot on one machine still starts, without pages)."""
        settings = self.config.web
        if settings.listen is None or not self._accounts_of(WebChannel):
            return
        from bot.gateway.web.pages import WebParts  # aiohttp.web and the pages, only when served
        from bot.gateway.web.server import WebServer

        parts = WebParts(
            self.decisions, self.store, functools.partial(self._accounts_of, WebChannel), self.approvals, self.jobs,
            self.sessions.transcripts, self.channels.snapshots, self._validate,
            functools.partial(self._accounts_of, ApiChannel),
            self.intake.accept_scheduled, self._serves,
        )  # fmt: skip
        server = WebServer(settings, self.state_dir, parts)
        try:
            await server.start()
        except OSError as error:
            if "listen" in settings.model_fields_set:
                raise
            log.warning("web: cannot listen on %s (%s); serving without the web pages", settings.listen, error)
            return
        self.web = server
        log.info("web: the Control UI and WebChat are at %s (`bot web url` prints the login link)", server.url)

    def _serves(self, channel: str, account: str) -> bool:
        return self.delivery.adapter_for(channel, account) is not None

    def _accounts_of(self, kind: type[_Account]) -> dict[str, _Account]:
        """The accounts served by adapters of `kind` (WebChat's, the API's), by account: each an agent's id."""
        return {account: adapter for (_, account), adapter in self.adapters.items() if isinstance(adapter, kind)}

    async def _validate(self) -> list[str]:
        """The config file's problems as `bot config check` would find them now (none: valid, or no file)."""
        path = self.config.file
        if path is None:
            return []
        _, errors, warnings = await asyncio.to_thread(
            validate_config, path, plugins=self.plugins, state_dir=self.state_dir, env_file=False
        )
        return [issue.render(str(path)) for issue in [*errors, *warnings]]

    async def _recover(self, leftovers: list[InboundRecord]) -> None:
        for record in leftovers:
            if await self.store.inbound_has_replies(record.id):
                self.turns.unfinished_previews.pop(record.id, None)
                await self.delivery.close([record.id])  # answered; the outbox finishes the delivery
                continue
            log.info("re-running message %s from %s left unfinished by the last run", record.message_id, record.channel)
            await self.intake.accept(record, InboundMessage.model_validate(record.payload))
        self.delivery.wake()

    async def reload(self, config: Config) -> None:
        """Serve by `config` from the next message on (a live reload): routing, agents, tool policy, owners, approvals,
        queue settings and schedules at once; a channel account whose settings changed is restarted alone."""
        old = self.config
        for name in needs_restart(old, config):
            log.warning("%s changed in %s: it takes effect at the next start", name, config.file or "the config")
        stop, start = changed_accounts(old, config)
        self.decisions.use(config)  # every part reads the config of the moment from it
        self.lanes.configure(
            config.session.queue, max_concurrent=config.defaults.max_concurrent, per_sender=config.lanes.per_sender
        )
        self.scheduler.configure(config.cron.jobs, heartbeats(config), config.cron.catch_up)
        if self.cluster is not None:
            self.cluster.resize(config.defaults.max_concurrent)
        for key in sorted(stop & self.adapters.keys()):
            adapter = self.adapters.pop(key)
            with contextlib.suppress(Exception):
                await adapter.stop()
            log.info("channel %s account %s stopped (its settings changed)", *key)
        built, skipped = build_adapters(config, self.plugins, only=start)
        for line in skipped:
            log.warning("%s", line)
        for adapter in built:
            self.adapters[(adapter.channel, adapter.account)] = adapter
            await self._start_adapter(adapter)
        self.delivery.wake()  # replies held for a restarted account go out on its new adapter

    async def _start_adapter(self, adapter: ChannelAdapter) -> None:
        """Start `adapter`; one that cannot start is `degraded` and tried again in the background, with backoff. In
        a cluster, a listener only one process may run waits until this process wins it."""
        if self.cluster is not None and isinstance(adapter, ElectedIngress):
            adapter.ingress_deferred = True
        await self.starter.start(adapter)

    async def idle(self) -> bool:
        """Nothing running, nothing queued, nothing left to send."""
        if self.lanes.lane_count() or await self.store.unfinished_inbound():
            return False
        unsent, _ = await self.store.outbox_backlog()  # counted, not read
        return unsent == 0

    async def stop(self, grace_seconds: float) -> None:
        """Stop accepting, let runs finish within the grace period (then cancel them), flush, stop adapters.

        Adapters stop last: the runs that finish during the grace period still need them to deliver.
        """
        self.intake.accepting = False
        if self.web is not None:
            await self.web.stop()  # no more pages: their streams end, nothing more is said through them
        if self.cluster is not None:
            await self.cluster.stop()  # no more claims, and the elected listeners closed: another process takes them
        await self.notices.stop()
        for task in (self._watch_task, self._scheduler_task, self._prune_task, self._held_task, self._pairing_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        await self.lanes.close(grace_seconds)
        self.subagents.forget_waiters()
        await self.delivery.stop()
        await self.processes.close()  # background commands do not outlive the bot
        await self.starter.stop()  # no account starts while the others stop
        for adapter in self.adapters.values():
            with contextlib.suppress(Exception):
                await adapter.stop()
        await self.conversations.runner.aclose()
        if self.cluster is not None:
            await self.cluster.leave()  # its sessions' locks go last: the runs finished within the grace wrote first
        if self.admin is not None:
            await self.admin.stop()
        await self.status.stop()  # a clean stop leaves no status file behind


async def read_gateway(gateway: Gateway) -> Readings:
    """The gauges' readings of a running gateway."""
    queued = gateway.lanes.pending_items()
    return Readings(
        outbox_backlog=(await gateway.store.outbox_backlog())[0],
        running_turns=gateway.lanes.running_count(),
        queued_items=sum(len(items) for items in queued.values()),
        channels={(health.channel, health.account): health.state for health in gateway.channels.snapshots()},
    )
