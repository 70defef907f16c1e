"""The outer runner: owns each run's time limit, rotates API keys with cooldowns, falls back to other models, and
compacts the history when it overflows the model's context."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeVar

import httpx
from pydantic import BaseModel

from agent.cancellation import Stop, Stopped, unless_stopped
from agent.compaction import DEFAULT_KEEP_LAST_TURNS, CompactionError, CompactionResult, compact, count_turns
from agent.events import AssistantEvent, Emit, RunEvent, ToolEvent
from agent.keys import NO_KEY, KeyPool, fingerprint, key_index, key_variable
from agent.log_context import log_context
from agent.loop import Turn, TurnResult, run_turn
from agent.messages import Message, UserMessage
from agent.providers.base import ErrorKind, Provider, ProviderError, ThinkingLevel
from agent.providers.builtins import build_provider
from agent.providers.config import ModelOptions, ProviderConfig
from agent.providers.sse import redact
from agent.providers.transport import provider_client

log = logging.getLogger(__name__)
_T = TypeVar("_T")

RunState = Literal["ok", "error", "timeout"]
# next_key: the key cooled down, the same model goes on with the next key. next_model: this model failed (or all
# its keys are cooling), the next candidate follows. retry: the same model again after a server error. compact:
# the history overflowed, it is summarized and the same model retried. stop: output was shown or tools ran, so
# nothing is retried. give_up: every candidate failed. timeout: the run passed its time limit.
Decision = Literal["next_key", "next_model", "retry", "compact", "stop", "give_up", "timeout"]
_Category = Literal["auth", "no_key", "busy", "too_long", "down"]

STOPPED_PARTWAY = (
    "Sorry — the model failed partway through this answer, so I stopped there rather than risk repeating "
    "what was already done. Ask me to continue if you like."
)
NO_MODEL = "Sorry — no model is configured for me, so I can't answer."
INTERNAL_ERROR = "Sorry — something went wrong on my side while answering. Please try again."


@dataclass(frozen=True)
class ModelCandidate:
    """One model to try: `ref` as written (`provider/model-id`), its provider's name and settings, its options."""

    ref: str
    provider_name: str
    model_id: str
    provider: ProviderConfig
    options: ModelOptions = field(default_factory=ModelOptions)


class RunnerEvent(BaseModel):
    """A decision the runner took; keys appear only as their index in the provider's list and a short hash."""

    stream: Literal["runner"] = "runner"
    run_id: str
    decision: Decision
    model: str | None = None
    key_index: int | None = None
    key_hash: str | None = None
    error_kind: ErrorKind | None = None
    cooldown_seconds: float | None = None
    reason: str


MakeTurn = Callable[[ModelCandidate, Provider, str | None], Turn | Awaitable[Turn]]
OnCompacted = Callable[[str, list[Message]], Awaitable[None]]  # (summary, kept messages)
RunnerEmit = Callable[[RunnerEvent], Awaitable[None]]
ProviderFactory = Callable[[str, ProviderConfig, httpx.AsyncClient | None], Provider]


async def _ignore(_: RunnerEvent) -> None:
    return None


@dataclass
class RunSpec:
    """What to run. `make_turn(candidate, provider, api_key)` builds the Turn for one attempt (sync or async);
    the runner then sets its run_id, api_key and cancel handling, and watches its events for visible output."""

    run_id: str
    session_key: str
    candidates: Sequence[ModelCandidate]
    make_turn: MakeTurn
    history: list[Message]
    user: UserMessage
    timeout_seconds: float = 600
    # (summary, the messages kept after it): record the compaction in the transcript (agent.sessions.append_compaction)
    on_compacted: OnCompacted | None = None
    emit: RunnerEmit = _ignore


@dataclass
class RunOutcome:
    """How a run ended.

    `result` is set exactly when status is "ok" (a turn stopped by cancel is ok too: stop_reason "cancelled").
    Otherwise `partial_messages` are what the run added that is safe to keep in the transcript (the turn that
    failed after output or tool calls, or the turn the time limit stopped; every tool call in it answered), empty
    when nothing happened. `history` is what the last attempt ran with (compacted, if compaction happened).
    `user_message` is one sentence for the person when there is no result; `reason` the detailed cause for logs.
    Neither ever holds a key.
    """

    run_id: str
    status: RunState
    result: TurnResult | None = None
    partial_messages: list[Message] = field(default_factory=list)
    history: list[Message] = field(default_factory=list)
    model_ref: str | None = None
    user_message: str | None = None
    reason: str | None = None
    compaction: CompactionResult | None = None

    @property
    def messages(self) -> list[Message]:
        """The messages to append to the transcript, whatever the status."""
        return self.result.messages if self.result is not None else self.partial_messages


@dataclass(frozen=True)
class _Failure:
    """Why one candidate gave up."""

    model: str
    key_index: int | None
    error_kind: ErrorKind | None  # None: every key was cooling, or compaction could not help
    detail: str
    category: _Category


class _Stopped(Exception):
    """The run was stopped (timeout or cancel) between turns."""


_SHOWN = (AssistantEvent, ToolEvent)  # what a person could have seen, or a tool that ran


class _OutputWatch:
    """Wraps a turn's emit to notice anything the person could have seen, or a tool that ran."""

    def __init__(self, emit: Emit) -> None:
        self.emit = emit
        self.shown = False

    async def __call__(self, event: RunEvent) -> None:
        if isinstance(event, _SHOWN):
            self.shown = True
        await self.emit(event)


@dataclass
class _Run:
    spec: RunSpec
    history: list[Message]
    secrets: set[str]
    stop: asyncio.Event = field(default_factory=Stop)
    turn: Turn | None = None
    timed_out: bool = False
    compaction: CompactionResult | None = None
    failures: list[_Failure] = field(default_factory=list)
    task: asyncio.Task[RunOutcome] | None = None

    def halt(self) -> None:
        self.stop.set()
        if self.turn is not None:
            self.turn.cancel.set()


class Runner:
    """Owns runs: runs each one as a task, enforces its time limit, and decides what happens after each
    provider failure. One Runner (and its KeyPool) is meant to serve the whole process."""

    def __init__(
        self,
        *,
        key_pool: KeyPool | None = None,
        client: httpx.AsyncClient | None = None,
        provider_factory: ProviderFactory = build_provider,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        server_retry_delay: float = 1.0,
        cancel_grace_seconds: float = 5.0,
        keep_last_turns: int = DEFAULT_KEEP_LAST_TURNS,
    ) -> None:
        self.key_pool = key_pool or KeyPool(clock=clock)
        # One HTTP client for every run: building one costs milliseconds of CPU (its TLS context), and a
        # shared one keeps connections to the provider open between turns.
        self.client = client
        self._own_client = client is None
        self.provider_factory = provider_factory
        self.sleep = sleep  # waits out time limits, grace periods and retry delays (tests pass one they control)
        self.server_retry_delay = server_retry_delay
        self.cancel_grace_seconds = cancel_grace_seconds
        self.keep_last_turns = keep_last_turns
        self._runs: dict[str, _Run] = {}

    # --- the public surface ---------------------------------------------------------------------------------------

    def _start(self, spec: RunSpec) -> str:
        if spec.run_id in self._runs:
            raise ValueError(f"run {spec.run_id!r} already exists")
        secrets: set[str] = set()
        for candidate in spec.candidates:
            secrets.update(candidate.provider.keys())
        run = _Run(spec=spec, history=list(spec.history), secrets=secrets)
        # Every line the run writes (its tools' and its provider's too) carries its id and session (agent.log_context).
        with log_context(run_id=spec.run_id, session_key=spec.session_key):
            run.task = asyncio.create_task(self._supervise(run), name=f"run {spec.run_id}")
        # Dropped once it ends: a kept run holds its whole history, which grows with the conversation.
        run.task.add_done_callback(lambda _: self._runs.pop(spec.run_id, None))
        self._runs[spec.run_id] = run
        return spec.run_id

    async def run(self, spec: RunSpec) -> RunOutcome:
        """Run to the end and return the outcome; cancelling the caller cancels the run. Once it ends the runner
        forgets it. (Background runs with their own waiting come with subagents.)"""
        run = self._runs[self._start(spec)]
        assert run.task is not None
        try:
            return await asyncio.shield(run.task)
        except asyncio.CancelledError:
            run.task.cancel()
            raise

    async def aclose(self) -> None:
        """Cancel every run still going, and wait for them to end."""
        tasks = [run.task for run in self._runs.values() if run.task is not None and not run.task.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        if self._own_client and self.client is not None:
            await self.client.aclose()
            self.client = None

    # --- one run --------------------------------------------------------------------------------------------------

    async def _supervise(self, run: _Run) -> RunOutcome:
        """Run the attempts under the time limit: at the limit the turn's cancel is set, and if the turn does not
        stop within the grace period its task is cancelled."""
        work = asyncio.create_task(self._attempt_all(run))
        limit = run.spec.timeout_seconds
        try:
            if not await self._ends_within(work, limit):
                run.timed_out = True
                await self._decide(run, "timeout", reason=f"the run passed its limit of {limit:g} s; stopping it")
                run.halt()
                grace = self.cancel_grace_seconds
                if not await self._ends_within(work, grace):
                    why = f"the turn did not stop within {grace:g} s; cancelling it"
                    await self._decide(run, "timeout", reason=why)
                    work.cancel()
                    await asyncio.wait({work}, timeout=grace)
        except asyncio.CancelledError:
            work.cancel()
            raise
        finally:
            run.turn = None
        outcome = work.result() if work.done() and not work.cancelled() else None
        return self._timed_out(run, outcome) if run.timed_out else self._finished(run, outcome)

    async def _ends_within(self, work: asyncio.Task[RunOutcome], seconds: float) -> bool:
        """Wait until `work` ends or `self.sleep(seconds)` does, whichever comes first; whether `work` ended."""
        if self.sleep is asyncio.sleep:  # real time: the event loop's own timer, without a task to sleep in
            await asyncio.wait({work}, timeout=seconds)
            return work.done()
        timer = asyncio.ensure_future(self.sleep(seconds))
        try:
            await asyncio.wait({work, timer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            timer.cancel()
        return work.done()

    async def _attempt_all(self, run: _Run) -> RunOutcome:
        spec = run.spec
        try:
            if not spec.candidates:
                return self._outcome(run, "error", user_message=NO_MODEL, reason="no model candidates")
            for position, candidate in enumerate(spec.candidates):
                attempt = await self._attempt(run, candidate)
                if isinstance(attempt, RunOutcome):
                    return attempt
                run.failures.append(attempt)
                last = position == len(spec.candidates) - 1
                await self._decide(
                    run,
                    "give_up" if last else "next_model",
                    candidate,
                    attempt.key_index,
                    error_kind=attempt.error_kind,
                    reason=attempt.detail,
                )
            return self._outcome(
                run, "error", user_message=_apology(run.failures), reason=self._redact(run, _reasons(run.failures))
            )
        except Exception as error:  # a bug or a callback's failure: an honest error, no stack trace for the person
            log.exception("run %s: failed unexpectedly", spec.run_id)
            reason = self._redact(run, f"internal error: {type(error).__name__}: {error}")
            return self._outcome(run, "error", user_message=INTERNAL_ERROR, reason=reason)

    async def _attempt(self, run: _Run, candidate: ModelCandidate) -> RunOutcome | _Failure:
        """Every try one candidate gets: its keys in turn, one compaction, one retry after a server error."""
        name, keys = candidate.provider_name, candidate.provider.keys()
        if not keys and candidate.provider.wants_key():
            # Sent without a key, the request would come back 401 and read as a refused key; it is a missing one.
            detail = (
                f"no API key for provider {name!r}: providers.{name}.api_key is empty (set the variable it names, "
                f"e.g. {key_variable(name)}; `bot config check` shows which)"
            )
            return _Failure(candidate.ref, None, None, detail, "no_key")
        if self.client is None:
            self.client = provider_client()
        provider = self.provider_factory(name, candidate.provider, self.client)
        failed: set[str] = set()
        compacted = must_compact = retried = False
        thinking: ThinkingLevel = candidate.options.thinking
        try:
            while True:
                if run.stop.is_set():
                    return self._stopped(run, candidate)
                key = self.key_pool.next_key(name, keys, skip=failed)
                if key is None:
                    return self._all_cooling(candidate, keys)
                index, api_key = key_index(keys, key), key or None
                watch: _OutputWatch | None = None
                try:
                    if must_compact:
                        await self._compact(run, candidate, provider, api_key)
                        must_compact = False
                        continue
                    turn, watch = await self._make_turn(run, candidate, provider, api_key, thinking)
                    result = await run_turn(turn, run.history, run.spec.user)
                except _Stopped:
                    return self._stopped(run, candidate)
                except CompactionError as error:
                    return _Failure(candidate.ref, index, None, f"compaction: {error}", "too_long")
                except ProviderError as error:
                    detail = self._redact(run, f"{error.kind}: {error}")
                    cooldown = self._cool(name, key, error)
                    partial = error.partial_messages or [run.spec.user]
                    if watch is not None and (watch.shown or len(partial) > 1):
                        return await self._stop_partway(run, candidate, index, key, error, detail, partial)
                    if error.kind in ("auth", "rate_limit"):
                        failed.add(key)
                        detail += f"; key cooling for {cooldown:g} s"
                        if self.key_pool.next_key(name, keys, skip=failed) is None:
                            category: _Category = "auth" if error.kind == "auth" else "busy"
                            return _Failure(candidate.ref, index, error.kind, f"{detail}; no other key", category)
                        await self._decide(
                            run, "next_key", candidate, index, key, error.kind, detail, cooldown_seconds=cooldown
                        )
                        continue
                    if error.kind == "context_overflow" and not compacted:
                        if not run.history:
                            detail += "; nothing to compact: the message alone is too long"
                            return _Failure(candidate.ref, index, error.kind, detail, "too_long")
                        compacted = must_compact = True
                        await self._decide(run, "compact", candidate, index, key, error.kind, f"{detail}; compacting")
                        continue
                    if error.kind == "bad_request" and thinking != "off" and _rejects_thinking(str(error)):
                        lower = _LOWER_THINKING[thinking]
                        why = f"{detail}; the model rejected thinking level {thinking}, trying {lower}"
                        await self._decide(run, "retry", candidate, index, key, error.kind, why)
                        thinking = lower
                        continue
                    if error.kind == "server" and not retried:
                        retried = True
                        again = f"{detail}; trying again in {self.server_retry_delay:g} s"
                        await self._decide(run, "retry", candidate, index, key, error.kind, again)
                        await self._unless_stopped(run, self.sleep(self.server_retry_delay))
                        continue
                    return _Failure(candidate.ref, index, error.kind, detail, _category(error.kind))
                finally:
                    run.turn = None
                if result.stop_reason != "cancelled":
                    self.key_pool.succeeded(name, key)
                return self._outcome(run, "ok", result=result, model_ref=candidate.ref)
        except _Stopped:
            return self._stopped(run, candidate)
        finally:
            await provider.aclose()

    async def _make_turn(
        self, run: _Run, candidate: ModelCandidate, provider: Provider, api_key: str | None, thinking: ThinkingLevel
    ) -> tuple[Turn, _OutputWatch]:
        made = run.spec.make_turn(candidate, provider, api_key)
        turn = made if isinstance(made, Turn) else await made
        turn.thinking = thinking  # the level this attempt runs at (lowered after a rejection)
        turn.run_id = run.spec.run_id  # every attempt's events carry the run's id
        turn.api_key = api_key  # the key this attempt was given, whatever the builder did with it
        watch = _OutputWatch(turn.emit)
        turn.emit = watch
        run.turn = turn
        if run.stop.is_set():
            turn.cancel.set()
        return turn, watch

    async def _compact(self, run: _Run, candidate: ModelCandidate, provider: Provider, api_key: str | None) -> None:
        # Keep fewer turns than usual when the history is short: something older must go into the summary.
        keep = min(self.keep_last_turns, max(count_turns(run.history) - 1, 0))
        work = compact(provider, candidate.model_id, run.history, keep_last_turns=keep, api_key=api_key)
        result = await self._unless_stopped(run, work)
        run.history, run.compaction = list(result.history), result
        log.info(
            "run %s: compacted %d messages into a summary of %d characters, kept %d",
            run.spec.run_id,
            result.summarized,
            len(result.summary),
            len(result.kept),
        )
        if run.spec.on_compacted is not None:
            try:
                await run.spec.on_compacted(result.summary, list(result.kept))
            except Exception as error:  # the answer matters more than recording the summary
                log.warning("run %s: on_compacted failed: %s: %s", run.spec.run_id, type(error).__name__, error)

    async def _stop_partway(
        self,
        run: _Run,
        candidate: ModelCandidate,
        index: int | None,
        key: str,
        error: ProviderError,
        detail: str,
        partial: list[Message],
    ) -> RunOutcome:
        detail += "; the turn had already shown output or run tools, so it is not retried"
        await self._decide(run, "stop", candidate, index, key, error.kind, detail)
        return self._outcome(
            run, "error", partial=partial, model_ref=candidate.ref, user_message=STOPPED_PARTWAY, reason=detail
        )

    def _cool(self, provider: str, key: str, error: ProviderError) -> float:
        if error.kind == "auth" or error.kind == "rate_limit":
            return self.key_pool.cool(provider, key, error.kind, error.retry_after)
        return 0.0

    def _all_cooling(self, candidate: ModelCandidate, keys: Sequence[str]) -> _Failure:
        name = candidate.provider_name
        slots = keys or [NO_KEY]
        reasons = {state.reason for key in slots if (state := self.key_pool.state(name, key)) is not None}
        wait = self.key_pool.free_in(name, keys)
        which = "every key" if keys else "the keyless endpoint"
        detail = f"{which} of {name} is cooling down (free again in {wait:.0f} s)"
        return _Failure(candidate.ref, None, None, detail, "auth" if reasons == {"auth"} else "busy")

    def _stopped(self, run: _Run, candidate: ModelCandidate) -> RunOutcome:
        """Stopped between two attempts: the same outcome a turn cancelled at its start would give."""
        user = run.spec.user
        result = TurnResult(run_id=run.spec.run_id, text="", stop_reason="cancelled", messages=[user])
        return self._outcome(run, "ok", result=result, model_ref=candidate.ref)

    def _timed_out(self, run: _Run, outcome: RunOutcome | None) -> RunOutcome:
        finished = outcome is not None and outcome.result is not None and outcome.result.stop_reason != "cancelled"
        if outcome is not None and outcome.status == "ok" and finished:
            return outcome  # it finished its answer as the limit struck
        limit = run.spec.timeout_seconds
        minutes = f"{limit / 60:g}-minute" if limit >= 60 and limit % 60 == 0 else f"{limit:g}-second"
        return self._outcome(
            run,
            "timeout",
            partial=outcome.messages if outcome else [],
            model_ref=outcome.model_ref if outcome else None,
            user_message=f"Sorry — this took longer than my {minutes} limit, so I stopped.",
            reason=f"timed out after {limit:g} s",
        )

    def _finished(self, run: _Run, outcome: RunOutcome | None) -> RunOutcome:
        if outcome is not None:
            return outcome
        return self._outcome(run, "error", user_message=INTERNAL_ERROR, reason="the run ended without an outcome")

    def _outcome(
        self,
        run: _Run,
        status: RunState,
        *,
        result: TurnResult | None = None,
        partial: list[Message] | None = None,
        model_ref: str | None = None,
        user_message: str | None = None,
        reason: str | None = None,
    ) -> RunOutcome:
        return RunOutcome(
            run_id=run.spec.run_id,
            status=status,
            result=result,
            partial_messages=list(partial or []),
            history=list(run.history),
            model_ref=model_ref,
            user_message=user_message,
            reason=reason,
            compaction=run.compaction,
        )

    async def _decide(
        self,
        run: _Run,
        decision: Decision,
        candidate: ModelCandidate | None = None,
        index: int | None = None,
        key: str | None = None,
        error_kind: ErrorKind | None = None,
        reason: str = "",
        *,
        cooldown_seconds: float | None = None,
    ) -> None:
        """Log one line and emit one event for a decision."""
        reason = self._redact(run, reason)
        key_hash = fingerprint(key) if key else None
        event = RunnerEvent(
            run_id=run.spec.run_id,
            decision=decision,
            model=candidate.ref if candidate else None,
            key_index=index,
            key_hash=key_hash,
            error_kind=error_kind,
            cooldown_seconds=cooldown_seconds,
            reason=reason,
        )
        level = logging.WARNING if decision in ("stop", "give_up", "timeout") else logging.INFO
        shown_key = f"#{index} ({key_hash})" if key_hash else "-"
        model = event.model or "-"
        log.log(level, "run %s: %s model=%s key=%s: %s", run.spec.run_id, decision, model, shown_key, reason)
        await run.spec.emit(event)

    async def _unless_stopped(self, run: _Run, work: Awaitable[_T]) -> _T:
        """Await `work`, but cancel it and raise _Stopped as soon as the run is stopped."""
        try:
            return await unless_stopped(work, run.stop)
        except Stopped:
            raise _Stopped from None

    def _redact(self, run: _Run, text: str) -> str:
        return redact(text, run.secrets)


def _category(kind: ErrorKind) -> _Category:
    if kind == "auth":
        return "auth"
    if kind == "rate_limit":
        return "busy"
    if kind == "context_overflow":
        return "too_long"
    return "down"


def _apology(failures: Sequence[_Failure]) -> str:
    """One honest sentence for the person, by what went wrong everywhere."""
    tried = len(failures)
    models = f"tried {tried} model{'' if tried == 1 else 's'}"
    categories = {failure.category for failure in failures}
    if categories == {"auth"}:
        return "Sorry — I can't use the model right now: its API key was refused. Please tell whoever runs this bot."
    if categories <= {"auth", "no_key"} and "no_key" in categories:
        return "Sorry — I can't use the model: no API key is set up for it. Please tell whoever runs this bot."
    if categories == {"busy"}:
        return f"Sorry — the model is over its rate limit right now ({models}). Please try again in a few minutes."
    if categories == {"too_long"}:
        return (
            "Sorry — this conversation has grown too long for the model, even after summarizing it. "
            "Please start a new conversation (/new)."
        )
    return f"Sorry — the model is not answering right now ({models}). Please try again in a minute."


def _reasons(failures: Sequence[_Failure]) -> str:
    return "; ".join(
        f"{failure.model}{'' if failure.key_index is None else f' key #{failure.key_index}'}: {failure.detail}"
        for failure in failures
    )


_LOWER_THINKING: dict[ThinkingLevel, ThinkingLevel] = {"high": "medium", "medium": "low", "low": "off", "off": "off"}
_THINKING_WORDS = ("thinking", "reasoning", "budget_tokens")


def _rejects_thinking(message: str) -> bool:
    """Whether a 400 is about the thinking or reasoning setting (the wording differs between providers)."""
    lowered = message.lower()
    return any(word in lowered for word in _THINKING_WORDS)
