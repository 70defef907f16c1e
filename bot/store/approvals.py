"""Exec approvals: commands waiting for a person's decision (sealed once made), and the commands allowed for good."""

from __future__ import annotations

import hashlib
import hmac
import json
import sqlite3
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pydantic import Field

from bot.store.base import Record
from bot.store.database import Part, delete, dumps, execute, first, scalar

__all__ = [
    "AllowedRule", "AllowedRuleStore", "ApprovalDecision", "ApprovalRecord", "ApprovalStatus", "ApprovalStore",
    "SqliteApprovals", "allowed_rule", "approval_record", "approval_row", "approval_seal",
]  # fmt: skip

ApprovalStatus = Literal["pending", "allowed", "denied", "expired"]
ApprovalDecision = Literal["allow-once", "allow-always", "deny"]


class ApprovalRecord(Record):
    """A command waiting for a person's decision; `messages` are where it was shown (to edit them later)."""

    id: str
    turn: str | None = None  # the journaled message whose turn asked: run again after a restart, it asks no more
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


class AllowedRule(Record):
    """One "Allow always" rule: this exact command (a script pinned by its SHA-256) runs for the agent unasked."""

    agent: str
    executable: str
    args: tuple[str, ...]
    sha256: str | None = None
    approved_by: str | None = None
    created: float

    @property
    def id(self) -> str:
        """A short name for the rule, the same in every listing: a hash of the agent and the exact command."""
        text = "\0".join((self.agent, self.executable, json.dumps(list(self.args))))
        return hashlib.sha256(text.encode()).hexdigest()[:10]


class ApprovalStore(Protocol):
    """What approvals need: requests stored before they are shown, decided once, and the "Allow always" list."""

    async def create_approval(self, record: ApprovalRecord) -> None:
        """Record a pending request (before its message goes out)."""

    async def get_approval(self, approval_id: str) -> ApprovalRecord | None: ...

    async def find_approvals(self, id_prefix: str, *, pending_only: bool = True) -> list[ApprovalRecord]:
        """Requests whose id starts with `id_prefix` (for `/approve <prefix>`), newest first."""

    async def pending_approvals(self) -> list[ApprovalRecord]: ...

    async def add_approval_message(self, approval_id: str, message: dict[str, Any]) -> None:
        """Remember one place the request was shown, so that its outcome can be written there (once: the same card
        shown again after a restart is not added twice)."""

    async def is_approval_message(
        self, channel: str, account: str, peer_kind: str, peer_id: str, message_id: str
    ) -> bool:
        """Whether any request, pending or decided, was shown as this message (its card)."""

    async def decide_approval(
        self, approval_id: str, status: ApprovalStatus, decision: ApprovalDecision | None, decided_by: str | None
    ) -> ApprovalRecord | None:
        """Settle a pending request; None when it is unknown or no longer pending (a request is decided once)."""

    async def allowed_commands(self, agent: str) -> list[tuple[str, tuple[str, ...], str | None]]:
        """The exact commands "Allow always" stored for an agent: (resolved executable, arguments, script SHA-256)."""

    async def allow_command(
        self, agent: str, executable: str, args: tuple[str, ...], approved_by: str | None, sha256: str | None = None
    ) -> None:
        """Store an exact command; approving it again (a rewritten script) replaces the recorded SHA-256."""


class AllowedRuleStore(Protocol):
    """What `bot approvals rules` needs: the "Allow always" rules listed, and revoked."""

    async def allowed_rules(self, agent: str | None = None) -> list[AllowedRule]:
        """Every "Allow always" rule (of one agent, or all), oldest first."""

    async def revoke_allowed_rule(self, rule: AllowedRule) -> bool:
        """Delete the rule; whether it was there. A running bot reads the rules at each command, so the next one
        asks again."""


class SqliteApprovals(Part):
    """Requests in the `approvals` table, decisions sealed with the state directory's key; `exec_allowed` holds
    the commands allowed for good."""

    async def create_approval(self, record: ApprovalRecord) -> None:
        row = approval_row(record)
        sql = f"INSERT INTO approvals ({', '.join(row)}) VALUES ({', '.join('?' for _ in row)})"
        await self._call(execute, sql, tuple(row.values()))

    async def get_approval(self, approval_id: str) -> ApprovalRecord | None:
        rows = await self._call(_approval_rows, self._db.key, "WHERE id = ?", (approval_id,))
        return rows[0] if rows else None

    async def find_approvals(self, id_prefix: str, *, pending_only: bool = True) -> list[ApprovalRecord]:
        where = "WHERE substr(id, 1, length(?)) = ?" + (" AND status = 'pending'" if pending_only else "")
        return await self._call(_approval_rows, self._db.key, where + " ORDER BY created DESC", (id_prefix, id_prefix))

    async def pending_approvals(self) -> list[ApprovalRecord]:
        return await self._call(_approval_rows, self._db.key, "WHERE status = 'pending' ORDER BY created", ())

    async def add_approval_message(self, approval_id: str, message: dict[str, Any]) -> None:
        shown = dumps(message)
        sql = (
            "UPDATE approvals SET messages = json_insert(messages, '$[#]', json(?)) WHERE id = ?"
            " AND NOT EXISTS (SELECT 1 FROM json_each(messages) WHERE json(value) = json(?))"
        )
        await self._call(execute, sql, (shown, approval_id, shown))

    async def is_approval_message(
        self, channel: str, account: str, peer_kind: str, peer_id: str, message_id: str
    ) -> bool:
        sql = (
            "SELECT EXISTS (SELECT 1 FROM approvals, json_each(approvals.messages) AS shown"
            " WHERE json_extract(shown.value, '$.message_id') = ?"
            " AND json_extract(shown.value, '$.target.channel') = ?"
            " AND json_extract(shown.value, '$.target.account') = ?"
            " AND json_extract(shown.value, '$.target.peer.kind') = ?"
            " AND json_extract(shown.value, '$.target.peer.id') = ?)"
        )
        return bool(await self._call(scalar, sql, message_id, channel, account, peer_kind, peer_id))

    async def decide_approval(
        self, approval_id: str, status: ApprovalStatus, decision: ApprovalDecision | None, decided_by: str | None
    ) -> ApprovalRecord | None:
        return await self._call(_decide_approval, self._db.key, approval_id, status, decision, decided_by)

    async def prune_approvals(self, older_than_seconds: float) -> int:
        cutoff = self._db.cutoff(older_than_seconds)
        return await self._call(delete, "DELETE FROM approvals WHERE status != 'pending' AND created < ?", cutoff)

    async def allowed_commands(self, agent: str) -> list[tuple[str, tuple[str, ...], str | None]]:
        return await self._call(_allowed_commands, agent)

    async def allow_command(
        self, agent: str, executable: str, args: tuple[str, ...], approved_by: str | None, sha256: str | None = None
    ) -> None:
        sql = (
            "INSERT INTO exec_allowed (agent, executable, args, approved_by, created, sha256) VALUES (?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (agent, executable, args) DO UPDATE"
            " SET sha256 = excluded.sha256, approved_by = excluded.approved_by, created = excluded.created"
        )
        params = (agent, executable, json.dumps(list(args)), approved_by, self._db.clock(), sha256)
        await self._call(execute, sql, params)

    async def allowed_rules(self, agent: str | None = None) -> list[AllowedRule]:
        return await self._call(_allowed_rules, agent)

    async def revoke_allowed_rule(self, rule: AllowedRule) -> bool:
        sql = "DELETE FROM exec_allowed WHERE agent = ? AND executable = ? AND args = ?"
        return bool(await self._call(delete, sql, rule.agent, rule.executable, json.dumps(list(rule.args))))


if TYPE_CHECKING:
    from bot.store.database import Row

    _checked: type[ApprovalStore] = SqliteApprovals
    _checked_rules: type[AllowedRuleStore] = SqliteApprovals


# --- on the worker thread -----------------------------------------------------------------------------------------


def approval_seal(key: bytes, approval_id: str, status: str, decision: str | None, decided_by: str | None) -> str:
    """The seal of a decision: an HMAC with the store's key, so that a decision written behind its back is told."""
    text = "\x1f".join((approval_id, status, decision or "", decided_by or ""))
    return hmac.new(key, text.encode(), "sha256").hexdigest()


def approval_row(record: ApprovalRecord) -> dict[str, object]:
    """A request as the `approvals` columns take it (either backend's), by column name."""
    row = record.model_dump()
    row.update(approvers=dumps(record.approvers), messages=dumps(record.messages))
    row["offer_always"] = int(record.offer_always)
    return row


def allowed_rule(row: Row) -> AllowedRule:
    """An `exec_allowed` row (either backend's) as its rule."""
    return AllowedRule(**(dict(row) | {"args": tuple(json.loads(row["args"]))}))


def _approval_rows(
    connection: sqlite3.Connection, key: bytes, where: str, params: tuple[object, ...]
) -> list[ApprovalRecord]:
    return [approval_record(row, key) for row in connection.execute(f"SELECT * FROM approvals {where}", params)]


def approval_record(row: Row, key: bytes) -> ApprovalRecord:
    """A request as stored (either backend's row); a decision without a valid seal (written behind the store's
    back) counts as none: the request reads as expired, which denies."""
    values = dict(row)
    seal = values.pop("seal", None)
    values.update(approvers=json.loads(values["approvers"]), messages=json.loads(values["messages"]))
    values["offer_always"] = bool(values["offer_always"])
    if values["status"] != "pending":
        expected = approval_seal(key, values["id"], values["status"], values["decision"], values["decided_by"])
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
    seal = approval_seal(key, approval_id, status, decision, decided_by)
    row = first(
        connection,
        "UPDATE approvals SET status = ?, decision = ?, decided_by = ?, seal = ? WHERE id = ? AND status = 'pending' "
        "RETURNING *",
        (status, decision, decided_by, seal, approval_id),
    )
    return None if row is None else approval_record(row, key)


def _allowed_commands(connection: sqlite3.Connection, agent: str) -> list[tuple[str, tuple[str, ...], str | None]]:
    rows = connection.execute("SELECT executable, args, sha256 FROM exec_allowed WHERE agent = ?", (agent,))
    return [(row["executable"], tuple(json.loads(row["args"])), row["sha256"]) for row in rows]


def _allowed_rules(connection: sqlite3.Connection, agent: str | None) -> list[AllowedRule]:
    where, params = ("WHERE agent = ?", (agent,)) if agent is not None else ("", ())
    rows = connection.execute(f"SELECT * FROM exec_allowed {where} ORDER BY created, agent", params)
    return [allowed_rule(row) for row in rows]
