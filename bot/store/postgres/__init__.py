"""The PostgreSQL store: one object serving every role from a database that several gateway processes can share."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from bot.store.base import Clock, StoreContext
from bot.store.postgres.answers import PgAnswers
from bot.store.postgres.approvals import PgApprovals
from bot.store.postgres.database import PgDatabase
from bot.store.postgres.inbox import PgInbox
from bot.store.postgres.jobs import PgJobs
from bot.store.postgres.journal import PgJournal
from bot.store.postgres.outbox import PgOutbox
from bot.store.postgres.pairing import PgPairing
from bot.store.postgres.previews import PgPreviews
from bot.store.postgres.schema import SCHEMA_VERSION
from bot.store.postgres.sessions import PgSessions
from bot.store.postgres.subagents import PgSubagents

if TYPE_CHECKING:
    from bot.store.interface import Store

__all__ = ["SCHEMA_VERSION", "PgDatabase", "PostgresStore"]


# As in SqliteStore: each part holds its domain's methods and SQL and no state but the shared PgDatabase.
class PostgresStore(
    PgSessions,
    PgJournal,
    PgOutbox,
    PgPreviews,
    PgPairing,
    PgApprovals,
    PgJobs,
    PgSubagents,
    PgInbox,
    PgAnswers,
    StoreContext,
):
    """The networked store: every role in one PostgreSQL database, through a pool of connections."""

    @classmethod
    async def open(cls, url: str, *, clock: Clock = time.time) -> PostgresStore:
        """Connect to the database at `url` and bring its schema up to date (StoreError for a newer schema)."""
        return cls(await PgDatabase.open(url, clock=clock))

    @property
    def db(self) -> PgDatabase:
        return self._db

    async def release_space(self) -> int:
        """Nothing to do: PostgreSQL's autovacuum makes the space of deleted rows reusable by itself."""
        return 0

    async def close(self) -> None:
        """The pool's connections, after the calls in progress."""
        await self._db.close()


if TYPE_CHECKING:
    _checked: type[Store] = PostgresStore  # mypy proves the PostgreSQL store has the whole interface
