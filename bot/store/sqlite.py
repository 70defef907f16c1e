"""The embedded store: one object serving every role from `state.db`, made of one part per domain."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import TYPE_CHECKING

from bot.store.answers import SqliteAnswers
from bot.store.approvals import SqliteApprovals
from bot.store.base import Clock, StoreContext
from bot.store.database import Database, release_free_pages
from bot.store.inbox import SqliteInbox
from bot.store.jobs import SqliteJobs
from bot.store.journal import SqliteJournal
from bot.store.outbox import SqliteOutbox
from bot.store.pairing import SqlitePairing
from bot.store.previews import SqlitePreviews
from bot.store.sessions import SqliteSessions
from bot.store.subagents import SqliteSubagents

if TYPE_CHECKING:
    from bot.store.interface import Store

__all__ = ["SqliteStore"]


# Each part holds its domain's methods and SQL and keeps no state of its own, only the shared Database; combining
# them by inheritance gives one object for every role without restating each method's signature here.
class SqliteStore(
    SqliteSessions,
    SqliteJournal,
    SqliteOutbox,
    SqlitePreviews,
    SqlitePairing,
    SqliteApprovals,
    SqliteJobs,
    SqliteSubagents,
    SqliteInbox,
    SqliteAnswers,
    StoreContext,
):
    """The embedded store: `state.db` in WAL mode, used from one worker thread that owns the connection.

    Every call is handed to that thread, so the event loop never waits on SQLite and calls run one at a
    time, in the order they were made. A call whose caller is cancelled may still complete.
    """

    @classmethod
    async def open(cls, state_dir: Path, *, clock: Clock = time.time) -> SqliteStore:
        """Open (creating or migrating) `state_dir/state.db`."""
        return cls(await Database.open(state_dir, clock=clock))

    @property
    def path(self) -> Path:
        return self._db.path

    @property
    def _connection(self) -> sqlite3.Connection | None:
        return self._db.connection

    async def release_space(self) -> int:
        """An incremental vacuum of `state.db`."""
        return await self._db.call(release_free_pages)

    async def close(self) -> None:
        """Through the worker thread, which runs the calls already queued first."""
        await self._db.close()


if TYPE_CHECKING:
    _checked: type[Store] = SqliteStore  # mypy proves the SQLite store has the whole interface
