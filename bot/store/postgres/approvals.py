"""Exec approvals on PostgreSQL: `PgApprovals`, the same methods and records as `SqliteApprovals`."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from bot.store.approvals import (
    AllowedRule,
    AllowedRuleStore,
    ApprovalDecision,
    ApprovalRecord,
    ApprovalStatus,
    ApprovalStore,
    allowed_rule,
    approval_record,
    approval_row,
    approval_seal,
)
from bot.store.database import dumps, loads
from bot.store.postgres.database import PgPart

__all__ = ["PgApprovals"]


class PgApprovals(PgPart):
    """Requests in the `approvals` table, decisions sealed with the database's key (the `store_keys` row
    'decision', made at first open); `exec_allowed` holds the commands allowed for good."""

    async def create_approval(self, record: ApprovalRecord) -> None:
        row = approval_row(record)
        sql = f"INSERT INTO approvals ({', '.join(row)}) VALUES ({', '.join('%s' for _ in row)})"
        await self._db.execute(sql, *row.values())

    async def get_approval(self, approval_id: str) -> ApprovalRecord | None:
        rows = await self._approvals("WHERE id = %s", approval_id)
        return rows[0] if rows else None

    async def find_approvals(self, id_prefix: str, *, pending_only: bool = True) -> list[ApprovalRecord]:
        where = "WHERE left(id, length(%s::text)) = %s::text" + (" AND status = 'pending'" if pending_only else "")
        return await self._approvals(where + ' ORDER BY created DESC, id COLLATE "C"', id_prefix, id_prefix)

    async def pending_approvals(self) -> list[ApprovalRecord]:
        return await self._approvals("WHERE status = 'pending' ORDER BY created, id COLLATE \"C\"")

    async def add_approval_message(self, approval_id: str, message: dict[str, Any]) -> None:
        shown = loads(json.dumps(message))  # as it reads back
        async with self._db.transaction() as tx:
            row = await tx.fetchone("SELECT messages FROM approvals WHERE id = %s FOR UPDATE", approval_id)
            if row is None:
                return
            messages: list[Any] = loads(row["messages"])
            if shown in messages:
                return
            await tx.execute("UPDATE approvals SET messages = %s WHERE id = %s", dumps([*messages, shown]), approval_id)

    async def is_approval_message(
        self, channel: str, account: str, peer_kind: str, peer_id: str, message_id: str
    ) -> bool:
        sql = (
            "SELECT EXISTS (SELECT 1 FROM approvals, jsonb_array_elements(approvals.messages::jsonb) AS shown(value)"
            " WHERE shown.value ->> 'message_id' = %s::text"
            " AND shown.value #>> '{target,channel}' = %s::text"
            " AND shown.value #>> '{target,account}' = %s::text"
            " AND shown.value #>> '{target,peer,kind}' = %s::text"
            " AND shown.value #>> '{target,peer,id}' = %s::text) AS shown"
        )
        row = await self._db.fetchone(sql, message_id, channel, account, peer_kind, peer_id)
        return row is not None and bool(row["shown"])

    async def decide_approval(
        self, approval_id: str, status: ApprovalStatus, decision: ApprovalDecision | None, decided_by: str | None
    ) -> ApprovalRecord | None:
        seal = approval_seal(self._db.key, approval_id, status, decision, decided_by)
        row = await self._db.fetchone(
            "UPDATE approvals SET status = %s, decision = %s, decided_by = %s, seal = %s"
            " WHERE id = %s AND status = 'pending' RETURNING *",
            status,
            decision,
            decided_by,
            seal,
            approval_id,
        )
        return None if row is None else approval_record(row, self._db.key)

    async def prune_approvals(self, older_than_seconds: float) -> int:
        cutoff = self._db.cutoff(older_than_seconds)
        return await self._db.execute("DELETE FROM approvals WHERE status != 'pending' AND created < %s", cutoff)

    async def allowed_commands(self, agent: str) -> list[tuple[str, tuple[str, ...], str | None]]:
        rows = await self._db.fetch("SELECT executable, args, sha256 FROM exec_allowed WHERE agent = %s", agent)
        return [(row["executable"], tuple(json.loads(row["args"])), row["sha256"]) for row in rows]

    async def allow_command(
        self, agent: str, executable: str, args: tuple[str, ...], approved_by: str | None, sha256: str | None = None
    ) -> None:
        sql = (
            "INSERT INTO exec_allowed (agent, executable, args, approved_by, created, sha256)"
            " VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (agent, executable, args) DO UPDATE"
            " SET sha256 = excluded.sha256, approved_by = excluded.approved_by, created = excluded.created"
        )
        await self._db.execute(sql, agent, executable, json.dumps(list(args)), approved_by, self._db.clock(), sha256)

    async def allowed_rules(self, agent: str | None = None) -> list[AllowedRule]:
        where, params = ("WHERE agent = %s", (agent,)) if agent is not None else ("", ())
        order = 'ORDER BY created, agent COLLATE "C", executable COLLATE "C", args COLLATE "C"'
        rows = await self._db.fetch(f"SELECT * FROM exec_allowed {where} {order}", *params)
        return [allowed_rule(row) for row in rows]

    async def revoke_allowed_rule(self, rule: AllowedRule) -> bool:
        sql = "DELETE FROM exec_allowed WHERE agent = %s AND executable = %s AND args = %s"
        return bool(await self._db.execute(sql, rule.agent, rule.executable, json.dumps(list(rule.args))))

    async def _approvals(self, where: str, *params: object) -> list[ApprovalRecord]:
        rows = await self._db.fetch(f"SELECT * FROM approvals {where}", *params)
        return [approval_record(row, self._db.key) for row in rows]


if TYPE_CHECKING:
    _checked: type[ApprovalStore] = PgApprovals
    _checked_rules: type[AllowedRuleStore] = PgApprovals
