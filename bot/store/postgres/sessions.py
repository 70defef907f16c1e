"""The session index on PostgreSQL: `PgSessions`, the same methods and records as `SqliteSessions`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from agent.messages import Usage
from bot.store.database import dumps, loads
from bot.store.postgres.database import PgPart, PgTx
from bot.store.sessions import (
    USAGE_BY_MODEL,
    ModelUsage,
    SessionRecord,
    SessionStore,
    SessionTouch,
    UsageRow,
    check_overrides,
    merged_overrides,
    new_session_id,
    session_record,
    usage_counts,
)

__all__ = ["PgSessions", "touched"]

# The session's people with the turn's principal added once (three times the same parameter: none leaves them).
_WITH_PERSON = (
    "CASE WHEN %s::text IS NULL OR coalesce(people, '[]')::jsonb ? %s::text THEN people"
    " ELSE (coalesce(people, '[]')::jsonb || to_jsonb(%s::text))::text END"
)

_ENSURE = (
    "INSERT INTO sessions (session_key, session_id, agent, created, updated) VALUES (%s, %s, %s, %s, %s)"
    " ON CONFLICT (session_key) DO NOTHING"
)


class PgSessions(PgPart):
    """The session index in the `sessions` table (and each run's tokens in `usage`)."""

    async def get_session(self, session_key: str) -> SessionRecord | None:
        row = await self._db.fetchone("SELECT * FROM sessions WHERE session_key = %s", session_key)
        return None if row is None else session_record(row)

    async def ensure_session(self, session_key: str, agent: str, *, principal: str | None = None) -> SessionRecord:
        now = self._db.clock()
        async with self._db.transaction() as tx:
            return await _ensure_session(tx, session_key, agent, new_session_id, now, principal)

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
        async with self._db.transaction() as tx:
            row = await touched(tx, touch, self._db.clock())
            if row is None:
                raise KeyError(f"no session {session_key!r}")
        return session_record(row)

    async def reset_session(self, session_key: str) -> SessionRecord:
        now = self._db.clock()
        row = await self._db.fetchone(
            "UPDATE sessions SET session_id = %s, created = %s, updated = %s, input_tokens = 0, output_tokens = 0,"
            " cache_read_tokens = 0, cache_write_tokens = 0"
            " WHERE session_key = %s RETURNING *",
            new_session_id(),
            now,
            now,
            session_key,
        )
        if row is None:
            raise KeyError(f"no session {session_key!r}")
        return session_record(row)

    async def count_sessions(self) -> int:
        row = await self._db.fetchone("SELECT count(*) AS n FROM sessions")
        assert row is not None
        return int(row["n"])

    async def set_overrides(self, session_key: str, agent: str, **changes: str | None) -> SessionRecord:
        check_overrides(changes)
        now = self._db.clock()
        async with self._db.transaction() as tx:
            await tx.execute(_ENSURE, session_key, new_session_id(), agent, now, now)
            # The row lock keeps two processes' changes from overwriting each other's merge.
            current = await tx.fetchone("SELECT overrides FROM sessions WHERE session_key = %s FOR UPDATE", session_key)
            assert current is not None  # made above, and nothing deletes sessions
            kept = merged_overrides(loads(current["overrides"]) or {}, changes)
            row = await tx.fetchone(
                "UPDATE sessions SET overrides = %s WHERE session_key = %s RETURNING *",
                dumps(kept) if kept else None,
                session_key,
            )
        assert row is not None
        return session_record(row)

    async def all_overrides(self) -> dict[str, dict[str, str]]:
        rows = await self._db.fetch("SELECT session_key, overrides FROM sessions WHERE overrides IS NOT NULL")
        return {row["session_key"]: loads(row["overrides"]) for row in rows}

    async def usage_since(self, at: float, session_key: str | None = None) -> list[UsageRow]:
        if session_key is None:
            rows = await self._db.fetch("SELECT * FROM usage WHERE at >= %s ORDER BY id", at)
        else:
            rows = await self._db.fetch(
                "SELECT * FROM usage WHERE at >= %s AND session_key = %s ORDER BY id", at, session_key
            )
        return [UsageRow.model_validate(row) for row in rows]

    async def usage_by_model(self, at: float, session_key: str | None = None) -> list[ModelUsage]:
        sql = USAGE_BY_MODEL.replace("?", "%s") + (" AND session_key = %s" if session_key is not None else "")
        params = (at, session_key) if session_key is not None else (at,)
        rows = await self._db.fetch(sql + " GROUP BY model ORDER BY min(id)", *params)
        return [ModelUsage.model_validate(row) for row in rows]

    async def prune_usage(self, older_than_seconds: float) -> int:
        return await self._db.execute("DELETE FROM usage WHERE at < %s", self._db.cutoff(older_than_seconds))

    async def list_sessions(
        self, agents: Sequence[str] | None = None, since: float | None = None, limit: int | None = None
    ) -> list[SessionRecord]:
        where: list[str] = []
        params: list[object] = []
        if agents is not None:
            where.append("agent = ANY(%s::text[])")
            params.append(list(agents))
        if since is not None:
            where.append("updated >= %s")
            params.append(since)
        sql = "SELECT * FROM sessions" + (" WHERE " + " AND ".join(where) if where else "")
        sql += ' ORDER BY updated DESC, session_key COLLATE "C"'  # SQLite's order: by code point
        if limit is not None:
            sql += " LIMIT %s"
            params.append(limit)
        return [session_record(row) for row in await self._db.fetch(sql, *params)]


if TYPE_CHECKING:
    _checked: type[SessionStore] = PgSessions


async def _ensure_session(
    tx: PgTx,
    session_key: str,
    agent: str,
    session_id: str | Callable[[], str],
    now: float,
    principal: str | None = None,
) -> SessionRecord:
    """The session, created (with `session_id`, or the id it makes) when there is none, with `principal` among its
    people: a read, most of the time."""
    row = await tx.fetchone("SELECT * FROM sessions WHERE session_key = %s", session_key)
    if row is None:
        await tx.execute(_ENSURE, session_key, session_id() if callable(session_id) else session_id, agent, now, now)
        row = await tx.fetchone("SELECT * FROM sessions WHERE session_key = %s", session_key)
        assert row is not None  # nothing deletes sessions
    record = session_record(row)
    if principal is None or principal in record.people:
        return record
    row = await tx.fetchone(
        f"UPDATE sessions SET people = {_WITH_PERSON} WHERE session_key = %s RETURNING *",
        principal, principal, principal, session_key,
    )  # fmt: skip
    assert row is not None
    return session_record(row)


async def touched(tx: PgTx, touch: SessionTouch, now: float) -> dict[str, Any] | None:
    """bot.store.sessions.touched on PostgreSQL, in the transaction `tx`."""
    model, channel, account, principal = touch.model, touch.channel, touch.account, touch.principal
    tokens_in, tokens_out, cache_read, cache_write = usage_counts(touch.usage)
    target = dumps(touch.target) if touch.target is not None else None
    row = await tx.fetchone(
        "UPDATE sessions SET updated = %s, model = coalesce(%s, model),"
        " input_tokens = input_tokens + %s, output_tokens = output_tokens + %s,"
        " cache_read_tokens = cache_read_tokens + %s, cache_write_tokens = cache_write_tokens + %s,"
        " last_channel = coalesce(%s, last_channel), last_account = coalesce(%s, last_account),"
        " last_target = coalesce(%s, last_target),"
        f" people = {_WITH_PERSON} WHERE session_key = %s RETURNING *",
        now, model, tokens_in, tokens_out, cache_read, cache_write, channel, account, target,
        principal, principal, principal, touch.session_key,
    )  # fmt: skip
    if row is not None and touch.usage is not None:
        await tx.execute(
            "INSERT INTO usage (at, session_key, agent, model, input_tokens, output_tokens,"
            " cache_read_tokens, cache_write_tokens) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
            now, touch.session_key, row["agent"], row["model"], tokens_in, tokens_out, cache_read, cache_write,
        )  # fmt: skip
    return row
