"""The session book (tools.sessions.SessionBook) on the state store and the transcripts, for the session tools and
`bot sessions`: an agent sees its own sessions and those of agents `tools.agent_to_agent` pairs it with."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ValidationError

from agent.messages import AssistantMessage, Message, TextBlock, UserMessage
from agent.transcripts import Transcripts
from bot.config.live import LiveConfig, ReadsLiveConfig, live
from bot.runs.principal import session_principal
from bot.store.base import Clock
from bot.store.sessions import SessionRecord, SessionStore
from channels.base import ChatTarget, Principal
from tools.base import RunInfo
from tools.message import format_target
from tools.policy import AgentToAgent
from tools.sessions import MAX_LIMIT, MESSAGE_CHARS, SESSION_KINDS, TOTAL_CHARS, session_kind

if TYPE_CHECKING:
    from bot.config.settings import Config

__all__ = ["SessionHistory", "ShownMessage", "StoredSessions", "described_session", "shown_messages"]


class ShownMessage(BaseModel):
    """One message as the history shows it: who said it and its text (tool calls by name, images as [image])."""

    role: Literal["user", "assistant"]
    text: str


class SessionHistory(BaseModel):
    """A session's latest messages, capped: `notes` say what was cut or left out."""

    session_key: str
    agent: str
    kind: str
    messages: list[ShownMessage]
    notes: list[str] = []


def _iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).isoformat(timespec="seconds")


def _last_chat(record: SessionRecord) -> str | None:
    """The chat the session last answered in, as `<channel>[/<account>]:<kind>:<id>[:thread:<id>]`."""
    if record.last_target is None:
        return None
    try:
        target = ChatTarget.model_validate(record.last_target)
    except ValidationError:
        return None
    thread = f":thread:{target.thread_id}" if target.thread_id else ""
    return format_target(target) + thread


def described_session(record: SessionRecord) -> dict[str, Any]:
    """A session as `sessions_list` and `bot sessions list --json` show it."""
    return {
        "key": record.session_key,
        "agent": record.agent,
        "kind": session_kind(record.session_key),
        "updated": _iso(record.updated),
        "created": _iso(record.created),
        "model": record.model,
        "tokens": {
            "input": record.input_tokens,
            "output": record.output_tokens,
            "cache_read": record.cache_read_tokens,
            "cache_write": record.cache_write_tokens,
        },
        "last_chat": _last_chat(record),
    }


def _text_of(message: Message) -> str | None:
    """What the history shows of one message; None for tool results (the calls are shown by name)."""
    if isinstance(message, UserMessage):
        parts = [block.text if isinstance(block, TextBlock) else "[image]" for block in message.content]
        return "\n".join(part for part in parts if part)
    if isinstance(message, AssistantMessage):
        calls = ", ".join(call.name for call in message.tool_calls)
        return "\n".join(part for part in (message.text, f"[tool calls: {calls}]" if calls else "") if part)
    return None


def shown_messages(messages: Sequence[Message], limit: int) -> tuple[list[ShownMessage], list[str]]:
    """The latest `limit` user and assistant messages, each cut to MESSAGE_CHARS and, from the newest back, as many
    as fit in TOTAL_CHARS; and notes saying what was cut or left out."""
    said: list[ShownMessage] = []
    for message in messages:
        text = _text_of(message)
        if text is not None and text.strip():
            role: Literal["user", "assistant"] = "user" if isinstance(message, UserMessage) else "assistant"
            said.append(ShownMessage(role=role, text=text))
    notes: list[str] = []
    if len(said) > limit:
        notes.append(f"showing the latest {limit} of {len(said)} messages")
    latest = said[-limit:] if limit else []
    cut = 0
    for index, shown in enumerate(latest):
        if len(shown.text) > MESSAGE_CHARS:
            more = len(shown.text) - MESSAGE_CHARS
            latest[index] = ShownMessage(
                role=shown.role, text=f"{shown.text[:MESSAGE_CHARS]}… [cut: {more} more characters]"
            )
            cut += 1
    if cut:
        notes.append(f"{cut} message{'s' if cut != 1 else ''} cut to {MESSAGE_CHARS} characters")
    kept: list[ShownMessage] = []
    total = 0
    for shown in reversed(latest):
        if total + len(shown.text) > TOTAL_CHARS:
            break
        total += len(shown.text)
        kept.append(shown)
    if len(kept) < len(latest):
        left_out = len(latest) - len(kept)
        notes.append(
            f"{left_out} older message{'s' if left_out != 1 else ''} left out: {TOTAL_CHARS} characters in all"
        )
    return list(reversed(kept)), notes


class StoredSessions(ReadsLiveConfig):
    """The session book on the store's session index and `transcripts` (gateway.state.transcripts_for). Read by a run
    (`list`, `history`) it shows what that run's agent may see, and to a run that does not act for the owners only
    the sessions that are that person's alone (every turn in them acted for them); read with `viewer=None`
    (`bot sessions`, the owner at the shell) every agent's sessions."""

    def __init__(
        self, store: SessionStore, config: Config | LiveConfig, transcripts: Transcripts, clock: Clock
    ) -> None:
        self.store = store
        self.live = live(config)
        self.transcripts = transcripts
        self.clock = clock

    @property
    def _access(self) -> AgentToAgent:
        return self.config.agent_to_agent

    def _may_see(self, viewer: str | None, agent: str) -> bool:
        return viewer is None or self._access.allows(viewer, agent)

    def _refusal(self, viewer: str, agent: str) -> str:
        return (
            f"agent {viewer!r} may not see agent {agent!r}'s sessions (tools.agent_to_agent.allow does not pair them)"
        )

    async def sessions(
        self,
        viewer: str | None,
        *,
        kinds: Sequence[str] | None = None,
        agent: str | None = None,
        active_minutes: float | None = None,
        limit: int = 20,
        person: Principal | None = None,
    ) -> list[dict[str, Any]]:
        """The sessions `viewer` may see (None: all), newest first, filtered, only `person`'s own when it is not the
        owners; ValueError for a bad filter, LookupError for an agent `viewer` may not see."""
        if not 1 <= limit <= MAX_LIMIT:
            raise ValueError(f"limit must be from 1 to {MAX_LIMIT}")
        if kinds is not None and (unknown := sorted(set(kinds) - set(SESSION_KINDS))):
            raise ValueError(f"unknown session kinds {unknown}; kinds are {', '.join(SESSION_KINDS)}")
        if active_minutes is not None and active_minutes <= 0:
            raise ValueError("active_minutes must be more than 0")
        agents: list[str] | None
        if agent is not None:
            wanted = agent.strip().lower()
            if viewer is not None and not self._may_see(viewer, wanted):
                raise LookupError(self._refusal(viewer, wanted))
            agents = [wanted]
        elif viewer is None:
            agents = None
        else:
            known = dict.fromkeys([viewer, *(item.id for item in self.config.agents)])
            agents = [name for name in known if self._may_see(viewer, name)]
        since = None if active_minutes is None else self.clock() - active_minutes * 60
        filtered = kinds is not None or not _sees_all(person)
        records = await self.store.list_sessions(agents, since, None if filtered else limit)
        if filtered:
            records = [
                record for record in records
                if (kinds is None or session_kind(record.session_key) in kinds) and _theirs(person, record)
            ][:limit]  # fmt: skip
        return [described_session(record) for record in records]

    async def read(
        self, viewer: str | None, session_key: str, *, limit: int = 20, person: Principal | None = None
    ) -> SessionHistory:
        """The session's latest messages, capped (shown_messages); LookupError for a session that does not exist or
        that `viewer` (or `person`, when not the owners) may not see: the same as for none."""
        if not 1 <= limit <= MAX_LIMIT:
            raise ValueError(f"limit must be from 1 to {MAX_LIMIT}")
        key = session_key.strip()
        parts = key.split(":")
        if viewer is not None and len(parts) >= 2 and parts[0] == "agent" and not self._may_see(viewer, parts[1]):
            raise LookupError(self._refusal(viewer, parts[1]))  # refused before looking: no hint whether it exists
        record = await self.store.get_session(key)
        if record is None or not _theirs(person, record):
            raise LookupError(f"no session {key!r}")
        if viewer is not None and not self._may_see(viewer, record.agent):
            raise LookupError(self._refusal(viewer, record.agent))
        messages = await self.transcripts.history(record.session_id)
        shown, notes = shown_messages(messages, limit)
        return SessionHistory(
            session_key=record.session_key,
            agent=record.agent,
            kind=session_kind(record.session_key),
            messages=shown,
            notes=notes,
        )

    # --- tools.sessions.SessionBook -------------------------------------------------------------------------------

    async def list(
        self,
        run: RunInfo,
        *,
        kinds: list[str] | None = None,
        agent: str | None = None,
        active_minutes: float | None = None,
        limit: int = 20,
    ) -> list[dict[str, Any]]:
        return await self.sessions(
            run.agent, kinds=kinds, agent=agent, active_minutes=active_minutes, limit=limit, person=run.principal
        )

    async def history(self, run: RunInfo, session_key: str, *, limit: int = 20) -> dict[str, Any]:
        return (await self.read(run.agent, session_key, limit=limit, person=run.principal)).model_dump(mode="json")


def _sees_all(person: Principal | None) -> bool:
    return person is None or person.owner


def _theirs(person: Principal | None, record: SessionRecord) -> bool:
    """Whether `person` may reach the session: the owners (and the shell) any; anyone else only a session whose every
    turn acted for them (bot.runs.principal.session_principal)."""
    if _sees_all(person):
        return True
    alone = session_principal(record.people)
    return alone is not None and person is not None and alone.key == person.key
