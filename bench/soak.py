"""Soak: does the bot stay as fast, and as small, after 100,000 messages as after 10,000?

Run with `.venv/bin/python bench/soak.py` (`--messages 20000 --users 500` to run smaller). A real `bot run`
process on the fake Telegram Bot API with an instantly answering fake model, all on 127.0.0.1, set up as in
bench/telegram.py (limiter off, queue mode `followup`: every DM gets its own reply). DMs from `--users` users go in
steps of `--step` messages (round robin, so a user has `step / users` waiting at most: below the queue cap, nothing
is folded); each step is sent at once and timed until its last reply. Per step: the rate (answers/s), the bot's
RSS, the size of `state.db` with its `-wal`, the transcripts' size, and the bot's CPU time per message. At the end
the bot stops and the retention's own `prune_once` runs with a clock two days ahead (so everything finished is
past a one-day retention); the size is printed after pruning (the store gives the freed pages back itself, still
open), and, for comparison, after a full VACUUM, which also packs the pages that are left.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

# Run as a script, this file's folder comes first on sys.path and its name would shadow the package.
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import FakeLLM, FakeTelegram, bot_process, cpu_seconds, rss_kib, telegram_config  # noqa: E402
from bot.gateway.retention import DAY, prune_once  # noqa: E402
from bot.store import SqliteStore  # noqa: E402

FIRST_USER = 70_000
MIB = 1024 * 1024


@dataclass
class Step:
    """One step's figures: answers so far, answers/s in this step, RSS (MiB), state.db + -wal and transcripts (MiB),
    the bot's CPU milliseconds per answer in this step."""

    answered: int
    rate: float
    rss: float
    db: float
    transcripts: float
    cpu_ms: float

    def row(self) -> str:
        return (
            f"{self.answered:>9,} {self.rate:>9.1f} {self.rss:>8.1f} {self.db:>8.2f} {self.transcripts:>8.2f}"
            f" {self.cpu_ms:>8.2f}"
        )


@dataclass
class Soak:
    """Everything measured: idle RSS (MiB), the steps, the database before and after pruning and after VACUUM."""

    idle_rss: float
    steps: list[Step]
    pruned: dict[str, int]
    db_stopped: float
    db_pruned: float
    db_vacuumed: float
    lost: int


def db_size(state: Path) -> int:
    """state.db and its write-ahead log, in bytes."""
    return sum(path.stat().st_size for path in (state / "state.db", state / "state.db-wal") if path.exists())


def folder_size(folder: Path) -> int:
    with contextlib.suppress(FileNotFoundError):
        return sum(entry.stat().st_size for entry in os.scandir(folder) if entry.is_file())
    return 0


async def soak(messages: int, users: int, step: int = 10_000, *, echo: bool = False) -> Soak:
    """Send `messages` DMs from `users` users in steps of `step`; see the module docstring."""
    async with FakeTelegram() as telegram, FakeLLM() as llm:
        folder = Path(tempfile.mkdtemp(prefix="switchboard-soak-"))
        state = folder / "state"
        steps: list[Step] = []
        try:
            async with bot_process(telegram_config(telegram, llm, folder, limiter=False), folder) as bot:
                await telegram.wait_for(lambda: bool(telegram.calls("getUpdates")), timeout=30)
                await asyncio.sleep(1.0)
                idle = rss_kib(bot.pid, "VmRSS") / 1024
                if echo:
                    print(f"idle RSS {idle:.1f} MiB", flush=True)
                    columns = (("answered", 9), ("answers/s", 9), ("RSS MiB", 8), ("db MiB", 8), ("jsonl MiB", 8))
                    print(" ".join(f"{name:>{width}}" for name, width in (*columns, ("CPU ms", 8))))
                sent = 0
                while sent < messages:
                    size = min(step, messages - sent)
                    llm.script(*(["ok"] * size))
                    cpu = cpu_seconds(bot.pid)
                    began = time.monotonic()
                    for number in range(sent, sent + size):
                        user = FIRST_USER + number % users
                        await telegram.private_message(f"message {number}", user_id=user, name=f"user{user}")
                    sent += size
                    deadline = began + 600
                    while sum(len(texts) for texts in telegram.sent.values()) < sent and time.monotonic() < deadline:
                        # What the fakes record is not needed here, and the model's requests carry whole histories.
                        llm.requests.clear()
                        telegram.requests.clear()
                        await asyncio.sleep(0.02)
                    elapsed = time.monotonic() - began
                    answered = sum(len(texts) for texts in telegram.sent.values())
                    done = Step(
                        answered=answered,
                        rate=(answered - (steps[-1].answered if steps else 0)) / elapsed,
                        rss=rss_kib(bot.pid, "VmRSS") / 1024,
                        db=db_size(state) / MIB,
                        transcripts=folder_size(state / "transcripts") / MIB,
                        cpu_ms=(cpu_seconds(bot.pid) - cpu) * 1000 / size,
                    )
                    steps.append(done)
                    if echo:
                        print(done.row(), flush=True)
            db_stopped = db_size(state) / MIB
            async with await SqliteStore.open(state, clock=lambda: time.time() + 2 * DAY) as store:
                pruned = await prune_once(store, retention_days=1)
                db_pruned = db_size(state) / MIB  # what a running bot sees after its daily prune
            with contextlib.closing(sqlite3.connect(state / "state.db", isolation_level=None)) as connection:
                connection.execute("VACUUM")
            db_vacuumed = db_size(state) / MIB
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        lost = max(0, messages - sum(len(texts) for texts in telegram.sent.values()))
        return Soak(idle, steps, pruned, db_stopped, db_pruned, db_vacuumed, lost)


def verdict(result: Soak) -> list[str]:
    """The soak's three targets, checked: the last step's rate within 20 % of the second's, RSS growth after the
    first step under 20 MiB, and the database smaller after pruning than before."""
    lines = []
    if len(result.steps) >= 3:
        second, last = result.steps[1].rate, result.steps[-1].rate
        change = (last - second) / second * 100
        ok = "ok" if change >= -20 else "MISSED"
        lines.append(f"rate: last step {last:.1f}/s vs second {second:.1f}/s: {change:+.0f} % (target > -20 %) {ok}")
    if len(result.steps) >= 2:
        growth = max(step.rss for step in result.steps) - result.steps[0].rss
        ok = "ok" if growth < 20 else "MISSED"
        lines.append(f"RSS: +{growth:.1f} MiB after the first step (target < 20 MiB) {ok}")
    ok = "ok" if result.db_pruned < result.db_stopped else "MISSED"
    sizes = f"{result.db_stopped:.2f} MiB, {result.db_pruned:.2f} MiB after pruning"
    lines.append(f"database: {sizes} (target: smaller) {ok}")
    return lines


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--users", type=int, default=1_000)
    parser.add_argument("--step", type=int, default=10_000)
    options = parser.parse_args()
    print(f"Python {sys.version.split()[0]}; {options.messages:,} DMs from {options.users:,} users, limiter off")
    result = await soak(options.messages, options.users, options.step, echo=True)
    print(f"lost: {result.lost}")
    print(f"state.db after stopping: {result.db_stopped:.2f} MiB")
    print(f"pruned with a clock two days ahead, one day kept: {result.pruned}")
    print(f"state.db after pruning: {result.db_pruned:.2f} MiB; after VACUUM: {result.db_vacuumed:.2f} MiB")
    for line in verdict(result):
        print(line)


if __name__ == "__main__":
    asyncio.run(main())
