"""Pairing and allowlists on PostgreSQL: `PgPairing`, the same methods and records as `SqlitePairing`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bot.store.pairing import (
    AllowedSender,
    AllowedSenderStore,
    PairingRecord,
    PairingStore,
    matching_code,
    new_pairing,
)
from bot.store.postgres.database import PgPart

__all__ = ["PgPairing"]


class PgPairing(PgPart):
    """Pairing requests in the `pairing` table, approved senders in `allowed_senders`."""

    async def request_pairing(
        self, channel: str, account: str, sender_id: str, sender_name: str | None, *, ttl: float, max_pending: int
    ) -> PairingRecord:
        now = self._db.clock()
        async with self._db.transaction() as tx:
            # One request at a time per channel account, across processes (SQLite's BEGIN IMMEDIATE): a sender
            # asking through two processes at once still gets one code, and the room made is counted once.
            await tx.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", f"pairing\x1f{channel}\x1f{account}"
            )
            await tx.execute("DELETE FROM pairing WHERE status = 'pending' AND expires <= %s", now)
            mine = await tx.fetchone(
                "SELECT * FROM pairing WHERE channel = %s AND account = %s AND sender_id = %s AND status = 'pending'",
                channel,
                account,
                sender_id,
            )
            if mine is not None:
                return PairingRecord(**mine)
            await tx.execute(  # all but the newest max_pending - 1 waiting requests make room for this one
                "DELETE FROM pairing WHERE channel = %s AND account = %s AND code IN (SELECT code FROM pairing"
                " WHERE channel = %s AND account = %s AND status = 'pending' ORDER BY created DESC"
                " LIMIT ALL OFFSET %s)",
                channel,
                account,
                channel,
                account,
                max(0, max_pending - 1),
            )
            record = new_pairing(channel, account, sender_id, sender_name, now, ttl)
            await tx.execute(
                "INSERT INTO pairing (channel, account, code, sender_id, sender_name, created, expires, status)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, 'pending')",
                channel,
                account,
                record.code,
                sender_id,
                sender_name,
                now,
                record.expires,
            )
            return record

    async def approve_pairing(self, channel: str, code: str, approved_by: str) -> PairingRecord | None:
        code = code.strip().upper()
        now = self._db.clock()
        async with self._db.transaction() as tx:
            rows = await tx.fetch(
                "SELECT * FROM pairing WHERE channel = %s AND status = 'pending' AND expires > %s FOR UPDATE",
                channel,
                now,
            )
            match = matching_code(rows, code)
            if match is None:
                return None
            await tx.execute(
                "UPDATE pairing SET status = 'approved' WHERE channel = %s AND account = %s AND code = %s",
                match["channel"],
                match["account"],
                match["code"],
            )
            await tx.execute(
                "INSERT INTO allowed_senders (channel, account, sender_id, approved_by, created)"
                " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (channel, account, sender_id)"
                " DO UPDATE SET approved_by = excluded.approved_by, created = excluded.created",
                match["channel"],
                match["account"],
                match["sender_id"],
                approved_by,
                now,
            )
        return PairingRecord(**(match | {"status": "approved"}))

    async def is_allowed_sender(self, channel: str, account: str, sender_id: str) -> bool:
        row = await self._db.fetchone(
            "SELECT 1 AS allowed FROM allowed_senders WHERE channel = %s AND account = %s AND sender_id = %s",
            channel,
            account,
            sender_id,
        )
        return row is not None

    async def pending_pairings(self, channel: str | None = None) -> list[PairingRecord]:
        sql = "SELECT * FROM pairing WHERE status = 'pending' AND expires > %s"
        params: list[object] = [self._db.clock()]
        if channel is not None:
            sql += " AND channel = %s"
            params.append(channel)
        rows = await self._db.fetch(
            sql + ' ORDER BY created, channel COLLATE "C", account COLLATE "C", code COLLATE "C"', *params
        )
        return [PairingRecord(**row) for row in rows]

    async def allowed_senders(self, channel: str | None = None) -> list[AllowedSender]:
        sql = (
            "SELECT a.channel, a.account, a.sender_id, a.approved_by, a.created, (SELECT p.sender_name FROM pairing p"
            " WHERE p.channel = a.channel AND p.account = a.account AND p.sender_id = a.sender_id"
            " ORDER BY p.created DESC LIMIT 1) AS sender_name FROM allowed_senders a"
        )
        params: list[object] = []
        if channel is not None:
            sql += " WHERE a.channel = %s"
            params.append(channel)
        # Ties in SQLite's order: by primary key, by code point.
        order = ' ORDER BY a.created, a.channel COLLATE "C", a.account COLLATE "C", a.sender_id COLLATE "C"'
        rows = await self._db.fetch(sql + order, *params)
        return [AllowedSender(**row) for row in rows]

    async def revoke_pairing(self, channel: str, sender_id: str, account: str | None = None) -> tuple[int, int]:
        where = "channel = %s AND sender_id = %s" + ("" if account is None else " AND account = %s")
        params: tuple[object, ...] = (channel, sender_id) if account is None else (channel, sender_id, account)
        async with self._db.transaction() as tx:
            allowed = await tx.execute(f"DELETE FROM allowed_senders WHERE {where}", *params)
            pending = await tx.execute(f"DELETE FROM pairing WHERE status = 'pending' AND {where}", *params)
            await tx.execute(f"DELETE FROM pairing WHERE {where}", *params)  # the approved requests: void now
        return allowed, pending


if TYPE_CHECKING:
    _checked: type[PairingStore] = PgPairing
    _checked_senders: type[AllowedSenderStore] = PgPairing
