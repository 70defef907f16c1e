"""Three real `bot run` processes serving one bot from one PostgreSQL database (`state: {backend: postgres, url: …}`),
each with its own state folder, all on the same fake Telegram token and the same fake LLM: 1,000 DMs from 100 users
answered once each and in order per chat. The Telegram poller SIGKILLed mid-run (of 300 DMs), losing nothing and
repeating at most the replies it was sending at that instant, its polling taken over by another process (that one:
test_cluster_takeover_bot_run.py; an approval across the processes and a cron job firing once:
test_cluster_approvals_cron_bot_run.py).

Which process asks for updates is read from the fake's side: every getUpdates arrives on a TCP connection, and the
connection's client port belongs to exactly one of the processes (/proc/net/tcp gives the socket, /proc/<pid>/fd
its owner)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from configs import config_dict, telegram
from fakes.llm import FakeLLM
from fakes.telegram import FakeTelegram
from helpers import EchoLLM, PollWatch, eventually, launch_bot

STARTED = "channel telegram account main started"
PROCESSES = 3
FIRST_USER = 70_000
USERS = 100
PER_USER = 10
OWNERS = [4242 + number for number in range(6)]
BURST_WAIT = 600.0  # generous: reached only when something is broken (or the machine is far slower than expected)


def config(folder: Path, llm: FakeLLM, tg: FakeTelegram, url: str, **extra: Any) -> dict[str, Any]:
    """One process's bindings.yaml: its own workspace and state folder, the shared database, token and model."""
    return config_dict(
        folder, llm, telegram(tg, streaming="off", dm_policy="open"),
        owners=[f"telegram:{owner}" for owner in OWNERS],
        state={"backend": "postgres", "url": url},
        session={"queue": {"mode": "followup"}},  # every DM its own turn and its own answer
        **extra,
    )  # fmt: skip


# --- the three processes ------------------------------------------------------------------------------------------


@dataclass
class Cluster:
    folders: list[Path]
    processes: list[asyncio.subprocess.Process]
    watch: PollWatch

    @property
    def pids(self) -> list[int]:
        return [process.pid for process in self.processes]

    def folder_of(self, pid: int) -> Path:
        return self.folders[self.pids.index(pid)]

    def log(self, pid: int) -> str:
        return (self.folder_of(pid) / "bot.log").read_text(errors="replace")

    def logs(self) -> str:
        return "\n".join(f"--- {folder.name} ---\n{(folder / 'bot.log').read_text(errors='replace')[-3000:]}"
                         for folder in self.folders)  # fmt: skip


@contextlib.asynccontextmanager
async def cluster(
    tmp_path: Path, llm: FakeLLM, tg: FakeTelegram, url: str, count: int = PROCESSES, **extra: Any
) -> AsyncIterator[Cluster]:
    """`count` `bot run` processes (folders p0, p1, …), started together; at the end each one still running gets
    SIGTERM and must exit 0 (it is killed after 30 s, or when the test failed)."""
    folders = [tmp_path / f"p{number}" for number in range(count)]
    for folder in folders:
        folder.mkdir()
    launched = await asyncio.gather(
        *(launch_bot(config(folder, llm, tg, url, **extra), folder, STARTED) for folder in folders),
        return_exceptions=True,
    )
    processes = [process for process in launched if isinstance(process, asyncio.subprocess.Process)]
    running = Cluster(folders, processes, PollWatch(tg, [process.pid for process in processes]))
    try:
        for outcome in launched:
            if isinstance(outcome, BaseException):
                raise outcome
        running.watch.start()
        yield running
        for process in processes:
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
        codes = [await asyncio.wait_for(process.wait(), 30) for process in processes]
        assert all(code in (0, -signal.SIGKILL) for code in codes), f"exit codes {codes}\n{running.logs()}"
    finally:
        await running.watch.stop()
        for process in processes:
            if process.returncode is None:
                process.kill()
                await process.wait()


# --- the database: what the processes recorded --------------------------------------------------------------------


def query(url: str, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(url) as connection:
        return [tuple(row) for row in connection.execute(sql, params).fetchall()]


def settled(url: str) -> bool:
    """Every journal row finished and every reply sent."""
    [(unfinished,)] = query(url, "SELECT count(*) FROM inbound WHERE status IN ('pending', 'running')")
    [(unsent,)] = query(url, "SELECT count(*) FROM outbox WHERE status = 'pending'")
    return bool(unfinished == unsent == 0)


def claims(url: str) -> Counter[int | None]:
    """How many journal rows each process (by pid) claimed."""
    rows = query(url, "SELECT p.pid FROM inbound i LEFT JOIN processes p ON p.id = i.claimed_by")
    return Counter(pid for (pid,) in rows)


# --- 1,000 DMs ----------------------------------------------------------------------------------------------------


def message(user: int, number: int) -> str:
    return f"u{user} m{number}"


async def send_burst(tg: FakeTelegram, per_user: int = PER_USER) -> None:
    """`per_user` DMs from each of 100 users, interleaved: every user's first, then every user's second, …"""
    for number in range(per_user):
        for user in range(FIRST_USER, FIRST_USER + USERS):
            await tg.private_message(message(user, number), user_id=user, name=f"user{user}")


def wrong(tg: FakeTelegram, per_user: int = PER_USER) -> str:
    """What the chats whose answers are wrong got, in full (empty when none is wrong)."""
    return "".join(f"\nchat {user}: {texts}" for user, texts in wrong_answers(tg, per_user).items())


def answered(tg: FakeTelegram) -> int:
    return sum(len(tg.sent.get(user, [])) for user in range(FIRST_USER, FIRST_USER + USERS))


def wrong_answers(tg: FakeTelegram, per_user: int = PER_USER) -> dict[int, list[str]]:
    """The chats whose answers are not exactly one per DM, in the order the DMs were sent."""
    wrong = {}
    for user in range(FIRST_USER, FIRST_USER + USERS):
        wanted = [f"answer to {message(user, number)}" for number in range(per_user)]
        if tg.sent.get(user, []) != wanted:
            wrong[user] = tg.sent.get(user, [])
    return wrong


async def test_1000_dms_from_100_users_are_answered_once_each_and_in_order_per_chat(
    tmp_path: Path, fake_telegram: FakeTelegram, postgres_url: str
) -> None:
    tg = fake_telegram
    began = time.monotonic()
    async with EchoLLM() as llm, cluster(tmp_path, llm, tg, postgres_url) as bots:
        await send_burst(tg)
        await tg.wait_for(lambda: answered(tg) >= USERS * PER_USER, "1,000 answers", timeout=BURST_WAIT)
        await eventually(lambda: settled(postgres_url), "the journal to settle")
        print(f"\n1,000 DMs through {PROCESSES} processes in {time.monotonic() - began:.1f} s (with the starts);"
              f" journal rows claimed per pid: {dict(claims(postgres_url))};"
              f" getUpdates per pid: {dict(bots.watch.pollers())}")  # fmt: skip
        assert not wrong(tg), wrong(tg)
        pollers = [pid for pid in bots.watch.pollers() if pid is not None]  # None: a connection not mapped in time
        assert len(pollers) == 1, f"more than one process polled: {bots.watch.pollers()}"
    assert not wrong(tg), wrong(tg)  # nothing more after the stop either
