"""The store's interfaces beyond one domain: what intake, delivery and retention each need, and `Store`, every role
in one object."""

from __future__ import annotations

from typing import Protocol

from bot.store.answers import AnswerStore
from bot.store.approvals import ApprovalStore
from bot.store.base import DEDUPE_SECONDS
from bot.store.inbox import InboxStore
from bot.store.jobs import JobStore
from bot.store.journal import JournalStore
from bot.store.outbox import OutboxStore
from bot.store.pairing import PairingStore
from bot.store.previews import PreviewStore
from bot.store.sessions import SessionStore
from bot.store.subagents import SubagentStore

__all__ = ["DeliveryStore", "IntakeStore", "RetentionStore", "Store"]


class IntakeStore(JournalStore, SessionStore, PairingStore, Protocol):
    """What intake needs: the journal (record, then mark), the sessions its commands read and reset, pairing."""


class DeliveryStore(OutboxStore, JournalStore, Protocol):
    """What delivery needs: the outbox, the journal rows its answers close, and which messages are approval cards
    (the message tool may never change one)."""

    async def is_approval_message(
        self, channel: str, account: str, peer_kind: str, peer_id: str, message_id: str
    ) -> bool: ...


class RetentionStore(Protocol):
    """What retention needs: each domain's finished rows deleted once old enough, nothing unfinished, ever; then
    the space they took given back."""

    async def prune_inbound(self, older_than_seconds: float = DEDUPE_SECONDS) -> int:
        """Delete done and failed messages finished more than this long ago; returns how many.

        Their keys stop deduplicating redeliveries, hence the default of a day.
        """

    async def prune_outbox(self, older_than_seconds: float = DEDUPE_SECONDS) -> int:
        """Delete sent and dead entries finished more than this long ago; returns how many."""

    async def prune_approvals(self, older_than_seconds: float) -> int:
        """Delete settled requests made more than this long ago (never a pending one); returns how many."""

    async def prune_job_runs(self, older_than_seconds: float) -> int:
        """Delete ended runs older than this, keeping each job's latest (its last tick must be remembered)."""

    async def prune_subagents(self, older_than_seconds: float) -> int:
        """Delete children that ended more than this long ago; never one still running."""

    async def prune_usage(self, older_than_seconds: float) -> int:
        """Delete usage rows older than this."""

    async def release_space(self) -> int:
        """Give back the space that pruned rows left free; how many pages that was (0 where the database does this
        by itself)."""


class Store(
    SessionStore,
    JournalStore,
    OutboxStore,
    PreviewStore,
    PairingStore,
    ApprovalStore,
    JobStore,
    SubagentStore,
    InboxStore,
    AnswerStore,
    RetentionStore,
    Protocol,
):
    """What the gateway needs from its state, every role at once; every payload is a JSON-able dict, so any
    backend can hold it. Code that needs one role should take that role's interface instead."""

    async def close(self) -> None:
        """Finish the calls already made, then close the store. Closing twice is fine."""
