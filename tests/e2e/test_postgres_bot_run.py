"""A real `bot run` on the PostgreSQL store (`state: {backend: postgres, url: …}`), the fake Telegram and the fake
LLM: a DM answered, and an answer cut short by a SIGKILL answered once after the restart, from the journal that lives
in the database; the transcripts live there too, read back by the next turn and by `bot sessions show`."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
from configs import config_dict, telegram
from fakes.llm import FakeLLM, Reply
from fakes.telegram import FakeTelegram
from helpers import bot_run, eventually, launch_bot

OWNER = 4242
STARTED = "channel telegram account main started"


def config(tmp_path: Path, fake_llm: FakeLLM, tg: FakeTelegram, url: str) -> dict[str, Any]:
    return config_dict(
        tmp_path, fake_llm, telegram(tg, streaming="off"), owners=[f"telegram:{OWNER}"],
        state={"backend": "postgres", "url": url},
    )  # fmt: skip


def journal(url: str) -> list[tuple[str, str]]:
    with psycopg.connect(url) as connection:
        rows = connection.execute("SELECT message_id, status FROM inbound ORDER BY id").fetchall()
    return [(str(message_id), str(status)) for message_id, status in rows]


def unsent(url: str) -> list[tuple[object, ...]]:
    """The outbox entries not sent yet: killed while one is in flight, the next start sends it again (at least
    once), which these tests are not about."""
    with psycopg.connect(url) as connection:
        return connection.execute("SELECT id FROM outbox WHERE status = 'pending'").fetchall()


async def test_a_dm_is_answered_and_an_answer_cut_by_a_crash_is_given_once_after_the_restart(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram, postgres_url: str
) -> None:
    tg = fake_telegram
    settings = config(tmp_path, fake_llm, tg, postgres_url)
    fake_llm.script("Hello.", Reply.held("Half of"))
    process = await launch_bot(settings, tmp_path, STARTED)
    try:
        await tg.private_message("hi", user_id=OWNER, name="Owner")
        assert await tg.wait_sent(OWNER, 1) == ["Hello."]
        await tg.private_message("tell me more", user_id=OWNER, name="Owner")
        await eventually(lambda: fake_llm.holding == 1, "the second answer to be under way")
        await eventually(lambda: not unsent(postgres_url), "the first answer to be recorded as sent")
    finally:
        process.send_signal(signal.SIGKILL)
        await process.wait()
    [first, cut] = journal(postgres_url)
    assert first[1] == "done" and cut[1] in ("pending", "running")  # unfinished: the next start runs it again

    fake_llm.script("Here is more.")
    async with bot_run(settings, tmp_path, STARTED):
        assert await tg.wait_sent(OWNER, 2) == ["Hello.", "Here is more."]
        await eventually(lambda: [s for _, s in journal(postgres_url)] == ["done", "done"], "the journal to settle")
    assert tg.sent[OWNER] == ["Hello.", "Here is more."]  # once
    assert not (tmp_path / "state" / "state.db").exists()  # nothing went to SQLite


def transcript_lines(url: str) -> list[str]:
    with psycopg.connect(url) as connection:
        rows = connection.execute(
            "SELECT t.line FROM transcript_lines t JOIN sessions s USING (session_id) ORDER BY t.id"
        ).fetchall()
    return [str(line) for (line,) in rows]


async def test_the_transcript_is_kept_in_the_database_the_next_turn_and_bot_sessions_show_read_it_from_there(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram, postgres_url: str
) -> None:
    tg = fake_telegram
    fake_llm.script("Hello.", "Still here.")
    async with bot_run(config(tmp_path, fake_llm, tg, postgres_url), tmp_path, STARTED):
        await tg.private_message("hi", user_id=OWNER, name="Owner")
        assert await tg.wait_sent(OWNER, 1) == ["Hello."]
        await eventually(lambda: len(transcript_lines(postgres_url)) == 2, "the first turn's transcript")
        await tg.private_message("are you there?", user_id=OWNER, name="Owner")
        assert await tg.wait_sent(OWNER, 2) == ["Hello.", "Still here."]
        await eventually(lambda: len(transcript_lines(postgres_url)) == 4, "the second turn's transcript")
    sent = [(m["role"], str(m["content"])) for m in fake_llm.requests[-1].body["messages"] if m["role"] != "system"]
    assert [role for role, _ in sent] == ["user", "assistant", "user"]  # the history came from the database
    assert "hi" in sent[0][1] and sent[1][1] == "Hello." and "are you there?" in sent[2][1]
    lines = transcript_lines(postgres_url)
    assert '"Hello."' in lines[1] and '"Still here."' in lines[3]
    assert not (tmp_path / "state" / "transcripts").exists()  # no transcript file was written

    with psycopg.connect(postgres_url) as connection:
        [(key,)] = connection.execute("SELECT session_key FROM sessions").fetchall()
    command = [sys.executable, "-m", "bot", "sessions", "show", str(key), "--config", str(tmp_path / "bindings.yaml")]
    shown = await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    *_, asked, answered = shown.stdout.splitlines()
    assert asked.endswith("are you there?") and answered == "[assistant] Still here."
