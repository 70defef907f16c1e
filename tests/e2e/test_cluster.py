"""Two `bot run` processes on one PostgreSQL database and one bot token (the fake Telegram, the fake LLM): one of them
polls, both run sessions, every DM is answered once and in order; when the poller is SIGKILLed the other takes the
polling and the killed one's sessions over, and nothing is lost or said twice."""

from __future__ import annotations

import signal
from pathlib import Path

import psycopg
from fakes.llm import FakeLLM, Reply
from fakes.telegram import FakeTelegram
from helpers import eventually, launch_bot
from test_postgres_bot_run import STARTED, config, unsent

USERS = [9000 + n for n in range(6)]
POLLING = "polling (elected)"


def journal(url: str) -> list[tuple[str, str, str | None]]:
    with psycopg.connect(url) as connection:
        rows = connection.execute("SELECT message_id, status, claimed_by FROM inbound ORDER BY id").fetchall()
    return [(str(message_id), str(status), claimed_by) for message_id, status, claimed_by in rows]


def poller(folders: list[Path]) -> int:
    """Which of the processes (by folder) polls Telegram: its log says it won the election."""
    [index] = [n for n, folder in enumerate(folders) if POLLING in (folder / "bot.log").read_text(errors="replace")]
    return index


async def test_two_processes_answer_every_dm_once_in_order_and_one_takes_over_when_the_other_is_killed(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram, postgres_url: str
) -> None:
    tg = fake_telegram
    settings = config(tmp_path, fake_llm, tg, postgres_url)
    settings["owners"] = [f"telegram:{user}" for user in USERS]
    settings["session"] = {"queue": {"mode": "followup"}}  # one turn per message: one answer each
    settings["defaults"]["max_concurrent"] = 1  # each process holds one session at a time: the other gets the rest
    for user in USERS:
        first = Reply.held(f"u{user} a0") if user == USERS[0] else f"u{user} a0"
        fake_llm.script_for(f"u{user} m0", first, *(f"u{user} a{n}" for n in range(1, 8)))
    folders = [tmp_path / "a", tmp_path / "b"]
    processes = []
    try:
        for folder in folders:
            folder.mkdir()
            processes.append(await launch_bot(settings, folder, STARTED))
        await eventually(lambda: any(POLLING in (f / "bot.log").read_text() for f in folders), "a poller elected")
        for n in range(4):
            for user in USERS:
                await tg.private_message(f"u{user} m{n}", user_id=user, name=f"U{user}")
        # The poller took the first session and is full while its answer is held: the other process runs sessions.
        await eventually(lambda: len({claimed for _, _, claimed in journal(postgres_url)} - {None}) == 2, "both")
        fake_llm.release()
        for user in USERS:
            assert await tg.wait_sent(user, 4) == [f"u{user} a{n}" for n in range(4)]
        rows = journal(postgres_url)
        assert len(rows) == 24 and {status for _, status, _ in rows} == {"done"}
        await eventually(lambda: not unsent(postgres_url), "every answer recorded as sent")  # none in flight

        killed = poller(folders)
        processes[killed].send_signal(signal.SIGKILL)
        await processes[killed].wait()
        survivor = folders[1 - killed]
        await eventually(lambda: POLLING in (survivor / "bot.log").read_text(), "the survivor to take the polling")
        for n in range(4, 8):
            for user in USERS:
                await tg.private_message(f"u{user} m{n}", user_id=user, name=f"U{user}")
        for user in USERS:
            assert await tg.wait_sent(user, 8) == [f"u{user} a{n}" for n in range(8)]
        assert {status for _, status, _ in journal(postgres_url)} == {"done"}
    finally:
        for process in processes:
            if process.returncode is None:
                process.kill()
                await process.wait()
    for user in USERS:
        assert tg.sent[user] == [f"u{user} a{n}" for n in range(8)]  # nothing twice
    assert fake_llm.pending == 0
