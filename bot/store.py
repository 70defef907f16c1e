"""The state store: session index, inbound journal and outbox behind a small async interface; SQLite by default."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import os
import queue
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Concatenate, Literal, ParamSpec, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "DEDUPE_SECONDS",
    "ApprovalDecision",
    "ApprovalRecord",
    "ApprovalStatus",
    "Clock",
    "InboundRecord",
    "InboundStatus",
    "OutboxEntry",
    "OutboxRecord",
    "OutboxStatus",
    "PreviewRecord",
    "SessionRecord",
    "SqliteStore",
    "Store",
    "StoreError",
    "new_session_id",
]

Clock = Callable[[], float]
InboundStatus = Literal["pending", "running", "done", "failed"]
OutboxStatus = Literal["pending", "sent", "dead"]

DB_FILE = "state.db"
KEY_FILE = "decision.key"  # beside the database, readable by the bot's user only; no command can see it
DEDUPE_SECONDS = 24 * 60 * 60.0  # platforms redeliver within minutes; a day of dedupe keys is ample
BUSY_TIMEOUT_MS = 5_000

_P = ParamSpec("_P")
_T = TypeVar("_T")


class StoreError(RuntimeError):
    """The store cannot be used: closed, or a database this version does not understand."""


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True)


class SessionRecord(_Record):
    """One row of the session index. `session_id` names the transcript; it changes on reset."""

    session_key: str
    session_id: str
    agent: str
    created: float
    updated: float
    model: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    last_channel: str | None = None
    last_account: str | None = None
    last_target: dict[str, Any] | None = None


class InboundRecord(_Record):
    """A message received from a platform, journaled before any work is done for it."""

    id: int
    channel: str
    account: str
    chat: str
    message_id: str
    payload: dict[str, Any]
    status: InboundStatus
    error: str | None = None
    session_key: str | None = None
    received: float
    updated: float


class OutboxEntry(_Record):
    """Something to send, before it is recorded."""

    inbound_id: int | None
    channel: str
    account: str
    target: dict[str, Any]
    payload: dict[str, Any]
    kind: str = "send"


class OutboxRecord(_Record):
    """Something to send, recorded before the send. `attempts` counts failed sends."""

    id: int
    inbound_id: int | None
    channel: str
    account: str
    target: dict[str, Any]
    payload: dict[str, Any]
    kind: str
    status: OutboxStatus
    attempts: int = 0
    retry_at: float
    error: str | None = None
    platform_message_id: str | None = None
    created: float
    updated: float


class PreviewRecord(_Record):
    """A streamed answer still being written: the platform message showing it, kept so that a turn cut short by
    a restart finishes its answer in that same message instead of leaving it half written beside a new one."""

    inbound_id: int
    channel: str
    account: str
    target: dict[str, Any]
    message_id: str
    created: float


class PairingRecord(_Record):
    """A stranger's request to talk to the bot, approved by an owner with its one-time code."""

    channel: str
    account: str
    code: str
    sender_id: str
    sender_name: str | None = None
    created: float
    expires: float
    status: Literal["pending", "approved"]


ApprovalStatus = Literal["pending", "allowed", "denied", "expired"]
ApprovalDecision = Literal["allow-once", "allow-always", "deny"]


class ApprovalRecord(_Record):
    """A command waiting for a person's decision; `messages` are where it was shown (to edit them later)."""

    id: str
    agent: str
    session_key: str
    command: str
    cwd: str
    requester: str | None = None
    approvers: list[str]
    offer_always: bool = True
    created: float
    expires: float
    status: ApprovalStatus
    decided_by: str | None = None
    decision: ApprovalDecision | None = None
    messages: list[dict[str, Any]] = Field(default_factory=list)


PAIRING_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O or 1/I: codes are read aloud and typed


class Store(Protocol):
    """What the gateway needs from its state; every payload is a JSON-able dict, so any backend can hold it."""

    # Session index.
    async def get_session(self, session_key: str) -> SessionRecord | None: ...
    async def ensure_session(self, session_key: str, agent: str) -> SessionRecord: ...
    async def touch_session(
        self,
        session_key: str,
        *,
        model: str | None = None,
        usage: tuple[int, int] | None = None,
        channel: str | None = None,
        account: str | None = None,
        target: dict[str, Any] | None = None,
    ) -> SessionRecord: ...
    async def reset_session(self, session_key: str) -> SessionRecord: ...
    async def count_sessions(self) -> int: ...

    # Inbound journal.
    async def record_inbound(
        self, channel: str, account: str, chat: str, message_id: str, payload: dict[str, Any]
    ) -> InboundRecord | None: ...
    async def mark_inbound(self, inbound_id: int, status: InboundStatus, error: str | None = None) -> None: ...
    async def finish_inbound(
        self,
        inbound_ids: Sequence[int],
        status: Literal["done", "failed"],
        error: str | None = None,
        *,
        session_key: str | None = None,
        replies: Sequence[OutboxEntry] = (),
    ) -> list[OutboxRecord]: ...
    async def unfinished_inbound(self) -> list[InboundRecord]: ...
    async def prune_inbound(self, older_than_seconds: float = DEDUPE_SECONDS) -> int: ...

    # Outbox.
    async def enqueue_outbox(
        self,
        *,
        inbound_id: int | None,
        channel: str,
        account: str,
        target: dict[str, Any],
        payload: dict[str, Any],
        kind: str = "send",
    ) -> OutboxRecord: ...
    async def mark_sent(self, outbox_id: int, platform_message_id: str | None) -> None: ...
    async def mark_send_failed(self, outbox_id: int, error: str, retry_at: float) -> None: ...
    async def mark_dead(self, outbox_id: int, error: str) -> None: ...
    async def due_outbox(self, now: float | None = None) -> list[OutboxRecord]: ...
    async def unsent_outbox(self) -> list[OutboxRecord]: ...
    async def outbox_for_inbound(self, inbound_id: int) -> list[OutboxRecord]: ...
    async def inbound_has_replies(self, inbound_id: int) -> bool: ...
    async def prune_outbox(self, older_than_seconds: float = DEDUPE_SECONDS) -> int: ...

    # Streamed answers not yet complete.
    async def set_preview(
        self, inbound_id: int, channel: str, account: str, target: dict[str, Any], message_id: str
    ) -> None: ...
    async def clear_previews(self, inbound_ids: list[int]) -> None: ...
    async def previews(self) -> list[PreviewRecord]: ...

    async def request_pairing(
        self, channel: str, account: str, sender_id: str, sender_name: str | None, *, ttl: float, max_pending: int
    ) -> PairingRecord: ...
    async def approve_pairing(self, channel: str, code: str, approved_by: str) -> PairingRecord | None: ...
    async def is_allowed_sender(self, channel: str, account: str, sender_id: str) -> bool: ...
    async def pending_pairings(self, channel: str | None = None) -> list[PairingRecord]: ...

    # Exec approvals and the commands allowed for good.
    async def create_approval(self, record: ApprovalRecord) -> None: ...
    async def get_approval(self, approval_id: str) -> ApprovalRecord | None: ...
    async def find_approvals(self, id_prefix: str, *, pending_only: bool = True) -> list[ApprovalRecord]: ...
    async def pending_approvals(self) -> list[ApprovalRecord]: ...
    async def add_approval_message(self, approval_id: str, message: dict[str, Any]) -> None: ...
    async def is_approval_message(
        self, channel: str, account: str, peer_kind: str, peer_id: str, message_id: str
    ) -> bool: ...
    async def decide_approval(
        self, approval_id: str, status: ApprovalStatus, decision: ApprovalDecision | None, decided_by: str | None
    ) -> ApprovalRecord | None: ...
    async def prune_approvals(self, older_than_seconds: float) -> int: ...
    async def allowed_commands(self, agent: str) -> list[tuple[str, tuple[str, ...], str | None]]: ...
    async def allow_command(
        self, agent: str, executable: str, args: tuple[str, ...], approved_by: str | None, sha256: str | None = None
    ) -> None: ...

    async def close(self) -> None: ...


def new_session_id() -> str:
    """A random, URL- and file-name-safe id: 22 characters of [A-Za-z0-9_-]."""
    return secrets.token_urlsafe(16)


# Each migration is a list of statements, applied in one transaction; PRAGMA user_version counts them.
_MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """CREATE TABLE sessions (
            session_key TEXT PRIMARY KEY,
            session_id TEXT NOT NULL UNIQUE,
            agent TEXT NOT NULL,
            created REAL NOT NULL,
            updated REAL NOT NULL,
            model TEXT,
            input_tokens INTEGER NOT NULL DEFAULT 0,
            output_tokens INTEGER NOT NULL DEFAULT 0,
            last_channel TEXT,
            last_account TEXT,
            last_target TEXT
        ) WITHOUT ROWID""",
        # AUTOINCREMENT: ids are never reused after pruning, so an old outbox row cannot point at a new message.
        """CREATE TABLE inbound (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            channel TEXT NOT NULL,
            account TEXT NOT NULL,
            chat TEXT NOT NULL,
            message_id TEXT NOT NULL,
            payload TEXT NOT NULL,
            status TEXT NOT NULL CHECK (status IN ('pending', 'running', 'done', 'failed')),
            error TEXT,
            session_key TEXT,
            received REAL NOT NULL,
            updated REAL NOT NULL,
            UNIQUE (channel, account, chat, message_id)
        )""",
        "CREATE INDEX inbound_unfinished ON inbound (id) WHERE status IN ('pending', 'running')",
        "CREATE INDEX inbound_finished ON inbound (updated) WHERE status IN ('done', 'failed')",
        """CREATE TABLE outbox (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            inbound_id INTEGER REFERENCES inbound (id) ON DELETE SET NULL,
            channel TEXT NOT NULL,
            account TEXT NOT NULL,
            target TEXT NOT NULL,
            payload TEXT NOT NULL,
            kind TEXT NOT NULL,
            status TEXT NOT NULL CHECK (status IN ('pending', 'sent', 'dead')),
            attempts INTEGER NOT NULL DEFAULT 0,
            retry_at REAL NOT NULL,
            error TEXT,
            platform_message_id TEXT,
            created REAL NOT NULL,
            updated REAL NOT NULL
        )""",
        "CREATE INDEX outbox_pending ON outbox (id) WHERE status = 'pending'",
        "CREATE INDEX outbox_finished ON outbox (updated) WHERE status IN ('sent', 'dead')",
        "CREATE INDEX outbox_inbound ON outbox (inbound_id)",
    ),
    (
        """CREATE TABLE pairing (
            channel TEXT NOT NULL,
            account TEXT NOT NULL,
            code TEXT NOT NULL,
            sender_id TEXT NOT NULL,
            sender_name TEXT,
            created REAL NOT NULL,
            expires REAL NOT NULL,
            status TEXT NOT NULL CHECK (status IN ('pending', 'approved')),
            PRIMARY KEY (channel, account, code)
        ) WITHOUT ROWID""",
        """CREATE TABLE allowed_senders (
            channel TEXT NOT NULL,
            account TEXT NOT NULL,
            sender_id TEXT NOT NULL,
            approved_by TEXT,
            created REAL NOT NULL,
            PRIMARY KEY (channel, account, sender_id)
        ) WITHOUT ROWID""",
    ),
    (
        """CREATE TABLE approvals (
            id TEXT PRIMARY KEY,
            agent TEXT NOT NULL,
            session_key TEXT NOT NULL,
            command TEXT NOT NULL,
            cwd TEXT NOT NULL,
            requester TEXT,
            approvers TEXT NOT NULL,
            offer_always INTEGER NOT NULL,
            created REAL NOT NULL,
            expires REAL NOT NULL,
            status TEXT NOT NULL CHECK (status IN ('pending', 'allowed', 'denied', 'expired')),
            decided_by TEXT,
            decision TEXT CHECK (decision IN ('allow-once', 'allow-always', 'deny')),
            messages TEXT NOT NULL DEFAULT '[]'
        ) WITHOUT ROWID""",
        "CREATE INDEX approvals_pending ON approvals (created) WHERE status = 'pending'",
        """CREATE TABLE exec_allowed (
            agent TEXT NOT NULL,
            executable TEXT NOT NULL,
            args TEXT NOT NULL,
            approved_by TEXT,
            created REAL NOT NULL,
            PRIMARY KEY (agent, executable, args)
        ) WITHOUT ROWID""",
    ),
    (
        """CREATE TABLE previews (
            inbound_id INTEGER PRIMARY KEY REFERENCES inbound (id) ON DELETE CASCADE,
            channel TEXT NOT NULL,
            account TEXT NOT NULL,
            target TEXT NOT NULL,
            message_id TEXT NOT NULL,
            created REAL NOT NULL
        )""",
    ),
    # "Allow always" on a script (`python3 build.py`) pins the script's content: NULL for any other command.
    ("ALTER TABLE exec_allowed ADD COLUMN sha256 TEXT",),
    # A decision carries a seal made with the state directory's key: a row changed behind the store's back has none.
    ("ALTER TABLE approvals ADD COLUMN seal TEXT",),
)
SCHEMA_VERSION = len(_MIGRATIONS)


class SqliteStore:
    """The embedded store: `state.db` in WAL mode, used from one worker thread that owns the connection.

    Every call is handed to that thread, so the event loop never waits on SQLite and calls run one at a
    time, in the order they were made. A call whose caller is cancelled may still complete.
    """

    def __init__(self, path: Path, worker: _Worker, connection: sqlite3.Connection, clock: Clock, key: bytes = b""):
        self.path = path
        self._key = key  # seals approval decisions
        self._worker = worker
        self._connection: sqlite3.Connection | None = connection
        self._clock = clock

    @classmethod
    async def open(cls, state_dir: Path, *, clock: Clock = time.time) -> SqliteStore:
        """Open (creating or migrating) `state_dir/state.db`."""
        path = state_dir / DB_FILE
        worker = _Worker()
        try:
            connection = await worker.call(partial(_connect, path))
            key = await worker.call(partial(_decision_key, state_dir / KEY_FILE))
        except BaseException:
            worker.stop()
            raise
        return cls(path, worker, connection, clock, key)

    async def close(self) -> None:
        """Finish the calls already made, then close the database. Closing twice is fine."""
        if self._connection is None:
            return
        connection, self._connection = self._connection, None
        try:
            await self._worker.call(partial(_close, connection))
        finally:
            self._worker.stop()

    async def __aenter__(self) -> SqliteStore:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        await self.close()

    async def _call(
        self, function: Callable[Concatenate[sqlite3.Connection, _P], _T], *args: _P.args, **kwargs: _P.kwargs
    ) -> _T:
        if self._connection is None:
            raise StoreError("the store is closed")
        return await self._worker.call(partial(function, self._connection, *args, **kwargs))

    # --- session index ---------------------------------------------------------------------------------------

    async def get_session(self, session_key: str) -> SessionRecord | None:
        return await self._call(_get_session, session_key)

    async def ensure_session(self, session_key: str, agent: str) -> SessionRecord:
        """The session under this key, created with a new session id if there is none."""
        return await self._call(_ensure_session, session_key, agent, new_session_id(), self._clock())

    async def touch_session(
        self,
        session_key: str,
        *,
        model: str | None = None,
        usage: tuple[int, int] | None = None,
        channel: str | None = None,
        account: str | None = None,
        target: dict[str, Any] | None = None,
    ) -> SessionRecord:
        """Mark the session used now; `usage` (input, output tokens) is added to its totals, None leaves a field.

        KeyError if there is no such session.
        """
        tokens_in, tokens_out = usage or (0, 0)
        if tokens_in < 0 or tokens_out < 0:
            raise ValueError(f"token counts cannot be negative: {usage}")
        values = (model, tokens_in, tokens_out, channel, account, _dumps(target) if target is not None else None)
        return await self._call(_touch_session, session_key, self._clock(), *values)

    async def reset_session(self, session_key: str) -> SessionRecord:
        """Start the session over: a new session id, token totals zeroed; the old transcript stays on disk.

        KeyError if there is no such session.
        """
        return await self._call(_reset_session, session_key, new_session_id(), self._clock())

    async def count_sessions(self) -> int:
        return await self._call(_scalar, "SELECT count(*) FROM sessions")

    # --- inbound journal -------------------------------------------------------------------------------------

    async def record_inbound(
        self, channel: str, account: str, chat: str, message_id: str, payload: dict[str, Any]
    ) -> InboundRecord | None:
        """Journal a received message as pending; None if this message was recorded before (a redelivery)."""
        return await self._call(_record_inbound, channel, account, chat, message_id, _dumps(payload), self._clock())

    async def mark_inbound(self, inbound_id: int, status: InboundStatus, error: str | None = None) -> None:
        """Move a message to `status`. Done and failed are final: ValueError after them; KeyError if unknown."""
        if status not in ("pending", "running", "done", "failed"):
            raise ValueError(f"not an inbound status: {status!r}")
        await self._call(_mark_inbound, inbound_id, status, error, self._clock())

    async def finish_inbound(
        self,
        inbound_ids: Sequence[int],
        status: Literal["done", "failed"],
        error: str | None = None,
        *,
        session_key: str | None = None,
        replies: Sequence[OutboxEntry] = (),
    ) -> list[OutboxRecord]:
        """Record `replies` in the outbox and move the messages to their final `status` (noting the session that
        answered them, and forgetting their streamed previews), in one transaction: after a crash all of it
        happened or none did. KeyError for an unknown message, ValueError for one already finished; nothing is
        written then."""
        rows = [_outbox_row(reply) for reply in replies]
        return await self._call(_finish_inbound, list(inbound_ids), status, error, session_key, rows, self._clock())

    async def unfinished_inbound(self) -> list[InboundRecord]:
        """Pending and running messages in arrival order: after a crash, the work to run again."""
        return await self._call(_inbound_rows, "WHERE status IN ('pending', 'running') ORDER BY id", ())

    async def prune_inbound(self, older_than_seconds: float = DEDUPE_SECONDS) -> int:
        """Delete done and failed messages finished more than this long ago; returns how many.

        Their keys stop deduplicating redeliveries, hence the default of a day.
        """
        cutoff = self._cutoff(older_than_seconds)
        return await self._call(
            _delete, "DELETE FROM inbound WHERE status IN ('done', 'failed') AND updated < ?", cutoff
        )

    # --- outbox ----------------------------------------------------------------------------------------------

    async def enqueue_outbox(
        self,
        *,
        inbound_id: int | None,
        channel: str,
        account: str,
        target: dict[str, Any],
        payload: dict[str, Any],
        kind: str = "send",
    ) -> OutboxRecord:
        """Record something to send, due now; do this before sending. KeyError if `inbound_id` is unknown."""
        entry = OutboxEntry(
            inbound_id=inbound_id, channel=channel, account=account, target=target, payload=payload, kind=kind
        )
        return await self._call(_enqueue_outbox, _outbox_row(entry), self._clock())

    async def mark_sent(self, outbox_id: int, platform_message_id: str | None) -> None:
        """The platform accepted it. Only a pending entry can be marked: ValueError otherwise; KeyError if unknown."""
        sql = "UPDATE outbox SET status = 'sent', platform_message_id = ?, updated = ?"
        await self._call(_finish_outbox, outbox_id, sql, (platform_message_id, self._clock()))

    async def mark_send_failed(self, outbox_id: int, error: str, retry_at: float) -> None:
        """A send failed and will be tried again at `retry_at`; counts an attempt."""
        sql = "UPDATE outbox SET attempts = attempts + 1, error = ?, retry_at = ?, updated = ?"
        await self._call(_finish_outbox, outbox_id, sql, (error, retry_at, self._clock()))

    async def mark_dead(self, outbox_id: int, error: str) -> None:
        """Give up on it: it is never due again."""
        sql = "UPDATE outbox SET status = 'dead', error = ?, updated = ?"
        await self._call(_finish_outbox, outbox_id, sql, (error, self._clock()))

    async def due_outbox(self, now: float | None = None) -> list[OutboxRecord]:
        """Pending entries whose retry time has come (`now` defaults to the clock), in creation order."""
        at = self._clock() if now is None else now
        return await self._call(_outbox_rows, "WHERE status = 'pending' AND retry_at <= ? ORDER BY id", (at,))

    async def unsent_outbox(self) -> list[OutboxRecord]:
        """Every pending entry, due or not, in creation order: what to send again on start."""
        return await self._call(_outbox_rows, "WHERE status = 'pending' ORDER BY id", ())

    async def outbox_for_inbound(self, inbound_id: int) -> list[OutboxRecord]:
        """Everything recorded in reply to one message, in creation order, whatever its status."""
        return await self._call(_outbox_rows, "WHERE inbound_id = ? ORDER BY id", (inbound_id,))

    async def inbound_has_replies(self, inbound_id: int) -> bool:
        """Whether any reply to the message was recorded: after a restart, do not answer it twice."""
        sql = "SELECT EXISTS (SELECT 1 FROM outbox WHERE inbound_id = ?)"
        return bool(await self._call(_scalar, sql, inbound_id))

    async def prune_outbox(self, older_than_seconds: float = DEDUPE_SECONDS) -> int:
        """Delete sent and dead entries finished more than this long ago; returns how many."""
        cutoff = self._cutoff(older_than_seconds)
        sql = "DELETE FROM outbox WHERE status IN ('sent', 'dead') AND updated < ?"
        return await self._call(_delete, sql, cutoff)

    # --- streamed answers still being written -----------------------------------------------------------------

    async def set_preview(
        self, inbound_id: int, channel: str, account: str, target: dict[str, Any], message_id: str
    ) -> None:
        """Remember the message a turn is streaming its answer into (one per message answered)."""
        sql = "INSERT OR REPLACE INTO previews VALUES (?, ?, ?, ?, ?, ?)"
        await self._call(_execute, sql, (inbound_id, channel, account, _dumps(target), message_id, self._clock()))

    async def clear_previews(self, inbound_ids: list[int]) -> None:
        """The answers to these messages are complete (or were taken back): forget their streamed messages."""
        if inbound_ids:
            await self._call(_delete_previews, inbound_ids)

    async def previews(self) -> list[PreviewRecord]:
        """Every streamed message whose answer was not completed, oldest first."""
        return await self._call(_preview_rows)

    # --- pairing: strangers who may talk to the bot once an owner approves ------------------------------------

    async def request_pairing(
        self, channel: str, account: str, sender_id: str, sender_name: str | None, *, ttl: float, max_pending: int
    ) -> PairingRecord:
        """The sender's pending code (a new one if it has none). Each sender holds at most one; when `max_pending`
        others are waiting, the oldest of them is dropped to make room, so strangers cannot use the slots up."""
        return await self._call(
            _request_pairing, channel, account, sender_id, sender_name, self._clock(), ttl, max_pending
        )

    async def approve_pairing(self, channel: str, code: str, approved_by: str) -> PairingRecord | None:
        """Approve the pending, unexpired request with this code (compared in constant time); None if none."""
        return await self._call(_approve_pairing, channel, code.strip().upper(), approved_by, self._clock())

    async def is_allowed_sender(self, channel: str, account: str, sender_id: str) -> bool:
        row = await self._call(
            _first,
            "SELECT 1 FROM allowed_senders WHERE channel = ? AND account = ? AND sender_id = ?",
            (channel, account, sender_id),
        )
        return row is not None

    async def pending_pairings(self, channel: str | None = None) -> list[PairingRecord]:
        rows = await self._call(_pending_pairings, channel, self._clock())
        return [PairingRecord(**dict(row)) for row in rows]

    # --- exec approvals -------------------------------------------------------------------------------------

    async def create_approval(self, record: ApprovalRecord) -> None:
        """Record a pending request (before its message goes out)."""
        row = record.model_dump()
        row.update(approvers=_dumps_list(record.approvers), messages=_dumps_list(record.messages))
        row["offer_always"] = int(record.offer_always)
        columns = ", ".join(row)
        sql = f"INSERT INTO approvals ({columns}) VALUES ({', '.join('?' for _ in row)})"
        await self._call(_execute, sql, tuple(row.values()))

    async def get_approval(self, approval_id: str) -> ApprovalRecord | None:
        rows = await self._call(_approval_rows, self._key, "WHERE id = ?", (approval_id,))
        return rows[0] if rows else None

    async def find_approvals(self, id_prefix: str, *, pending_only: bool = True) -> list[ApprovalRecord]:
        """Requests whose id starts with `id_prefix` (for `/approve <prefix>`), newest first."""
        where = "WHERE substr(id, 1, length(?)) = ?" + (" AND status = 'pending'" if pending_only else "")
        return await self._call(_approval_rows, self._key, where + " ORDER BY created DESC", (id_prefix, id_prefix))

    async def pending_approvals(self) -> list[ApprovalRecord]:
        return await self._call(_approval_rows, self._key, "WHERE status = 'pending' ORDER BY created", ())

    async def add_approval_message(self, approval_id: str, message: dict[str, Any]) -> None:
        """Remember one place the request was shown, so that its outcome can be written there."""
        sql = "UPDATE approvals SET messages = json_insert(messages, '$[#]', json(?)) WHERE id = ?"
        await self._call(_execute, sql, (_dumps(message), approval_id))

    async def is_approval_message(
        self, channel: str, account: str, peer_kind: str, peer_id: str, message_id: str
    ) -> bool:
        """Whether any request, pending or decided, was shown as this message (its card)."""
        sql = (
            "SELECT EXISTS (SELECT 1 FROM approvals, json_each(approvals.messages) AS shown"
            " WHERE json_extract(shown.value, '$.message_id') = ?"
            " AND json_extract(shown.value, '$.target.channel') = ?"
            " AND json_extract(shown.value, '$.target.account') = ?"
            " AND json_extract(shown.value, '$.target.peer.kind') = ?"
            " AND json_extract(shown.value, '$.target.peer.id') = ?)"
        )
        return bool(await self._call(_scalar, sql, message_id, channel, account, peer_kind, peer_id))

    async def decide_approval(
        self, approval_id: str, status: ApprovalStatus, decision: ApprovalDecision | None, decided_by: str | None
    ) -> ApprovalRecord | None:
        """Settle a pending request; None when it is unknown or no longer pending (a request is decided once)."""
        return await self._call(_decide_approval, self._key, approval_id, status, decision, decided_by)

    async def prune_approvals(self, older_than_seconds: float) -> int:
        """Delete settled requests made more than this long ago (never a pending one); returns how many."""
        cutoff = self._cutoff(older_than_seconds)
        return await self._call(_delete, "DELETE FROM approvals WHERE status != 'pending' AND created < ?", cutoff)

    async def allowed_commands(self, agent: str) -> list[tuple[str, tuple[str, ...], str | None]]:
        """The exact commands "Allow always" stored for an agent: (resolved executable, arguments, script SHA-256)."""
        return await self._call(_allowed_commands, agent)

    async def allow_command(
        self, agent: str, executable: str, args: tuple[str, ...], approved_by: str | None, sha256: str | None = None
    ) -> None:
        """Store an exact command; approving it again (a rewritten script) replaces the recorded SHA-256."""
        sql = (
            "INSERT INTO exec_allowed (agent, executable, args, approved_by, created, sha256) VALUES (?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (agent, executable, args) DO UPDATE"
            " SET sha256 = excluded.sha256, approved_by = excluded.approved_by, created = excluded.created"
        )
        params = (agent, executable, json.dumps(list(args)), approved_by, self._clock(), sha256)
        await self._call(_execute, sql, params)

    def _cutoff(self, older_than_seconds: float) -> float:
        if older_than_seconds < 0:
            raise ValueError(f"older_than_seconds cannot be negative: {older_than_seconds}")
        return self._clock() - older_than_seconds


if TYPE_CHECKING:
    _checked: type[Store] = SqliteStore  # mypy proves the SQLite store has the whole interface


# --- on the worker thread: everything below runs there, and only there -----------------------------------------


class _Worker:
    """The one thread that owns the connection: runs calls in the order they were made and, when several are
    waiting, runs them all and wakes the event loop once for the lot (a wake-up per call costs more than most
    statements)."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], asyncio.Future[Any]] | None] = queue.SimpleQueue()
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._serve, name="switchboard-store", daemon=True)
        self._thread.start()

    def call(self, job: Callable[[], _T]) -> asyncio.Future[_T]:
        future: asyncio.Future[_T] = self._loop.create_future()
        self._jobs.put((job, future))
        return future

    def stop(self) -> None:
        """No more calls: the thread ends after the ones already made."""
        self._jobs.put(None)

    def _serve(self) -> None:
        while True:
            batch = [self._jobs.get()]
            with contextlib.suppress(queue.Empty):
                while batch[-1] is not None:
                    batch.append(self._jobs.get_nowait())
            outcomes: list[tuple[asyncio.Future[Any], Any, BaseException | None]] = []
            for item in batch:
                if item is not None:
                    job, future = item
                    try:
                        outcomes.append((future, job(), None))
                    except BaseException as error:  # handed to the caller, whatever it is
                        outcomes.append((future, None, error))
            with contextlib.suppress(RuntimeError):  # the loop has closed: nobody is waiting any more
                self._loop.call_soon_threadsafe(_settle, outcomes)
            if batch[-1] is None:
                return


def _settle(outcomes: list[tuple[asyncio.Future[Any], Any, BaseException | None]]) -> None:
    for future, result, error in outcomes:
        if future.cancelled():
            continue
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)


def _connect(path: Path) -> sqlite3.Connection:
    path.parent.mkdir(parents=True, exist_ok=True)
    # Autocommit mode: each statement commits alone unless an explicit BEGIN groups it with others.
    connection = sqlite3.connect(path, isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000)
    try:
        connection.row_factory = sqlite3.Row
        mode = _scalar(connection, "PRAGMA journal_mode = WAL")
        if mode != "wal":
            raise StoreError(f"{path}: cannot use write-ahead logging (journal mode stays {mode!r})")
        connection.execute("PRAGMA synchronous = NORMAL")  # with WAL: durable across app crashes, not power loss
        connection.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        connection.execute("PRAGMA foreign_keys = ON")
        _migrate(connection, path)
    except BaseException:
        connection.close()
        raise
    return connection


@contextlib.contextmanager
def _write_transaction(connection: sqlite3.Connection) -> Iterator[None]:
    """BEGIN IMMEDIATE (the write lock, taken before anything is read) ... COMMIT, or ROLLBACK on any error."""
    connection.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        connection.execute("ROLLBACK")
        raise
    connection.execute("COMMIT")


def _migrate(connection: sqlite3.Connection, path: Path) -> None:
    with _write_transaction(connection):  # read the version under the write lock: two openers cannot both migrate
        version = _scalar(connection, "PRAGMA user_version")
        if version > SCHEMA_VERSION:
            raise StoreError(f"{path}: schema version {version} is newer than this Switchboard ({SCHEMA_VERSION})")
        for statements in _MIGRATIONS[version:]:
            for statement in statements:
                connection.execute(statement)
        connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def _close(connection: sqlite3.Connection) -> None:
    try:
        connection.execute("PRAGMA optimize")
    finally:
        connection.close()


def _dumps_list(value: list[Any]) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _execute(connection: sqlite3.Connection, sql: str, params: tuple[object, ...]) -> None:
    connection.execute(sql, params)


def _decision_key(path: Path) -> bytes:
    """The key that seals approval decisions: made once, 32 random bytes, readable by the bot's user only."""
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_bytes()
    key = secrets.token_bytes(32)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(key)
    return key


def _seal(key: bytes, approval_id: str, status: str, decision: str | None, decided_by: str | None) -> str:
    text = "\x1f".join((approval_id, status, decision or "", decided_by or ""))
    return hmac.new(key, text.encode(), "sha256").hexdigest()


def _approval_rows(
    connection: sqlite3.Connection, key: bytes, where: str, params: tuple[object, ...]
) -> list[ApprovalRecord]:
    return [_approval(row, key) for row in connection.execute(f"SELECT * FROM approvals {where}", params)]


def _approval(row: sqlite3.Row, key: bytes) -> ApprovalRecord:
    """A request as stored; a decision without a valid seal (written behind the store's back) counts as none:
    the request reads as expired, which denies."""
    values = dict(row)
    seal = values.pop("seal", None)
    values.update(approvers=json.loads(values["approvers"]), messages=json.loads(values["messages"]))
    values["offer_always"] = bool(values["offer_always"])
    if values["status"] != "pending":
        expected = _seal(key, values["id"], values["status"], values["decision"], values["decided_by"])
        if not (isinstance(seal, str) and hmac.compare_digest(seal, expected)):
            values.update(status="expired", decision=None, decided_by=None)
    return ApprovalRecord(**values)


def _decide_approval(
    connection: sqlite3.Connection,
    key: bytes,
    approval_id: str,
    status: str,
    decision: str | None,
    decided_by: str | None,
) -> ApprovalRecord | None:
    seal = _seal(key, approval_id, status, decision, decided_by)
    row = _first(
        connection,
        "UPDATE approvals SET status = ?, decision = ?, decided_by = ?, seal = ? WHERE id = ? AND status = 'pending' "
        "RETURNING *",
        (status, decision, decided_by, seal, approval_id),
    )
    return None if row is None else _approval(row, key)


def _allowed_commands(connection: sqlite3.Connection, agent: str) -> list[tuple[str, tuple[str, ...], str | None]]:
    rows = connection.execute("SELECT executable, args, sha256 FROM exec_allowed WHERE agent = ?", (agent,))
    return [(row["executable"], tuple(json.loads(row["args"])), row["sha256"]) for row in rows]


def _dumps(value: dict[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _scalar(connection: sqlite3.Connection, sql: str, *params: object) -> Any:
    row = _first(connection, sql, params)
    assert row is not None
    return row[0]


def _delete(connection: sqlite3.Connection, sql: str, *params: object) -> int:
    return connection.execute(sql, params).rowcount


def _first(connection: sqlite3.Connection, sql: str, params: tuple[object, ...] = ()) -> sqlite3.Row | None:
    # Step every statement to its end: in autocommit mode a half-read statement holds its transaction open.
    rows = connection.execute(sql, params).fetchall()
    return rows[0] if rows else None


def _session(row: sqlite3.Row) -> SessionRecord:
    return SessionRecord.model_validate({**dict(row), "last_target": _loads(row["last_target"])})


def _inbound(row: sqlite3.Row) -> InboundRecord:
    return InboundRecord.model_validate({**dict(row), "payload": _loads(row["payload"])})


def _outbox(row: sqlite3.Row) -> OutboxRecord:
    return OutboxRecord.model_validate(
        {**dict(row), "target": _loads(row["target"]), "payload": _loads(row["payload"])}
    )


def _get_session(connection: sqlite3.Connection, session_key: str) -> SessionRecord | None:
    row = _first(connection, "SELECT * FROM sessions WHERE session_key = ?", (session_key,))
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


def _touch_session(
    connection: sqlite3.Connection,
    session_key: str,
    now: float,
    model: str | None,
    tokens_in: int,
    tokens_out: int,
    channel: str | None,
    account: str | None,
    target: str | None,
) -> SessionRecord:
    row = _first(
        connection,
        "UPDATE sessions SET updated = ?, model = coalesce(?, model),"
        " input_tokens = input_tokens + ?, output_tokens = output_tokens + ?,"
        " last_channel = coalesce(?, last_channel), last_account = coalesce(?, last_account),"
        " last_target = coalesce(?, last_target)"
        " WHERE session_key = ? RETURNING *",
        (now, model, tokens_in, tokens_out, channel, account, target, session_key),
    )
    if row is None:
        raise KeyError(f"no session {session_key!r}")
    return _session(row)


def _reset_session(connection: sqlite3.Connection, session_key: str, session_id: str, now: float) -> SessionRecord:
    row = _first(
        connection,
        "UPDATE sessions SET session_id = ?, created = ?, updated = ?, input_tokens = 0, output_tokens = 0"
        " WHERE session_key = ? RETURNING *",
        (session_id, now, now, session_key),
    )
    if row is None:
        raise KeyError(f"no session {session_key!r}")
    return _session(row)


def _record_inbound(
    connection: sqlite3.Connection, channel: str, account: str, chat: str, message_id: str, payload: str, now: float
) -> InboundRecord | None:
    row = _first(
        connection,
        "INSERT INTO inbound (channel, account, chat, message_id, payload, status, received, updated)"
        " VALUES (?, ?, ?, ?, ?, 'pending', ?, ?)"
        " ON CONFLICT (channel, account, chat, message_id) DO NOTHING RETURNING *",
        (channel, account, chat, message_id, payload, now, now),
    )
    return None if row is None else _inbound(row)


def _mark_inbound(
    connection: sqlite3.Connection,
    inbound_id: int,
    status: InboundStatus,
    error: str | None,
    now: float,
    session_key: str | None = None,
) -> None:
    updated = connection.execute(
        "UPDATE inbound SET status = ?, error = ?, session_key = coalesce(?, session_key), updated = ?"
        " WHERE id = ? AND status IN ('pending', 'running')",
        (status, error, session_key, now, inbound_id),
    ).rowcount
    if not updated:
        current = _first(connection, "SELECT status FROM inbound WHERE id = ?", (inbound_id,))
        if current is None:
            raise KeyError(f"no inbound message {inbound_id}")
        raise ValueError(f"inbound message {inbound_id} is already {current[0]}")


def _finish_inbound(
    connection: sqlite3.Connection,
    inbound_ids: list[int],
    status: InboundStatus,
    error: str | None,
    session_key: str | None,
    rows: list[tuple[object, ...]],
    now: float,
) -> list[OutboxRecord]:
    with _write_transaction(connection):
        records = [_enqueue_outbox(connection, row, now) for row in rows]
        for inbound_id in inbound_ids:
            _mark_inbound(connection, inbound_id, status, error, now, session_key)
        _delete_previews(connection, inbound_ids)
    return records


def _delete_previews(connection: sqlite3.Connection, inbound_ids: list[int]) -> None:
    if inbound_ids:
        placeholders = ", ".join("?" for _ in inbound_ids)
        connection.execute(f"DELETE FROM previews WHERE inbound_id IN ({placeholders})", inbound_ids)


def _inbound_rows(connection: sqlite3.Connection, where: str, params: tuple[object, ...]) -> list[InboundRecord]:
    return [_inbound(row) for row in connection.execute(f"SELECT * FROM inbound {where}", params)]


def _outbox_row(entry: OutboxEntry) -> tuple[object, ...]:
    return (entry.inbound_id, entry.channel, entry.account, _dumps(entry.target), _dumps(entry.payload), entry.kind)


def _enqueue_outbox(connection: sqlite3.Connection, row: tuple[object, ...], now: float) -> OutboxRecord:
    try:
        created = _first(
            connection,
            "INSERT INTO outbox (inbound_id, channel, account, target, payload, kind, status, retry_at, created,"
            " updated) VALUES (?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?) RETURNING *",
            (*row, now, now, now),
        )
    except sqlite3.IntegrityError as error:
        raise KeyError(f"no inbound message {row[0]}") from error
    assert created is not None
    return _outbox(created)


def _finish_outbox(connection: sqlite3.Connection, outbox_id: int, update: str, params: tuple[object, ...]) -> None:
    if connection.execute(f"{update} WHERE id = ? AND status = 'pending'", (*params, outbox_id)).rowcount:
        return
    current = _first(connection, "SELECT status FROM outbox WHERE id = ?", (outbox_id,))
    if current is None:
        raise KeyError(f"no outbox entry {outbox_id}")
    raise ValueError(f"outbox entry {outbox_id} is already {current[0]}")


def _outbox_rows(connection: sqlite3.Connection, where: str, params: tuple[object, ...]) -> list[OutboxRecord]:
    return [_outbox(row) for row in connection.execute(f"SELECT * FROM outbox {where}", params)]


def _preview_rows(connection: sqlite3.Connection) -> list[PreviewRecord]:
    rows = connection.execute("SELECT * FROM previews ORDER BY created").fetchall()
    return [PreviewRecord.model_validate({**dict(row), "target": json.loads(row["target"])}) for row in rows]


def _pending_pairings(connection: sqlite3.Connection, channel: str | None, now: float) -> list[sqlite3.Row]:
    sql = "SELECT * FROM pairing WHERE status = 'pending' AND expires > ?"
    params: tuple[object, ...] = (now,)
    if channel is not None:
        sql += " AND channel = ?"
        params += (channel,)
    return connection.execute(sql + " ORDER BY created", params).fetchall()


def _request_pairing(
    connection: sqlite3.Connection,
    channel: str,
    account: str,
    sender_id: str,
    sender_name: str | None,
    now: float,
    ttl: float,
    max_pending: int,
) -> PairingRecord:
    with _write_transaction(connection):
        connection.execute("DELETE FROM pairing WHERE status = 'pending' AND expires <= ?", (now,))
        mine = _first(
            connection,
            "SELECT * FROM pairing WHERE channel = ? AND account = ? AND sender_id = ? AND status = 'pending'",
            (channel, account, sender_id),
        )
        if mine is not None:
            return PairingRecord(**dict(mine))
        connection.execute(  # all but the newest max_pending - 1 waiting requests make room for this one
            "DELETE FROM pairing WHERE channel = ? AND account = ? AND code IN (SELECT code FROM pairing"
            " WHERE channel = ? AND account = ? AND status = 'pending' ORDER BY created DESC LIMIT -1 OFFSET ?)",
            (channel, account, channel, account, max(0, max_pending - 1)),
        )
        code = "".join(secrets.choice(PAIRING_ALPHABET) for _ in range(8))
        record = PairingRecord(
            channel=channel, account=account, code=code, sender_id=sender_id, sender_name=sender_name,
            created=now, expires=now + ttl, status="pending",
        )  # fmt: skip
        connection.execute(
            "INSERT INTO pairing VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (channel, account, code, sender_id, sender_name, now, now + ttl, "pending"),
        )
        return record


def _approve_pairing(
    connection: sqlite3.Connection, channel: str, code: str, approved_by: str, now: float
) -> PairingRecord | None:
    with _write_transaction(connection):
        rows = connection.execute(
            "SELECT * FROM pairing WHERE channel = ? AND status = 'pending' AND expires > ?", (channel, now)
        ).fetchall()
        # Compare every pending code in constant time, so timing tells nothing about how close a guess was.
        match = None
        for row in rows:
            if hmac.compare_digest(row["code"].encode(), code.encode()):
                match = row
        if match is None:
            return None
        connection.execute(
            "UPDATE pairing SET status = 'approved' WHERE channel = ? AND account = ? AND code = ?",
            (match["channel"], match["account"], match["code"]),
        )
        connection.execute(
            "INSERT OR REPLACE INTO allowed_senders VALUES (?, ?, ?, ?, ?)",
            (match["channel"], match["account"], match["sender_id"], approved_by, now),
        )
        return PairingRecord(**(dict(match) | {"status": "approved"}))
