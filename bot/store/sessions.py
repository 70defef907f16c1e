"""The session index: per session key, the transcript it writes to (its session id), model, tokens, last target."""

from __future__ import annotations

import contextlib
import secrets
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any, Protocol

from pydantic import AfterValidator, Field

from agent.messages import Usage
from bot.store.base import Record
from bot.store.database import Part, delete, dumps, first, loads, scalar, write_transaction

__all__ = [
    "USAGE_BY_MODEL", "ModelUsage", "SessionRecord", "SessionStore", "SessionTouch", "SqliteSessions", "UsageRow",
    "check_overrides", "merged_overrides", "new_session_id", "session_record", "token_counts", "touched",
    "usage_counts",
]  # fmt: skip


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
    # What the chat changed for this session alone (`/model`, `/think`, `/queue`): {"model": ..., "thinking": ...,
    # "queue": ...}, each key present only while set. Kept across `/new`.
    overrides: dict[str, str] = Field(default_factory=dict)
    # Whom its turns have acted for (channels.base.Principal.key: `owners`, or a person's `channel:id`), in the order
    # they first did. Kept across `/new` (the same people are in the chat).
    people: list[str] = Field(default_factory=list)


def _counted(usage: Usage | None) -> Usage | None:
    usage_counts(usage)  # ValueError for a negative count
    return usage


class SessionTouch(Record):
    """What a finished run adds to its session's row: the model, the tokens (a `usage` row too), where it answered,
    whom it acted for. Written alone (`touch_session`) or with the journal rows the run answered
    (`JournalStore.finish_inbound`), in their transaction."""

    session_key: str
    model: str | None = None
    usage: Annotated[Usage | None, AfterValidator(_counted)] = None  # no negative token count: ValueError
    channel: str | None = None
    account: str | None = None
    target: dict[str, Any] | None = None
    principal: str | None = None


class UsageRow(Record):
    """One run's tokens (the `usage` table): which session, agent and model, and when it ended."""

    at: float
    session_key: str
    agent: str
    model: str | None = None
    input_tokens: int = 0  # the whole prompt, cache reads and writes included
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    @property
    def runs(self) -> int:
        """One row, one run (ModelUsage counts several)."""
        return 1


class ModelUsage(Record):
    """The runs of one model since a moment, and their tokens added up (the `usage` table, grouped by model)."""

    model: str | None = None
    runs: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


# Each model's runs and tokens at or after a moment (and of one session, when a second condition is added).
USAGE_BY_MODEL = (
    "SELECT model, count(*) AS runs, coalesce(sum(input_tokens), 0) AS input_tokens,"
    " coalesce(sum(output_tokens), 0) AS output_tokens, coalesce(sum(cache_read_tokens), 0) AS cache_read_tokens,"
    " coalesce(sum(cache_write_tokens), 0) AS cache_write_tokens FROM usage WHERE at >= ?"
)


class SessionStore(Protocol):
    """What a conversation needs: its session (made on first use), usage recorded per turn, `/new` to reset it."""

    async def get_session(self, session_key: str) -> SessionRecord | None: ...
    async def ensure_session(self, session_key: str, agent: str, *, principal: str | None = None) -> SessionRecord:
        """The session under this key, created with a new session id if there is none; `principal` (the key of whom
        the starting run acts for) joins its people at once, before the run can reach another session: whatever the
        run makes of its history, that person's words are in it."""

    async def touch_session(
        self,
        session_key: str,
        *,
        model: str | None = None,
        usage: Usage | None = None,
        channel: str | None = None,
        account: str | None = None,
        target: dict[str, Any] | None = None,
        principal: str | None = None,
    ) -> SessionRecord:
        """Mark the session used now; `usage` (a run's tokens) is added to its totals and, in the same transaction,
        recorded as a row of the `usage` table (with `model`); `principal` (whom the turn acted for: its key) joins
        the session's people; None leaves a field.

        KeyError if there is no such session; ValueError for negative token counts.
        """

    async def reset_session(self, session_key: str) -> SessionRecord:
        """Start the session over: a new session id, token totals zeroed; the old transcript stays on disk.

        KeyError if there is no such session.
        """

    async def count_sessions(self) -> int: ...
    async def set_overrides(self, session_key: str, agent: str, **changes: str | None) -> SessionRecord:
        """Change the session's own settings (`model`, `thinking`, `queue`); a None value clears that one. The
        session is created for `agent` if it does not exist yet."""

    async def all_overrides(self) -> dict[str, dict[str, str]]:
        """Every session that has overrides, with them (the gateway's view of `/queue` after a restart)."""

    async def usage_since(self, at: float, session_key: str | None = None) -> list[UsageRow]:
        """The runs' token rows recorded at or after `at`, oldest first; only `session_key`'s when given."""

    async def usage_by_model(self, at: float, session_key: str | None = None) -> list[ModelUsage]:
        """The runs recorded at or after `at` (only `session_key`'s when given), added up per model, in the order
        each model was first used: what /usage and status.json show, without a row per run."""

    async def list_sessions(
        self, agents: Sequence[str] | None = None, since: float | None = None, limit: int | None = None
    ) -> list[SessionRecord]:
        """The sessions, newest first (by `updated`): only `agents`' (None: every agent's), only those used at or
        after `since`, at most `limit` (None: all)."""


def new_session_id() -> str:
    """A random, URL- and file-name-safe id: 22 characters of [A-Za-z0-9_-]."""
    return secrets.token_urlsafe(16)


class SqliteSessions(Part):
    """The session index in the `sessions` table."""

    async def get_session(self, session_key: str) -> SessionRecord | None:
        return await self._call(_get_session, session_key)

    async def ensure_session(self, session_key: str, agent: str, *, principal: str | None = None) -> SessionRecord:
        return await self._call_quick(_ensure_session, session_key, agent, new_session_id, self._db.clock(), principal)

    async def touch_session(
        self,
        session_key: str,
        *,
        model: str | None = None,
        usage: Usage | None = None,
        channel: str | None = None,
        account: str | None = None,
        target: dict[str, Any] | None = None,
        principal: str | None = None,
    ) -> SessionRecord:
        touch = SessionTouch(
            session_key=session_key, model=model, usage=usage, channel=channel, account=account, target=target,
            principal=principal,
        )  # fmt: skip
        return await self._call(_touch_session, touch, self._db.clock())

    async def reset_session(self, session_key: str) -> SessionRecord:
        return await self._call(_reset_session, session_key, new_session_id(), self._db.clock())

    async def count_sessions(self) -> int:
        return await self._call(scalar, "SELECT count(*) FROM sessions")

    async def set_overrides(self, session_key: str, agent: str, **changes: str | None) -> SessionRecord:
        check_overrides(changes)
        now = self._db.clock()
        return await self._call(_set_overrides, session_key, agent, new_session_id(), now, changes)

    async def all_overrides(self) -> dict[str, dict[str, str]]:
        return await self._call(_all_overrides)

    async def usage_since(self, at: float, session_key: str | None = None) -> list[UsageRow]:
        return await self._call(_usage_since, at, session_key)

    async def usage_by_model(self, at: float, session_key: str | None = None) -> list[ModelUsage]:
        return await self._call(_usage_by_model, at, session_key)

    async def prune_usage(self, older_than_seconds: float) -> int:
        return await self._call(delete, "DELETE FROM usage WHERE at < ?", self._db.cutoff(older_than_seconds))

    async def list_sessions(
        self, agents: Sequence[str] | None = None, since: float | None = None, limit: int | None = None
    ) -> list[SessionRecord]:
        return await self._call(_list_sessions, None if agents is None else tuple(agents), since, limit)


if TYPE_CHECKING:
    from bot.store.database import Row

    _checked: type[SessionStore] = SqliteSessions


# --- on the worker thread -----------------------------------------------------------------------------------------


OVERRIDE_KEYS = ("model", "thinking", "queue")


def check_overrides(changes: Mapping[str, str | None]) -> None:
    """ValueError unless every key of `changes` is a session override (`OVERRIDE_KEYS`)."""
    unknown = set(changes) - set(OVERRIDE_KEYS)
    if unknown:
        raise ValueError(f"unknown session overrides: {sorted(unknown)}")


def merged_overrides(current: Mapping[str, str], changes: Mapping[str, str | None]) -> dict[str, str]:
    """The session's overrides after `changes`: a None value clears that one."""
    return {key: value for key, value in {**current, **changes}.items() if value is not None}


def session_record(row: Row) -> SessionRecord:
    """A `sessions` row (either backend's) as its record."""
    fields = {
        **dict(row),
        "last_target": loads(row["last_target"]),
        "overrides": loads(row["overrides"]) or {},
        "people": loads(row["people"]) or [],
    }
    return SessionRecord.model_validate(fields)


def _get_session(connection: sqlite3.Connection, session_key: str) -> SessionRecord | None:
    row = first(connection, "SELECT * FROM sessions WHERE session_key = ?", (session_key,))
    return None if row is None else session_record(row)


def _ensure_session(
    connection: sqlite3.Connection,
    session_key: str,
    agent: str,
    session_id: str | Callable[[], str],
    now: float,
    principal: str | None = None,
) -> SessionRecord:
    """The session, created (with `session_id`, or the id it makes) when there is none, with `principal` among its
    people: a read, most of the time; what it writes, it writes in one transaction (the caller's, if one is open)."""
    record = _get_session(connection, session_key)
    if record is not None and (principal is None or principal in record.people):
        return record
    with contextlib.nullcontext() if connection.in_transaction else write_transaction(connection):
        record = _get_session(connection, session_key) or _create_session(
            connection, session_key, agent, session_id, now
        )
        if principal is None or principal in record.people:
            return record
        row = connection.execute(
            f"UPDATE sessions SET people = {_WITH_PERSON} WHERE session_key = ? RETURNING *",
            (principal, principal, principal, session_key),
        ).fetchone()
    return session_record(row)


def _create_session(
    connection: sqlite3.Connection, session_key: str, agent: str, session_id: str | Callable[[], str], now: float
) -> SessionRecord:
    new_id = session_id() if callable(session_id) else session_id
    connection.execute(
        "INSERT INTO sessions (session_key, session_id, agent, created, updated) VALUES (?, ?, ?, ?, ?)"
        " ON CONFLICT (session_key) DO NOTHING",
        (session_key, new_id, agent, now, now),
    )
    record = _get_session(connection, session_key)
    assert record is not None  # nothing deletes sessions
    return record


def token_counts(usage: Usage) -> tuple[int, int, int, int]:
    """A run's tokens in the order the `sessions` and `usage` columns take them: in, out, cache read, cache write."""
    return usage.input_tokens, usage.output_tokens, usage.cache_read_tokens, usage.cache_write_tokens


def usage_counts(usage: Usage | None) -> tuple[int, int, int, int]:
    """`token_counts` of a run's usage (None: none, all zero); ValueError if any is negative."""
    counts = token_counts(usage or Usage())
    if min(counts) < 0:
        raise ValueError(f"token counts cannot be negative: {usage}")
    return counts


def _touch_session(connection: sqlite3.Connection, touch: SessionTouch, now: float) -> SessionRecord:
    with write_transaction(connection):
        row = touched(connection, touch, now)
        if row is None:
            raise KeyError(f"no session {touch.session_key!r}")
    return session_record(row)


def touched(connection: sqlite3.Connection, touch: SessionTouch, now: float) -> Row | None:
    """Write `touch` into its session's row, and its tokens into `usage` when it has any, in the transaction under
    way; the row as it is now, or None when there is no such session."""
    model, channel, account, principal = touch.model, touch.channel, touch.account, touch.principal
    tokens_in, tokens_out, cache_read, cache_write = usage_counts(touch.usage)
    target = dumps(touch.target) if touch.target is not None else None
    row = first(
        connection,
        "UPDATE sessions SET updated = ?, model = coalesce(?, model),"
        " input_tokens = input_tokens + ?, output_tokens = output_tokens + ?,"
        " cache_read_tokens = cache_read_tokens + ?, cache_write_tokens = cache_write_tokens + ?,"
        " last_channel = coalesce(?, last_channel), last_account = coalesce(?, last_account),"
        " last_target = coalesce(?, last_target),"
        f" people = {_WITH_PERSON}"
        " WHERE session_key = ? RETURNING *",
        (
            now, model, tokens_in, tokens_out, cache_read, cache_write, channel, account, target,
            principal, principal, principal, touch.session_key,
        ),
    )  # fmt: skip
    if row is not None and touch.usage is not None:
        connection.execute(
            "INSERT INTO usage (at, session_key, agent, model, input_tokens, output_tokens, cache_read_tokens,"
            " cache_write_tokens) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (now, touch.session_key, row["agent"], row["model"], tokens_in, tokens_out, cache_read, cache_write),
        )
    return row


# The session's people with the turn's principal added once (three times the same parameter: none leaves them).
_WITH_PERSON = (
    "CASE WHEN ? IS NULL OR EXISTS (SELECT 1 FROM json_each(coalesce(people, '[]')) WHERE value = ?) THEN people"
    " ELSE json_insert(coalesce(people, '[]'), '$[#]', ?) END"
)


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
    return session_record(row)


def _set_overrides(
    connection: sqlite3.Connection,
    session_key: str,
    agent: str,
    session_id: str,
    now: float,
    changes: dict[str, str | None],
) -> SessionRecord:
    with write_transaction(connection):
        current = _ensure_session(connection, session_key, agent, session_id, now).overrides
        merged = merged_overrides(current, changes)
        row = first(
            connection,
            "UPDATE sessions SET overrides = ? WHERE session_key = ? RETURNING *",
            (dumps(merged) if merged else None, session_key),
        )
    assert row is not None  # made above, and nothing deletes sessions
    return session_record(row)


def _all_overrides(connection: sqlite3.Connection) -> dict[str, dict[str, str]]:
    rows = connection.execute("SELECT session_key, overrides FROM sessions WHERE overrides IS NOT NULL").fetchall()
    return {row["session_key"]: loads(row["overrides"]) for row in rows}


def _usage_since(connection: sqlite3.Connection, at: float, session_key: str | None) -> list[UsageRow]:
    sql = "SELECT * FROM usage WHERE at >= ?" + (" AND session_key = ?" if session_key is not None else "")
    params: tuple[object, ...] = (at, session_key) if session_key is not None else (at,)
    rows = connection.execute(sql + " ORDER BY id", params).fetchall()
    return [UsageRow.model_validate(dict(row)) for row in rows]


def _usage_by_model(connection: sqlite3.Connection, at: float, session_key: str | None) -> list[ModelUsage]:
    sql = USAGE_BY_MODEL + (" AND session_key = ?" if session_key is not None else "")
    params: tuple[object, ...] = (at, session_key) if session_key is not None else (at,)
    rows = connection.execute(sql + " GROUP BY model ORDER BY min(id)", params).fetchall()
    return [ModelUsage.model_validate(dict(row)) for row in rows]


def _list_sessions(
    connection: sqlite3.Connection, agents: tuple[str, ...] | None, since: float | None, limit: int | None
) -> list[SessionRecord]:
    where: list[str] = []
    params: list[object] = []
    if agents is not None:
        where.append(f"agent IN ({', '.join('?' * len(agents))})" if agents else "0")
        params += agents
    if since is not None:
        where.append("updated >= ?")
        params.append(since)
    sql = "SELECT * FROM sessions" + (" WHERE " + " AND ".join(where) if where else "")
    sql += " ORDER BY updated DESC, session_key"
    if limit is not None:
        sql += " LIMIT ?"
        params.append(limit)
    return [session_record(row) for row in connection.execute(sql, tuple(params)).fetchall()]
