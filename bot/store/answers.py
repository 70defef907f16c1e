"""Answers between sessions: the answer to a `sessions_send` its sender waits for, recorded once, so that exactly one of
its sender (as the tool's result, even in a turn run again after a restart) or its session (as a message) gets it."""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING, Protocol

from bot.store.database import Part, first, write_transaction

__all__ = ["ANSWERS_KEPT_SECONDS", "AnswerStore", "SqliteAnswers"]

ANSWERS_KEPT_SECONDS = 24 * 3600.0  # how long an answer is kept: far longer than any turn waits for one


class AnswerStore(Protocol):
    """First writer wins: the answer to message `job`, or None when its sender stopped waiting (the answer then goes
    back as a message instead)."""

    async def put_answer(self, job: str, answer: str | None) -> bool:
        """Record the answer to message `job` (None: its sender stopped waiting) unless one is recorded already;
        whether this call recorded it."""

    async def get_answer(self, job: str) -> tuple[bool, str | None]:
        """Whether an answer to message `job` is recorded, and it (None: its sender stopped waiting)."""


class SqliteAnswers(Part):
    """Answers in the `session_answers` table; those older than ANSWERS_KEPT_SECONDS go as new ones come."""

    async def put_answer(self, job: str, answer: str | None) -> bool:
        return await self._call(_put_answer, job, answer, self._db.clock())

    async def get_answer(self, job: str) -> tuple[bool, str | None]:
        row = await self._call(first, "SELECT answer FROM session_answers WHERE job = ?", (job,))
        return (row is not None, row["answer"] if row is not None else None)


if TYPE_CHECKING:
    _checked: type[AnswerStore] = SqliteAnswers


# --- on the worker thread -----------------------------------------------------------------------------------------


def _put_answer(connection: sqlite3.Connection, job: str, answer: str | None, now: float) -> bool:
    with write_transaction(connection):
        connection.execute("DELETE FROM session_answers WHERE created < ?", (now - ANSWERS_KEPT_SECONDS,))
        sql = "INSERT INTO session_answers (job, answer, created) VALUES (?, ?, ?) ON CONFLICT (job) DO NOTHING"
        return connection.execute(sql, (job, answer, now)).rowcount == 1
