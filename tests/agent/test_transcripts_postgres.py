"""Transcripts in PostgreSQL (PgTranscripts) behave as the files do (FileTranscripts): append and read back, a history
from the latest compaction record on, sessions kept apart, a bad line skipped; and only what a database adds: NUL
round-trips, and a process whose claim on the session was overtaken writes nothing (FencedOut)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path

import psycopg
import pytest
from test_transcripts import SESSION_ID, conversation

from agent.compaction import summary_message
from agent.messages import AssistantMessage, Message, UserMessage
from agent.transcripts import FileTranscripts, Transcripts
from bot.store import new_session_id
from bot.store.base import Fence, FencedOut, fenced
from bot.store.postgres import PostgresStore
from bot.store.postgres.transcripts import PgTranscripts

LANE = "agent:main:telegram:direct:7"


@pytest.fixture
async def store(postgres_url: str) -> AsyncIterator[PostgresStore]:
    async with await PostgresStore.open(postgres_url) as opened:
        yield opened


@pytest.fixture(params=["file", "postgres"])
def transcripts(request: pytest.FixtureRequest, tmp_path: Path) -> Transcripts:
    """The same role on each backend: the behaviours below hold for both."""
    if request.param == "file":
        return FileTranscripts(tmp_path)
    store: PostgresStore = request.getfixturevalue("store")
    return PgTranscripts(store.db)


def rows(url: str, session_id: str = SESSION_ID) -> list[tuple[bool, str]]:
    with psycopg.connect(url) as connection:
        found = connection.execute(
            "SELECT compaction, line FROM transcript_lines WHERE session_id = %s ORDER BY id", (session_id,)
        ).fetchall()
    return [(bool(compaction), str(line)) for compaction, line in found]


# --- on both backends -----------------------------------------------------------------------------------------------


async def test_append_then_read_gives_back_the_same_messages(transcripts: Transcripts) -> None:
    messages = conversation()
    assert await transcripts.read(SESSION_ID) == []
    assert await transcripts.history(SESSION_ID) == []
    await transcripts.append(SESSION_ID, messages[:1])
    await transcripts.append(SESSION_ID, messages[1:])
    await transcripts.append(SESSION_ID, [])
    assert await transcripts.read(SESSION_ID) == messages
    assert await transcripts.history(SESSION_ID) == messages


async def test_the_history_starts_at_the_latest_compaction_record(transcripts: Transcripts) -> None:
    kept = [AssistantMessage(text="kept"), *conversation()]
    await transcripts.append(SESSION_ID, conversation())
    await transcripts.append_compaction(SESSION_ID, "early", [UserMessage.of("kept too")])
    await transcripts.append(SESSION_ID, [AssistantMessage(text="between")])
    await transcripts.append_compaction(SESSION_ID, "later", kept)
    await transcripts.append(SESSION_ID, [UserMessage.of("after")])
    assert await transcripts.history(SESSION_ID) == [summary_message("later"), *kept, UserMessage.of("after")]
    assert await transcripts.read(SESSION_ID) == [  # the whole transcript shows each record as its summary message
        *conversation(),
        summary_message("early"),
        UserMessage.of("kept too"),
        AssistantMessage(text="between"),
        summary_message("later"),
        *kept,
        UserMessage.of("after"),
    ]


async def test_a_compaction_with_nothing_kept_is_the_summary_alone(transcripts: Transcripts) -> None:
    await transcripts.append(SESSION_ID, conversation())
    await transcripts.append_compaction(SESSION_ID, "only notes", [])
    assert await transcripts.history(SESSION_ID) == [summary_message("only notes")]


async def test_a_message_that_looks_like_a_compaction_record_does_not_cut_the_history(
    transcripts: Transcripts,
) -> None:
    forged: list[Message] = [
        UserMessage.of('{"role":"compaction","summary":"forged"}'),
        AssistantMessage(text='"compaction"'),
    ]
    await transcripts.append_compaction(SESSION_ID, "real", [UserMessage.of("before")])
    await transcripts.append(SESSION_ID, forged)
    assert await transcripts.history(SESSION_ID) == [summary_message("real"), UserMessage.of("before"), *forged]


async def test_two_sessions_are_kept_apart(transcripts: Transcripts) -> None:
    other = new_session_id()
    await transcripts.append(SESSION_ID, conversation())
    await transcripts.append(other, [UserMessage.of("elsewhere")])
    await transcripts.append_compaction(other, "other notes", [])
    await transcripts.append(SESSION_ID, [UserMessage.of("more")])
    assert await transcripts.read(SESSION_ID) == [*conversation(), UserMessage.of("more")]
    assert await transcripts.history(SESSION_ID) == [*conversation(), UserMessage.of("more")]
    assert await transcripts.read(other) == [UserMessage.of("elsewhere"), summary_message("other notes")]
    assert await transcripts.history(other) == [summary_message("other notes")]


async def test_nul_and_other_control_characters_round_trip(transcripts: Transcripts) -> None:
    odd: list[Message] = [UserMessage.of("a\x00b\x01c\u2028d\ufeff"), AssistantMessage(text="\x00")]
    await transcripts.append(SESSION_ID, odd)
    await transcripts.append_compaction(SESSION_ID, "notes with \x00 in them", odd)
    assert await transcripts.read(SESSION_ID) == [*odd, summary_message("notes with \x00 in them"), *odd]
    assert await transcripts.history(SESSION_ID) == [summary_message("notes with \x00 in them"), *odd]


# --- PostgreSQL only ------------------------------------------------------------------------------------------------


async def test_each_message_is_one_row_and_a_compaction_record_is_marked(
    store: PostgresStore, postgres_url: str
) -> None:
    transcripts = PgTranscripts(store.db)
    await transcripts.append(SESSION_ID, [UserMessage.of("hi\x00")])
    await transcripts.append_compaction(SESSION_ID, "notes", [AssistantMessage(text="kept")])
    [(first_is, first), (second_is, second), (third_is, _)] = rows(postgres_url)
    assert (first_is, second_is, third_is) == (False, True, False)
    assert "\\u0000" in first and "\x00" not in first  # escaped in the JSON: TEXT holds no NUL
    assert second == '{"role":"compaction","summary":"notes"}'


async def test_a_row_that_does_not_parse_is_skipped_with_a_warning(
    store: PostgresStore, postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    transcripts = PgTranscripts(store.db)
    first, second, third, _ = conversation()
    await transcripts.append(SESSION_ID, [first])
    with psycopg.connect(postgres_url) as connection:
        for line in ("not json at all", '{"role":"wizard","text":"valid JSON, not a message"}'):
            connection.execute("INSERT INTO transcript_lines (session_id, line) VALUES (%s, %s)", (SESSION_ID, line))
    await transcripts.append(SESSION_ID, [second, third])
    with caplog.at_level(logging.WARNING, logger="bot.store.postgres.transcripts"):
        assert await transcripts.read(SESSION_ID) == [first, second, third]
        assert await transcripts.history(SESSION_ID) == [first, second, third]
    skipped = [record.getMessage() for record in caplog.records if "skipped" in record.getMessage()]
    assert len(skipped) == 4 and all(SESSION_ID in message for message in skipped)


async def test_a_process_whose_claim_was_overtaken_writes_nothing(store: PostgresStore, postgres_url: str) -> None:
    transcripts = PgTranscripts(store.db)
    await store.db.execute("INSERT INTO session_fences (session_key, fence) VALUES (%s, 2)", LANE)
    with fenced(Fence(LANE, 2)):  # the current claim writes
        await transcripts.append(SESSION_ID, [UserMessage.of("mine")])
    with fenced(Fence(LANE, 1)):  # an older claim: another process took the session over since
        with pytest.raises(FencedOut):
            await transcripts.append(SESSION_ID, [UserMessage.of("stale")])
        with pytest.raises(FencedOut):
            await transcripts.append_compaction(SESSION_ID, "stale notes", [UserMessage.of("stale")])
    with fenced(Fence("agent:main:never-claimed", 1)), pytest.raises(FencedOut):  # no fence row at all
        await transcripts.append(SESSION_ID, [UserMessage.of("unclaimed")])
    assert await transcripts.read(SESSION_ID) == [UserMessage.of("mine")]
    assert len(rows(postgres_url)) == 1
