"""Subagents and messages between sessions: a child session started in the background (`sessions_spawn`), its end
announced to its parent through the journal, and one session's message to another (`sessions_send`), whose answer
goes back to the sender once: as the tool's result while it waits (recorded, so that its turn run again after a
restart finds it), else as a message into its session."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from bot.config.owners_file import owner_key
from bot.intake.entry import journal_entry_of
from bot.runs.assemble import SetupError, session_models
from bot.runs.principal import lesser, session_principal
from bot.store import InboundRecord, Store, SubagentRecord, SubagentStatus
from bot.store.journal import JournalEntry
from channels.base import ChatTarget, InboundMessage, Principal, Scheduled
from tools.base import RunInfo
from tools.untrusted import wrap_untrusted

if TYPE_CHECKING:
    from agent.lanes import Lanes
    from bot.config.settings import Config
    from bot.delivery.outbox import Delivery
    from bot.runs.decisions import Decisions
    from bot.turns.turn import Job

__all__ = ["AnswerRelay", "Subagents", "child_key"]

log = logging.getLogger(__name__)

MAX_RESULT_CHARS = 20_000  # of a child's answer, in its announcement (the whole answer stays in its transcript)
MAX_COUNTED_TURNS = 1000  # turns whose sessions_send calls are counted (for the ids a turn run again finds again)
ENDINGS: dict[SubagentStatus, str] = {
    "done": "finished",
    "failed": "failed",
    "timed_out": "ran out of time",
    "killed": "was stopped",
    "running": "is still running",
}


def child_key(agent: str, run_id: str) -> str:
    """The session of a child: `agent:<a>:subagent:<id>`."""
    return f"agent:{agent}:subagent:{run_id}"


def _message(target: ChatTarget, run: RunInfo, text: str, message_id: str, scheduled: Scheduled) -> InboundMessage:
    """A message the bot writes into a session, in `target`'s chat, acting for whoever `run` acted for."""
    return _written(target, run.principal, run.sender_name, text, message_id, scheduled)


def _written(
    target: ChatTarget, acting: Principal, name: str | None, text: str, message_id: str, scheduled: Scheduled
) -> InboundMessage:
    """A message the bot writes into a session, in `target`'s chat, as if `acting`'s person had sent it there: whom
    its turn acts for is read off its sender (bot.runs.principal), with an owner's powers only when `scheduled` says
    (its maker sets `owner` from `acting`)."""
    return InboundMessage(
        channel=target.channel,
        account=target.account,
        peer=target.peer,
        thread_id=target.thread_id,
        sender_id=(acting.person or "").partition(":")[2] or f"agent:{scheduled.agent}",
        sender_name=name,
        text=text,
        message_id=message_id,
        scheduled=scheduled,
    )


def _between(header: str, text: str, source: str) -> str:
    """A message between sessions: what it is, then another agent's words wrapped as data."""
    return f"[{header}]\n" + wrap_untrusted(text, source)


def task_text(record: SubagentRecord) -> str:
    """What a child is asked: its task, and that its answer goes back to the session that asked."""
    label = f" {record.label!r}" if record.label else ""
    return (
        f"[background task{label} (run {record.id}) from the session {record.origin['parent_key']}: do it and answer "
        "with the result; your answer is reported back to that session, not to a person]\n" + record.task
    )


def announcement_text(record: SubagentRecord) -> str:
    """What the parent is told when a child ends: how, and its answer wrapped as data (another agent's words)."""
    label = f" {record.label!r}" if record.label else ""
    result = (record.result or "").strip() or "(no answer)"
    if len(result) > MAX_RESULT_CHARS:
        result = result[:MAX_RESULT_CHARS] + f"\n[… cut at {MAX_RESULT_CHARS:,} characters]"
    return (
        f"[the background task{label} (run {record.id}, agent {record.agent}) {ENDINGS[record.status]}; tell the "
        "person what came of it, or answer NO_REPLY if there is nothing to tell]\n"
        + wrap_untrusted(result, f"subagent {record.id} ({record.agent})")
    )


# Intake's `accept`: a journaled turn run here, or offered to the process of a cluster that holds its lane.
Accept = Callable[[InboundRecord, InboundMessage], Awaitable[None]]


class AnswerRelay(Protocol):
    """How a sessions_send waits for a session that runs in another process of a cluster (gateway.cluster)."""

    async def busy(self, lane: str) -> bool:
        """Whether a turn of the session runs now, in any process."""
        ...

    async def hand(self, job: str, answer: str) -> bool:
        """Record the answer and tell the process whose send waits for it; False when one was recorded before
        (or None: that send has stopped waiting)."""
        ...

    async def read(self, job: str) -> str | None:
        """The answer handed over for `job`."""
        ...


class Subagents:
    """The gateway's children and messages between sessions (tools.subagents.Spawner), and what ends their turns."""

    def __init__(
        self,
        decisions: Decisions,
        store: Store,
        delivery: Delivery,
        lanes: Lanes[Job],
        accept: Accept,
        *,
        relay: AnswerRelay | None = None,
    ) -> None:
        """`accept` takes a journaled turn in (intake's: here, or to the process holding its lane); `relay` (a
        cluster's) carries answers between processes."""
        self.decisions = decisions
        self.store = store
        self.delivery = delivery
        self.lanes = lanes
        self.accept = accept
        self._waiting: dict[str, asyncio.Future[str]] = {}  # message id -> the sessions_send waiting for its answer
        self._sends: OrderedDict[str, int] = OrderedDict()  # turn -> the sessions_send calls it made so far
        self.relay = relay
        self._spawning = asyncio.Lock()

    @property
    def config(self) -> Config:
        return self.decisions.config  # read at each use: a live reload replaces it

    # --- sessions_spawn -----------------------------------------------------------------------------------------

    async def spawn(
        self,
        run: RunInfo,
        task: str,
        *,
        agent: str | None = None,
        label: str | None = None,
        model: str | None = None,
        timeout_seconds: float | None = None,
    ) -> dict[str, Any]:
        settings = self.config.subagents
        child_agent = self._spawnable(run, agent)
        if run.depth >= settings.max_depth:
            raise ValueError(f"a subagent {run.depth} level(s) down may not start another (subagents.max_depth)")
        if run.target is None:
            raise ValueError("a background task needs a chat to report to; this run has none")
        if not task.strip():
            raise ValueError("task is empty: say what the subagent should do")
        if model is not None:
            try:
                allowed = session_models(self.config, child_agent)
            except SetupError:
                allowed = []
            if model not in allowed:
                raise ValueError(
                    f"agent {child_agent} may not use {model!r}; its models: {', '.join(allowed) or 'none'}"
                )
        timeout = min(timeout_seconds or settings.timeout_seconds, settings.timeout_seconds)
        run_id = f"sa_{secrets.token_hex(4)}"
        key = child_key(child_agent, run_id)
        origin = {
            "parent_key": run.session_key,
            "parent_agent": run.agent,
            "target": run.target.model_dump(mode="json"),
            "owner": run.sender_is_owner,
            "person": run.person,
            "sender_id": run.sender_id,
            "sender_name": run.sender_name,
            "depth": run.depth,
            "hops": run.hops,
        }
        record = SubagentRecord(
            id=run_id, parent_key=run.session_key, child_key=key, agent=child_agent, label=label, task=task,
            status="running", origin=origin, created=0.0,
        )  # fmt: skip
        scheduled = Scheduled(
            kind="subagent", job=run_id, agent=child_agent, session_key=key, owner=run.sender_is_owner,
            depth=run.depth + 1, hops=run.hops, timeout_seconds=timeout,
        )  # fmt: skip
        message = _message(run.target, run, task_text(record), f"subagent:{run_id}", scheduled)
        # Its own session: steered messages reach its running turn, and the model asked for answers it.
        async with self._spawning:  # counted and recorded in one step: parallel calls cannot pass a cap together
            await self._room(run.session_key)
            await self.store.set_overrides(key, child_agent, queue="steer", model=model)
            self.lanes.set_mode(key, "steer")
            inbound = await self.store.start_subagent(
                run_id, run.session_key, key, child_agent, label, task, origin, journal_entry_of(message)
            )
        log.info("%s started subagent %s (%s) for: %s", run.session_key, run_id, child_agent, task[:80])
        await self.accept(inbound, message)
        return {
            "status": "started",
            "run_id": run_id,
            "session_key": key,
            "agent": child_agent,
            "timeout_seconds": timeout,
            "note": "It runs in the background; its result comes back to this conversation as a message when it ends.",
        }

    async def _room(self, parent_key: str) -> None:
        """ValueError when the parent, or the bot, has as many children running as it may."""
        settings = self.config.subagents
        running = await self.store.subagents(open_only=True)
        mine = [child for child in running if child.parent_key == parent_key]
        if len(mine) >= settings.max_concurrent:
            raise ValueError(
                f"this conversation has {len(mine)} background tasks running (subagents.max_concurrent "
                f"{settings.max_concurrent}); wait for one to end or stop one with subagents kill"
            )
        if len(running) >= settings.max_total:
            raise ValueError(f"the bot has {len(running)} background tasks running (subagents.max_total); try later")

    def _spawnable(self, run: RunInfo, agent: str | None) -> str:
        """The agent a child of `run` runs as: its own, or one `agents[].subagents.allow` names."""
        if agent is None or agent == run.agent:
            return run.agent
        known = [item.id for item in self.config.agents]
        if agent not in known:
            raise LookupError(f"no agent {agent!r}; agents are {', '.join(known)}")
        allowed = self.config.agent(run.agent).subagents.allow
        if agent not in allowed and "*" not in allowed:
            raise ValueError(f"agent {run.agent} may not start agent {agent} (agents[].subagents.allow)")
        return agent

    # --- the subagents tool and /subagents --------------------------------------------------------------------

    async def children(self, run: RunInfo) -> list[dict[str, Any]]:
        return [_shown(child) for child in await self.store.subagents(run.session_key)]

    async def kill(self, run: RunInfo, child: str) -> dict[str, Any]:
        record = await self._child(run.session_key, child)
        return await self.kill_child(record)

    async def kill_child(self, record: SubagentRecord) -> dict[str, Any]:
        """Stop a child: kept as killed (a restart does not run it again), its turn cancelled, and announced as
        killed when it has ended (at once when it was not running)."""
        killed = await self.store.kill_subagent(record.id)
        if killed is None:
            return {"status": "ended", "run_id": record.id, "note": f"it had already {ENDINGS[record.status]}"}
        busy = self.lanes.busy(record.child_key)
        queued = [i for job in self.lanes.pending_items().get(record.child_key, []) for i in job.inbound_ids]
        await self.lanes.stop(record.child_key)  # a queued task or steer is dropped; a running turn is cancelled
        if busy:  # the turn, cancelled, ends the child; the steers it will not read are closed here
            await self.delivery.close(queued, session_key=record.child_key)
        else:
            await self.end(killed, "killed", "", [*queued, *([record.inbound_id] if record.inbound_id else [])])
        log.info("subagent %s killed", record.id)
        return {"status": "killed", "run_id": record.id}

    async def steer(self, run: RunInfo, child: str, message: str) -> dict[str, Any]:
        record = await self._child(run.session_key, child)
        if record.ended is not None or record.status != "running":
            raise ValueError(f"subagent {record.id} has {ENDINGS[record.status]}; nothing to steer")
        target = ChatTarget.model_validate(record.origin["target"])
        scheduled = Scheduled(
            kind="steer", job=record.id, agent=record.agent, session_key=record.child_key,
            owner=run.sender_is_owner, depth=run.depth + 1, hops=run.hops,
        )  # fmt: skip
        text = f"[from the session that started you ({run.session_key})]\n{message}"
        steer = _message(target, run, text, f"steer:{record.id}:{secrets.token_hex(4)}", scheduled)
        await self._journal(steer)
        return {"status": "sent", "run_id": record.id, "note": "it reads this at its next step"}

    async def command(self, job: Job, args: str) -> str:
        """`/subagents`: this conversation's children; `/subagents kill ID` stops one (in groups, owners only)."""
        words = args.split()
        if not words or words[0].lower() == "list":
            return describe_children(await self.store.subagents(job.session_key))
        if words[0].lower() != "kill" or len(words) != 2:
            return "Usage: /subagents, or /subagents kill ID"
        if job.message.peer.kind != "direct" and not job.owner:
            return "In a group, only the bot's owners can stop background tasks."
        try:
            record = await self._child(job.session_key, words[1])
        except LookupError:
            return f"This conversation has no background task {words[1]!r}."
        done = await self.kill_child(record)
        return f"Stopped {record.id}." if done["status"] == "killed" else f"{record.id} {done['note']}."

    async def _child(self, parent_key: str, child: str) -> SubagentRecord:
        record = await self.store.subagent(child)
        if record is None or record.parent_key != parent_key:
            raise LookupError(f"this conversation has no subagent {child!r} (subagents list shows them)")
        return record

    # --- sessions_send ------------------------------------------------------------------------------------------

    async def send(self, run: RunInfo, session_key: str, message: str, *, wait_seconds: float) -> dict[str, Any]:
        exchange = self.config.agent_to_agent
        max_exchanges = exchange.max_exchanges
        if session_key == run.session_key:
            raise ValueError("that is this conversation; answer in it instead")
        session = await self.store.get_session(session_key)
        target = session_principal(session.people) if session is not None else None
        if session is None or not (run.sender_is_owner or (target is not None and target.key == run.principal.key)):
            # Someone who is not an owner reaches only sessions that are theirs alone; the rest are not there.
            raise LookupError(f"no session {session_key!r} (sessions_list shows them)")
        if not exchange.allows(run.agent, session.agent):
            raise ValueError(f"agent {run.agent} may not message agent {session.agent} (tools.agent_to_agent.allow)")
        if run.hops >= max_exchanges:
            raise ValueError(
                f"this exchange between agents has had {run.hops} messages (tools.agent_to_agent.max_exchanges "
                f"{max_exchanges}); stop here and answer"
            )
        where = session.last_target or (run.target.model_dump(mode="json") if run.target else None)
        if where is None:
            raise ValueError("neither session has a chat to run in")
        message_id = self._request_id(run)
        acting = lesser(run.principal, target)  # never more than the sender, nor than the people of the session
        scheduled = Scheduled(
            kind="agent", job=message_id, agent=session.agent, session_key=session_key, owner=acting.owner,
            hops=run.hops + 1, reply_session=run.session_key,
        )  # fmt: skip
        source = f"session {run.session_key} (agent {run.agent})"
        text = _between(f"message from the {source}; your answer goes back to it, NO_REPLY sends none", message, source)
        busy = self.lanes.busy(session_key) or (self.relay is not None and await self.relay.busy(session_key))
        awaited = wait_seconds > 0 and not busy  # a busy session may be waiting for this one: never wait on it
        name = run.sender_name if acting.key == run.principal.key else None
        scheduled = scheduled.model_copy(update={"awaited": awaited})
        request = _written(ChatTarget.model_validate(where), acting, name, text, message_id, scheduled)
        answerer = f"session {session_key} (agent {session.agent})"
        late = f"no answer within {wait_seconds:g} s; it comes back as a message"
        # Waiting from before it is journaled: its answer may come at once.
        waiter = self._waiting[message_id] = asyncio.get_running_loop().create_future()
        try:
            if not await self._journal(request):  # this turn sent it before a restart: its answer may be in already
                return _result(await self._answer_before(message_id, wait_seconds, waiter), answerer, late)
            if not awaited:
                await self.store.put_answer(message_id, None)  # for this turn run again: the answer comes as a message
                why = "it is busy; " if wait_seconds > 0 else ""
                return {"status": "sent", "note": f"{why}its answer comes back to this conversation as a message"}
            return _result(await self._wait(message_id, wait_seconds, waiter), answerer, late)
        finally:
            self._waiting.pop(message_id, None)

    def _request_id(self, run: RunInfo) -> str:
        """The id of this run's next sessions_send: its turn and how many it made before, which is the same when the
        turn runs again after a restart (so it finds the message it sent then, and its answer)."""
        if run.turn is None:
            return f"send:{secrets.token_hex(6)}"
        count = self._sends.pop(run.turn, 0) + 1
        self._sends[run.turn] = count
        while len(self._sends) > MAX_COUNTED_TURNS:
            self._sends.popitem(last=False)
        return f"send:{run.turn}:{count}"

    async def _answer_before(self, message_id: str, wait_seconds: float, waiter: asyncio.Future[str]) -> str | None:
        """The answer to a message this turn sent before a restart: recorded already, or still to come (it was
        awaited then); None when it comes back as a message instead."""
        recorded, answer = await self.store.get_answer(message_id)
        if recorded:
            return answer
        return await self._wait(message_id, wait_seconds, waiter)

    async def _wait(self, message_id: str, wait_seconds: float, waiter: asyncio.Future[str]) -> str | None:
        """The answer, if it comes within `wait_seconds`; else None, recorded so that it comes back as a message
        (unless it was recorded just before: then it is the answer)."""
        try:
            async with asyncio.timeout(wait_seconds):
                return await waiter
        except TimeoutError:
            return await self._record_answer(message_id, None)

    # --- ends of turns (bot.turns.turn) ------------------------------------------------------------------------------

    async def end(self, record: SubagentRecord, status: SubagentStatus, result: str, inbound_ids: list[int]) -> None:
        """A child's turn ended (or it was killed before running): its rows closed and its end announced to the
        parent's session, once."""

        def announcement(ended: SubagentRecord) -> JournalEntry:
            return journal_entry_of(self._announcement(ended))

        announced = await self.store.end_subagent(record.id, status, result, inbound_ids, announcement)
        if announced is None:
            return  # ended before (a kill raced the end): announced already
        await self.store.set_overrides(record.child_key, record.agent, queue=None)
        self.lanes.set_mode(record.child_key, None)
        ended = await self.store.subagent(record.id)
        log.info("subagent %s %s", record.id, ENDINGS[ended.status if ended else status])
        await self.accept(announced, InboundMessage.model_validate(announced.payload))

    async def end_stale(self, inbound: InboundRecord, why: str) -> None:
        """A child's task left unrun too long (bot.delivery.recovery): it ends as failed, and its parent hears of it."""
        scheduled = InboundMessage.model_validate(inbound.payload).scheduled
        record = await self.store.subagent(scheduled.job) if scheduled is not None else None
        if record is None or record.ended is not None:
            await self.store.finish_inbound([inbound.id], "failed", why)
            return
        await self.end(record, "failed", f"not run: {why}", [inbound.id])

    def _announcement(self, ended: SubagentRecord) -> InboundMessage:
        origin = ended.origin
        target = ChatTarget.model_validate(origin["target"])
        person = origin.get("person") or owner_key(target.channel, origin["sender_id"] or "")  # kept since issue 33
        parent = Principal(owner=origin["owner"], person=person)
        scheduled = Scheduled(
            kind="announce", job=ended.id, agent=origin["parent_agent"], session_key=ended.parent_key,
            owner=parent.owner, depth=origin["depth"], hops=origin["hops"],
        )  # fmt: skip
        text = announcement_text(ended)
        return _written(target, parent, origin["sender_name"], text, f"announce:{ended.id}", scheduled)

    async def answered(self, job: Job, answer: str, inbound_ids: list[int]) -> None:
        """A turn another session's message started has answered: to the waiting sessions_send, else as a message
        into the sender's session (unless the exchange is at its cap, or the answer is empty)."""
        scheduled = job.message.scheduled
        assert scheduled is not None and scheduled.reply_session is not None
        # Recorded before anything else: the sender, here, in another process or in its turn run again after a
        # restart, takes it from there, unless it has stopped waiting (then it goes back as a message).
        given = await self._record_answer(scheduled.job, answer) if scheduled.awaited else None
        capped = scheduled.hops >= self.config.agent_to_agent.max_exchanges
        reply: InboundMessage | None = None
        if given is None and answer.strip() and not capped:
            sender = await self.store.get_session(scheduled.reply_session)
            if sender is not None:
                # The answer came from a turn acting for `job.principal`: the turn it starts back in the sender's
                # session acts for no more than that, nor than the sender session's people.
                acting = lesser(job.principal, session_principal(sender.people))
                # Its id is the message's: this turn run again after a restart journals it once.
                answered = Scheduled(
                    kind="agent", job=f"answer:{scheduled.job}", agent=sender.agent,
                    session_key=scheduled.reply_session, owner=acting.owner, hops=scheduled.hops + 1,
                    reply_session=scheduled.session_key,
                )  # fmt: skip
                source = f"session {scheduled.session_key} (agent {scheduled.agent})"
                text = _between(f"answer from the {source}; yours goes back to it, NO_REPLY sends none", answer, source)
                name = job.message.sender_name if acting.key == job.principal.key else None
                reply = _written(job.message.target(), acting, name, text, answered.job, answered)
        if reply is not None:  # journaled before this turn is closed: a crash between them loses no answer
            await self._journal(reply)
        await self.delivery.close(inbound_ids, session_key=scheduled.session_key)
        waiter = self._waiting.get(scheduled.job)
        if waiter is not None and not waiter.done() and given is not None:
            waiter.set_result(given)

    async def _record_answer(self, job: str, answer: str | None) -> str | None:
        """Record the answer to message `job` (None: its sender stopped waiting) unless one was recorded before:
        what stands recorded now. In a cluster the process whose send waits for it is told."""
        if answer is not None and self.relay is not None:
            recorded = await self.relay.hand(job, answer)
        else:
            recorded = await self.store.put_answer(job, answer)
        return answer if recorded else (await self.store.get_answer(job))[1]

    async def _journal(self, message: InboundMessage) -> bool:
        """Journal a message the bot writes into a session, then hand it to intake (to its session's lane); False
        when it was journaled before (by this turn before a restart)."""
        entry = journal_entry_of(message)
        record = await self.store.record_inbound(
            entry.channel, entry.account, entry.chat, entry.message_id, entry.payload
        )
        if record is not None:
            await self.accept(record, message)
        return record is not None

    async def answer_arrived(self, job: str) -> None:
        """Another process handed over the answer to message `job`: the send waiting for it here has it now."""
        waiter = self._waiting.get(job)
        if waiter is None or waiter.done() or self.relay is None:
            return
        answer = await self.relay.read(job)
        if not waiter.done():
            waiter.set_result(answer or "")

    def forget_waiters(self) -> None:
        """Shutdown: nothing will answer the sends still waiting."""
        for waiter in self._waiting.values():
            with contextlib.suppress(asyncio.InvalidStateError):
                waiter.set_result("")


def _result(answer: str | None, source: str, late: str) -> dict[str, Any]:
    """The tool's result: the answer (wrapped as `source`'s words), or the `late` note: it comes back as a message."""
    if answer is None:
        return {"status": "sent", "note": late}
    return {"status": "answered", "answer": wrap_untrusted(answer, source) if answer else "(no answer)"}


def _shown(record: SubagentRecord) -> dict[str, Any]:
    """A child as `subagents list` and `/subagents` show it."""
    return {
        "run_id": record.id,
        "agent": record.agent,
        "label": record.label,
        "status": record.status,  # `killed` before it has ended: stopping
        "ended": record.ended is not None,
        "task": record.task[:200],
        "session_key": record.child_key,
    }


def describe_children(children: list[SubagentRecord]) -> str:
    """`/subagents`: this conversation's children, one line each."""
    if not children:
        return "No background tasks in this conversation."
    lines = ["Background tasks (/subagents kill ID stops one):"]
    for child in children[-20:]:
        label = f" {child.label!r}" if child.label else ""
        lines.append(f"{child.id}{label} ({child.agent}): {child.status.replace('_', ' ')}; {child.task[:80]}")
    return "\n".join(lines)
