"""Answers between sessions on PostgreSQL (bot.store.answers): the `session_answers` table, which the processes of a
cluster also hand answers over through (bot.store.postgres.cluster)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bot.store.answers import ANSWERS_KEPT_SECONDS
from bot.store.postgres.database import PgDatabase, PgPart

if TYPE_CHECKING:
    from bot.store.answers import AnswerStore

__all__ = ["PgAnswers", "get_answer", "put_answer"]


class PgAnswers(PgPart):
    """Answers in the `session_answers` table; those older than ANSWERS_KEPT_SECONDS go as new ones come."""

    async def put_answer(self, job: str, answer: str | None) -> bool:
        await self._db.execute("DELETE FROM session_answers WHERE created < %s", self._db.cutoff(ANSWERS_KEPT_SECONDS))
        return await put_answer(self._db, job, answer)

    async def get_answer(self, job: str) -> tuple[bool, str | None]:
        return await get_answer(self._db, job)


if TYPE_CHECKING:
    _checked: type[AnswerStore] = PgAnswers


async def put_answer(db: PgDatabase, job: str, answer: str | None) -> bool:
    """`AnswerStore.put_answer` without the pruning (PgAnswers' and PgMember's): ON CONFLICT DO NOTHING, so the first
    writer wins even across processes."""
    row = await db.fetchone(
        "INSERT INTO session_answers (job, answer, created) VALUES (%s, %s, %s) ON CONFLICT (job) DO NOTHING"
        " RETURNING job",
        job,
        answer,
        db.clock(),
    )
    return row is not None


async def get_answer(db: PgDatabase, job: str) -> tuple[bool, str | None]:
    """`AnswerStore.get_answer` (PgAnswers' and PgMember's)."""
    row = await db.fetchone("SELECT answer FROM session_answers WHERE job = %s", job)
    return (row is not None, row["answer"] if row else None)
