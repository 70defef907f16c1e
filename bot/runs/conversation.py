"""One agent turn in a stored conversation: session index, transcript, the runner, and what is kept afterwards."""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from agent.cancellation import Stop
from agent.events import Emit, discard
from agent.loop import Turn
from agent.messages import Message, UserMessage
from agent.providers.base import Provider
from agent.runner import ModelCandidate, Runner, RunOutcome, RunSpec
from agent.transcripts import Transcripts
from bot.config.checks import own_files
from bot.config.live import LiveConfig, ReadsLiveConfig, live
from bot.config.settings import Config
from bot.observe.metrics import Metrics
from bot.runs.assemble import build_turn, candidates, skill_report
from bot.runs.inputs import RunInputs
from bot.store import SessionTouch, Store
from channels.base import ChatTarget
from routing import Peer
from tools.base import RunInfo
from tools.hooks import Hooks
from tools.registry import ToolRegistry
from tools.skills import SkillReport

log = logging.getLogger(__name__)


@dataclass
class Conversations(ReadsLiveConfig):
    """What every turn shares: the config (a Config, or the gateway's live view of it), the store, the transcripts,
    the runner, the tools and hooks."""

    source: Config | LiveConfig
    store: Store
    state_dir: Path
    transcripts: Transcripts  # bot.gateway.state.transcripts_for: files in `state_dir`, or the PostgreSQL database
    runner: Runner
    registry: ToolRegistry
    hooks: Hooks = field(default_factory=Hooks)
    metrics: Metrics = field(default_factory=Metrics)  # each run's time and tokens (a gateway's, shared)

    def __post_init__(self) -> None:
        self.live = live(self.source)
        self.inputs = RunInputs(self._skill_report, lambda: self.config)

    async def answer(
        self,
        run: RunInfo,
        user: UserMessage,
        *,
        peer: Peer | None = None,
        target: ChatTarget | None = None,
        emit: Emit = discard,
        cancel: asyncio.Event | None = None,
        steer: Callable[[], Awaitable[list[UserMessage]]] | None = None,
        record: Callable[[RunOutcome], bool] = lambda outcome: True,
        timeout_seconds: float | None = None,
        touches: list[SessionTouch] | None = None,
    ) -> RunOutcome:
        """Run the agent on `user` in `run.session_key`; the transcript and session index gain what happened
        (unless `record(outcome)` says no: a turn cut short by shutdown is run again from the same history). The
        run's time limit is the agent's, or `timeout_seconds` when that is shorter (a subagent's own). With
        `touches`, the session's row is not written here: its update joins the list, for the caller to write with
        the journal rows the run answered (Delivery.close), in their transaction.

        SetupError (from `candidates`) when the agent has no usable model."""
        session = await self.store.ensure_session(run.session_key, run.agent, principal=run.principal.key)
        models = candidates(self.config, run.agent, session.overrides)  # the session's own: /model, /think
        session_id = session.session_id
        history, bootstrap, skills = await self.inputs.read(
            await self.transcripts.history(session_id), run, self.config.media.image_turns
        )
        run = run.model_copy(update={"skills": skills.eligible})  # found anew each run: the workspace may change
        stop = cancel or Stop()
        limit = self.config.timeout_for(run.agent, owner=run.sender_is_owner)
        run_id = f"run_{secrets.token_hex(6)}"

        async def make_turn(candidate: ModelCandidate, provider: Provider, api_key: str | None) -> Turn:
            return build_turn(
                self.config, self.registry, run, candidate, provider, run_id=run_id,
                peer=peer, bootstrap=bootstrap, hooks=self.hooks, emit=emit, cancel=stop, steer=steer,
            )  # fmt: skip

        async def on_compacted(summary: str, kept: list[Message]) -> None:
            await self.transcripts.append_compaction(session_id, summary, kept)  # the record, then the turns kept

        started = time.monotonic()
        outcome = await self.runner.run(
            RunSpec(
                run_id=run_id,
                session_key=run.session_key,
                candidates=models,
                make_turn=make_turn,
                history=history,
                user=user,
                timeout_seconds=min(limit, timeout_seconds or limit),
                on_compacted=on_compacted,
            )
        )
        usage = outcome.result.usage if outcome.result is not None else None
        self.metrics.turn_took(run.agent, time.monotonic() - started)  # the tokens were spent even when not kept
        if usage is not None:
            self.metrics.used(run.agent, outcome.model_ref, usage)
        if not record(outcome):
            return outcome
        if usage is not None:
            log.info(
                "run %s (%s, %s): %d tokens in (%d read from the cache, %d written to it), %d out",
                outcome.run_id, run.session_key, outcome.model_ref, usage.input_tokens, usage.cache_read_tokens,
                usage.cache_write_tokens, usage.output_tokens, extra={"run_id": outcome.run_id},
            )  # fmt: skip
        touch = SessionTouch(
            session_key=run.session_key,
            model=outcome.model_ref,
            usage=usage,
            channel=target.channel if target else run.channel,
            account=target.account if target else None,
            target=target.model_dump(mode="json") if target else None,
            principal=run.principal.key,
        )
        if touches is not None:
            await self.transcripts.append(session_id, outcome.messages)
            touches.append(touch)
            return outcome
        # The transcript's file and the session's row are apart: both written at once, neither waits on the other
        # (the row in a task; the transcript here, where a file's append does not even wait).
        touched = asyncio.ensure_future(self.store.touch_session(**dict(touch)))
        try:
            await self.transcripts.append(session_id, outcome.messages)
        except BaseException:
            touched.cancel()
            raise
        await touched
        return outcome

    def skills(self, agent: str) -> SkillReport:
        """The agent's skills (bot.runs.assemble.skill_report). Reads folders: call it off the event loop."""
        return self._skill_report(self.config, agent)

    def _skill_report(self, config: Config, agent: str) -> SkillReport:
        return skill_report(config, agent, own_files(config, self.state_dir))
