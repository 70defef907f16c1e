"""Pairing and allowlists: strangers ask with a one-time code, an owner approves, the sender may talk from then on."""

from __future__ import annotations

import hmac
import secrets
import sqlite3
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal, Protocol, TypeVar

from bot.store.base import Record
from bot.store.database import Part, first, write_transaction

__all__ = [
    "PAIRING_ALPHABET", "AllowedSender", "AllowedSenderStore", "PairingRecord", "PairingStore", "SqlitePairing",
    "matching_code", "new_pairing",
]  # fmt: skip

PAIRING_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O or 1/I: codes are read aloud and typed


class PairingRecord(Record):
    """A stranger's request to talk to the bot, approved by an owner with its one-time code."""

    channel: str
    account: str
    code: str
    sender_id: str
    sender_name: str | None = None
    created: float
    expires: float
    status: Literal["pending", "approved"]


class AllowedSender(Record):
    """A sender an owner let in by approving their pairing code."""

    channel: str
    account: str
    sender_id: str
    sender_name: str | None = None
    approved_by: str | None = None
    created: float


class PairingStore(Protocol):
    """What access control and the owners' pairing commands need: who is allowed, codes asked for and approved."""

    async def request_pairing(
        self, channel: str, account: str, sender_id: str, sender_name: str | None, *, ttl: float, max_pending: int
    ) -> PairingRecord:
        """The sender's pending code (a new one if it has none). Each sender holds at most one; when `max_pending`
        others are waiting, the oldest of them is dropped to make room, so strangers cannot use the slots up."""

    async def approve_pairing(self, channel: str, code: str, approved_by: str) -> PairingRecord | None:
        """Approve the pending, unexpired request with this code (compared in constant time); None if none."""

    async def is_allowed_sender(self, channel: str, account: str, sender_id: str) -> bool: ...
    async def pending_pairings(self, channel: str | None = None) -> list[PairingRecord]: ...


class AllowedSenderStore(Protocol):
    """What `bot pairing` needs beyond pairing itself: the senders it let in, listed, and revoked."""

    async def allowed_senders(self, channel: str | None = None) -> list[AllowedSender]:
        """The senders pairing let in (on one channel, or all), oldest first, with the name their request gave."""

    async def revoke_pairing(self, channel: str, sender_id: str, account: str | None = None) -> tuple[int, int]:
        """Forget a sender pairing let in, and drop every request of theirs, on the channel's `account` (None: every
        account); (approvals removed, pending requests removed). The next message from them is a stranger's."""


class SqlitePairing(Part):
    """Pairing requests in the `pairing` table, approved senders in `allowed_senders`."""

    async def request_pairing(
        self, channel: str, account: str, sender_id: str, sender_name: str | None, *, ttl: float, max_pending: int
    ) -> PairingRecord:
        return await self._call(
            _request_pairing, channel, account, sender_id, sender_name, self._db.clock(), ttl, max_pending
        )

    async def approve_pairing(self, channel: str, code: str, approved_by: str) -> PairingRecord | None:
        return await self._call(_approve_pairing, channel, code.strip().upper(), approved_by, self._db.clock())

    async def is_allowed_sender(self, channel: str, account: str, sender_id: str) -> bool:
        row = await self._call(
            first,
            "SELECT 1 FROM allowed_senders WHERE channel = ? AND account = ? AND sender_id = ?",
            (channel, account, sender_id),
        )
        return row is not None

    async def pending_pairings(self, channel: str | None = None) -> list[PairingRecord]:
        rows = await self._call(_pending_pairings, channel, self._db.clock())
        return [PairingRecord(**dict(row)) for row in rows]

    async def allowed_senders(self, channel: str | None = None) -> list[AllowedSender]:
        rows = await self._call(_allowed_senders, channel)
        return [AllowedSender(**dict(row)) for row in rows]

    async def revoke_pairing(self, channel: str, sender_id: str, account: str | None = None) -> tuple[int, int]:
        return await self._call(_revoke_pairing, channel, sender_id, account)


if TYPE_CHECKING:
    from bot.store.database import Row

    _checked: type[PairingStore] = SqlitePairing
    _checked_senders: type[AllowedSenderStore] = SqlitePairing


_Pending = TypeVar("_Pending", bound="Row")


def matching_code(pending: Sequence[_Pending], code: str) -> _Pending | None:
    """The pending request (either backend's row) whose code is `code`. Every code is compared, in constant time, so
    timing tells nothing about how close a guess was."""
    match = None
    for row in pending:
        if hmac.compare_digest(row["code"].encode(), code.encode()):
            match = row
    return match


def new_pairing(
    channel: str, account: str, sender_id: str, sender_name: str | None, now: float, ttl: float
) -> PairingRecord:
    """A pending request with a new random code of eight `PAIRING_ALPHABET` letters, expiring `ttl` from `now`."""
    code = "".join(secrets.choice(PAIRING_ALPHABET) for _ in range(8))
    return PairingRecord(
        channel=channel, account=account, code=code, sender_id=sender_id, sender_name=sender_name,
        created=now, expires=now + ttl, status="pending",
    )  # fmt: skip


# --- on the worker thread -----------------------------------------------------------------------------------------


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
    with write_transaction(connection):
        connection.execute("DELETE FROM pairing WHERE status = 'pending' AND expires <= ?", (now,))
        mine = first(
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
        record = new_pairing(channel, account, sender_id, sender_name, now, ttl)
        connection.execute(
            "INSERT INTO pairing VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (channel, account, record.code, sender_id, sender_name, now, record.expires, "pending"),
        )
        return record


def _approve_pairing(
    connection: sqlite3.Connection, channel: str, code: str, approved_by: str, now: float
) -> PairingRecord | None:
    with write_transaction(connection):
        rows = connection.execute(
            "SELECT * FROM pairing WHERE channel = ? AND status = 'pending' AND expires > ?", (channel, now)
        ).fetchall()
        match = matching_code(rows, code)
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


def _allowed_senders(connection: sqlite3.Connection, channel: str | None) -> list[sqlite3.Row]:
    sql = (
        "SELECT a.channel, a.account, a.sender_id, a.approved_by, a.created, (SELECT p.sender_name FROM pairing p"
        " WHERE p.channel = a.channel AND p.account = a.account AND p.sender_id = a.sender_id"
        " ORDER BY p.created DESC LIMIT 1) AS sender_name FROM allowed_senders a"
    )
    params: tuple[object, ...] = ()
    if channel is not None:
        sql += " WHERE a.channel = ?"
        params = (channel,)
    return connection.execute(sql + " ORDER BY a.created", params).fetchall()


def _revoke_pairing(
    connection: sqlite3.Connection, channel: str, sender_id: str, account: str | None
) -> tuple[int, int]:
    where = "channel = ? AND sender_id = ?" + ("" if account is None else " AND account = ?")
    params: tuple[object, ...] = (channel, sender_id) if account is None else (channel, sender_id, account)
    with write_transaction(connection):
        allowed = connection.execute(f"DELETE FROM allowed_senders WHERE {where}", params).rowcount
        pending = connection.execute(f"DELETE FROM pairing WHERE status = 'pending' AND {where}", params).rowcount
        connection.execute(f"DELETE FROM pairing WHERE {where}", params)  # the approved requests: void now
    return allowed, pending
