"""The session index: per session key, the transcript it writes to (its session id), model, tokens, last target."""

from __future__ import annotations

import secrets
import sqlite3
from typing import TYPE_CHECKING, Any, Protocol

from agent.messages import Usage
from bot.store.base import Record
from bot.store.database import Part, dumps, first, loads, scalar

__all__ = ["SessionRecord", "SessionStore", "SqliteSessions", "new_session_id"]


class SessionRecord(Record):
    """One row of the session index. `session_id` names the transcript; it changes on reset."""

    session_key: str
    session_id: str
    agent: str
    created: float
    updated: float
    model: str | None = None
    input_tokens: int = 0  # the whole prompt of every call: uncached, cache writes and cache reads
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    last_channel: str | None = None
    last_account: str | None = None
    last_target: dict[str, Any] | None = None


class SessionStore(Protocol):
    """What a conversation needs: its session (made on first use), usage recorded per turn, `/new` to reset it."""

    async def get_session(self, session_key: str) -> SessionRecord | None: ...
    async def ensure_session(self, session_key: str, agent: str) -> SessionRecord: ...
    async def touch_session(
        self,
        session_key: str,
        *,
        model: str | None = None,
        usage: Usage | None = None,
        channel: str | None = None,
        account: str | None = None,
        target: dict[str, Any] | None = None,
    ) -> SessionRecord: ...
    async def reset_session(self, session_key: str) -> SessionRecord: ...
    async def count_sessions(self) -> int: ...


def new_session_id() -> str:
    """A random, URL- and file-name-safe id: 22 characters of [A-Za-z0-9_-]."""
    return secrets.token_urlsafe(16)


class SqliteSessions(Part):
    """The session index in the `sessions` table."""

    async def get_session(self, session_key: str) -> SessionRecord | None:
        return await self._call(_get_session, session_key)

    async def ensure_session(self, session_key: str, agent: str) -> SessionRecord:
        """The session under this key, created with a new session id if there is none."""
        return await self._call(_ensure_session, session_key, agent, new_session_id(), self._db.clock())

    async def touch_session(
        self,
        session_key: str,
        *,
        model: str | None = None,
        usage: Usage | None = None,
        channel: str | None = None,
        account: str | None = None,
        target: dict[str, Any] | None = None,
    ) -> SessionRecord:
        """Mark the session used now; `usage` (a run's tokens) is added to its totals, None leaves a field.

        KeyError if there is no such session.
        """
        counts = _counts(usage or Usage())
        if min(counts) < 0:
            raise ValueError(f"token counts cannot be negative: {usage}")
        values = (model, *counts, channel, account, dumps(target) if target is not None else None)
        return await self._call(_touch_session, session_key, self._db.clock(), *values)

    async def reset_session(self, session_key: str) -> SessionRecord:
        """Start the session over: a new session id, token totals zeroed; the old transcript stays on disk.

        KeyError if there is no such session.
        """
        return await self._call(_reset_session, session_key, new_session_id(), self._db.clock())

    async def count_sessions(self) -> int:
        return await self._call(scalar, "SELECT count(*) FROM sessions")


if TYPE_CHECKING:
    _checked: type[SessionStore] = SqliteSessions


# --- on the worker thread -----------------------------------------------------------------------------------------


def _session(row: sqlite3.Row) -> SessionRecord:
    return SessionRecord.model_validate({**dict(row), "last_target": loads(row["last_target"])})


def _get_session(connection: sqlite3.Connection, session_key: str) -> SessionRecord | None:
    row = first(connection, "SELECT * FROM sessions WHERE session_key = ?", (session_key,))
    return None if row is None else _session(row)


def _ensure_session(
    connection: sqlite3.Connection, session_key: str, agent: str, session_id: str, now: float
) -> SessionRecord:
    connection.execute(
        "INSERT INTO sessions (session_key, session_id, agent, created, updated) VALUES (?, ?, ?, ?, ?)"
        " ON CONFLICT (session_key) DO NOTHING",
        (session_key, session_id, agent, now, now),
    )
    record = _get_session(connection, session_key)
    assert record is not None  # the only writer is this thread, and nothing deletes sessions
    return record


def _counts(usage: Usage) -> tuple[int, int, int, int]:
    return usage.input_tokens, usage.output_tokens, usage.cache_read_tokens, usage.cache_write_tokens


def _touch_session(
    connection: sqlite3.Connection,
    session_key: str,
    now: float,
    model: str | None,
    tokens_in: int,
    tokens_out: int,
    cache_read: int,
    cache_write: int,
    channel: str | None,
    account: str | None,
    target: str | None,
) -> SessionRecord:
    row = first(
        connection,
        "UPDATE sessions SET updated = ?, model = coalesce(?, model),"
        " input_tokens = input_tokens + ?, output_tokens = output_tokens + ?,"
        " cache_read_tokens = cache_read_tokens + ?, cache_write_tokens = cache_write_tokens + ?,"
        " last_channel = coalesce(?, last_channel), last_account = coalesce(?, last_account),"
        " last_target = coalesce(?, last_target)"
        " WHERE session_key = ? RETURNING *",
        (now, model, tokens_in, tokens_out, cache_read, cache_write, channel, account, target, session_key),
    )
    if row is None:
        raise KeyError(f"no session {session_key!r}")
    return _session(row)


def _reset_session(connection: sqlite3.Connection, session_key: str, session_id: str, now: float) -> SessionRecord:
    row = first(
        connection,
        "UPDATE sessions SET session_id = ?, created = ?, updated = ?, input_tokens = 0, output_tokens = 0,"
        " cache_read_tokens = 0, cache_write_tokens = 0"
        " WHERE session_key = ? RETURNING *",
        (session_id, now, now, session_key),
    )
    if row is None:
        raise KeyError(f"no session {session_key!r}")
    return _session(row)
