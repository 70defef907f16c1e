"""Telegram end to end: a real `bot run` process, its real Telegram adapter (python-telegram-bot), the fake Bot
API (tests/fakes/telegram.py) and an instantly answering fake LLM (tests/fakes/llm.py), all on 127.0.0.1.

Run with `.venv/bin/python bench/telegram.py`. Two batches, 200 DMs from 20 users and 1,000 from 100 users,
each sent as fast as the fake can queue them; once with the adapter's rate limiter off (the framework's own
speed) and once on, with the fake answering 429 to anything beyond Telegram's 30 sends per second. The queue
mode is `followup` so that every DM gets its own reply; everything else is the default. Latency runs from the
moment an update is available to the moment its reply reaches the fake.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

# Run as a script, this file's folder comes first on sys.path and its name would shadow the package.
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import FakeLLM, FakeTelegram, bot_process, cpu_seconds, rss_kib, telegram_config  # noqa: E402

FIRST_USER = 70_000
HEADER = (
    f"{'limiter':>7} {'DMs/users':<10} {'msg/s':>9} {'p50':>8} {'p95':>8} {'p99':>8} {'start':>8}"
    f" {'idle':>8} {'peak':>8} {'lost':>5} {'dupes':>5} {'429s':>5}"
)


@dataclass(frozen=True)
class Batch:
    """One batch's figures: replies per second, latency percentiles (s), start → first getUpdates (s), idle RSS one
    second after that and peak RSS (MiB), replies lost and duplicated, 429s, and the bot's CPU ms per reply."""

    limiter: bool
    messages: int
    users: int
    rate: float
    p50: float
    p95: float
    p99: float
    first_poll: float
    idle_mib: float
    peak_mib: float
    lost: int
    duplicates: int
    rate_limited: int
    cpu_ms: float

    def row(self) -> str:
        return (
            f"{'on' if self.limiter else 'off':>7} {self.messages:>5,}/{self.users:<4} {self.rate:>9.1f}"
            f" {self.p50:>8.2f} {self.p95:>8.2f} {self.p99:>8.2f} {self.first_poll:>8.2f} {self.idle_mib:>8.1f}"
            f" {self.peak_mib:>8.1f} {self.lost:>5} {self.duplicates:>5} {self.rate_limited:>5}"
        )


async def batch(messages: int, users: int, limiter: bool, concurrent: int = 4, settle: float = 2.0) -> Batch:
    """A fresh `bot run` answers `messages` DMs from `users` users, all sent at once; `settle` seconds after the last
    reply, late duplicates are counted."""
    async with FakeTelegram() as telegram, FakeLLM() as llm:
        telegram.max_per_second = 30 if limiter else None
        llm.script(*(["ok"] * (messages + 50)))
        folder = Path(tempfile.mkdtemp(prefix="switchboard-bench-"))
        config = telegram_config(telegram, llm, folder, limiter=limiter, concurrent=concurrent)
        started = time.monotonic()
        try:
            async with bot_process(config, folder) as bot:
                await telegram.wait_for(lambda: bool(telegram.calls("getUpdates")), timeout=30)
                first_poll = next(call.at for call in telegram.requests if call.method == "getUpdates") - started
                await asyncio.sleep(1.0)
                idle = rss_kib(bot.pid, "VmRSS")
                sent_at: dict[int, list[float]] = defaultdict(list)
                cpu = cpu_seconds(bot.pid)
                began = time.monotonic()
                for number in range(messages):
                    user = FIRST_USER + number % users
                    await telegram.private_message(f"message {number}", user_id=user, name=f"user{user}")
                    sent_at[user].append(time.monotonic())

                def replies() -> int:
                    return sum(len(telegram.sent[user]) for user in sent_at)

                with contextlib.suppress(TimeoutError):  # what never arrives is counted as lost below
                    await telegram.wait_for(lambda: replies() >= messages, timeout=600)
                cpu_ms = (cpu_seconds(bot.pid) - cpu) * 1000 / max(1, replies())
                await asyncio.sleep(settle)  # late duplicates, if any, show up here
                peak = rss_kib(bot.pid, "VmHWM")
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        reply_times: dict[int, list[float]] = defaultdict(list)
        for call in telegram.requests:
            if call.method == "sendMessage" and call.params.get("chat_id") in sent_at:
                reply_times[call.params["chat_id"]].append(call.at)
        latencies = [
            reply - asked
            for user, asked_times in sent_at.items()
            for asked, reply in zip(asked_times, reply_times[user], strict=False)
        ]
        got = sum(len(times) for times in reply_times.values())
        lost = sum(max(0, len(sent_at[user]) - len(reply_times[user])) for user in sent_at)
        duplicates = sum(max(0, len(reply_times[user]) - len(sent_at[user])) for user in sent_at)
        last = max((times[-1] for times in reply_times.values() if times), default=began)
        rate = got / (last - began) if last > began else 0.0
        latencies.sort()

        def percentile(share: float) -> float:
            return latencies[min(len(latencies) - 1, int(len(latencies) * share))] if latencies else float("nan")

        p50 = statistics.median(latencies) if latencies else float("nan")
        return Batch(
            limiter=limiter,
            messages=messages,
            users=users,
            rate=rate,
            p50=p50,
            p95=percentile(0.95),
            p99=percentile(0.99),
            first_poll=first_poll,
            idle_mib=idle / 1024,
            peak_mib=peak / 1024,
            lost=lost,
            duplicates=duplicates,
            rate_limited=telegram.rate_limited,
            cpu_ms=cpu_ms,
        )


async def main() -> None:
    print(f"Python {sys.version.split()[0]}; latency in seconds, RSS in MiB")
    print(HEADER)
    for limiter in (False, True):
        for messages, users in ((200, 20), (1_000, 100)):
            print((await batch(messages, users, limiter)).row(), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
