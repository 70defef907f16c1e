"""Several gateway processes on one PostgreSQL database: throughput and latency with one, two and three `bot run`
processes, and how long the Telegram poller takes to move to another process after its own is SIGKILLed.

Run with `.venv/bin/python bench/cluster.py` (`--messages 200 --users 20` to run smaller, `--processes 1 3` to pick).
Everything is on 127.0.0.1: a throwaway PostgreSQL server started as the tests start theirs (tests/postgres.py, a
fresh database for each row), the fake Telegram Bot API (tests/fakes/telegram.py) and a fake model answering every
request at once with `answer to <the message>` (helpers.EchoLLM). Each process has its own state folder and the
same `state: {backend: postgres, url: …}`; the queue mode is `followup`, so every DM gets its own answer. Per row,
`--messages` DMs from `--users` users are queued round robin as fast as the fake takes them; latency runs from the
moment a DM is queued to the moment its answer reaches the fake (sendMessage); msgs/s is answers over the time from
the first DM queued to the last answer. `lost` and `dupes` compare each chat's answers with its DMs, in order.

Take-over: with two processes or more, the poller (found from the fake's side: the client port of each getUpdates
mapped to its process through /proc) is SIGKILLed, once idle after its row and once mid-burst (after 30 % of the
answers); the time is from the kill to the first getUpdates from another process, as the fake recorded it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Run as a script, this file's folder comes first on sys.path and its name would shadow the package.
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from fakes.llm import FakeLLM  # noqa: E402
from fakes.telegram import FakeTelegram  # noqa: E402
from helpers import EchoLLM, PollWatch, launch_bot  # noqa: E402
from postgres import PostgresServer, fresh_database, start_postgres  # noqa: E402

FIRST_USER = 70_000
WARM_UP_USER = 60_000
STARTED = "channel telegram account main started"
BURST_WAIT = 900.0  # seconds; reached only when something is broken


def config(folder: Path, llm: FakeLLM, telegram: FakeTelegram, url: str) -> dict[str, Any]:
    return {
        "defaults": {"model": "fake/instant", "workspace_root": str(folder / "ws")},
        "providers": {"fake": {"kind": "openai", "base_url": llm.openai_base_url}},
        "state": {"backend": "postgres", "url": url},
        "session": {"queue": {"mode": "followup"}},
        "tools": {"deny": ["*"]},
        "channels": {"telegram": {"accounts": {"main": {
            "token": telegram.token, "api_base_url": telegram.url, "dm_policy": "open", "rate_limit": False,
            "streaming": "off",
        }}}},
    }  # fmt: skip


@contextlib.asynccontextmanager
async def processes(
    count: int, llm: FakeLLM, telegram: FakeTelegram, url: str
) -> AsyncIterator[list[asyncio.subprocess.Process]]:
    """`count` `bot run` processes, each in its own temporary folder; every one ended at the end (SIGTERM, then
    SIGKILL after 30 s)."""
    root = Path(tempfile.mkdtemp(prefix="switchboard-cluster-bench-"))
    started: list[asyncio.subprocess.Process] = []
    try:
        for number in range(count):
            folder = root / f"p{number}"
            folder.mkdir()
            started.append(await launch_bot(config(folder, llm, telegram, url), folder, STARTED))
        yield started
    finally:
        for process in started:
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
        for process in started:
            try:
                await asyncio.wait_for(process.wait(), 30)
            except TimeoutError:
                process.kill()
                await process.wait()
        shutil.rmtree(root, ignore_errors=True)


@dataclass
class Burst:
    """What one burst gave: answers/s, latencies (s), and the DMs lost or answered twice (or out of order)."""

    rate: float
    latencies: list[float]
    lost: int
    dupes: int
    disordered: int
    wrong: dict[int, list[str]]  # the chats whose answers were not one per DM in order: what they got

    def percentile(self, share: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(len(ordered) * share))] if ordered else float("nan")


def answered(telegram: FakeTelegram, users: Sequence[int]) -> int:
    return sum(len(telegram.sent.get(user, [])) for user in users)


async def burst(telegram: FakeTelegram, messages: int, users: int, base: int, during: Any = None) -> Burst:
    """Queue `messages` DMs from `users` users (round robin) and wait for every answer; `during(answered_so_far)`,
    when given, is awaited once 30 % of them are answered (the poller's SIGKILL)."""
    chats = [base + number for number in range(users)]
    before = {chat: len(telegram.sent.get(chat, [])) for chat in chats}
    sent_at: dict[int, list[float]] = defaultdict(list)
    texts: dict[int, list[str]] = defaultdict(list)
    began = time.monotonic()
    for number in range(messages):
        chat = chats[number % users]
        text = f"u{chat} m{len(texts[chat])}"
        await telegram.private_message(text, user_id=chat, name=f"user{chat}")
        sent_at[chat].append(time.monotonic())
        texts[chat].append(text)
    target = sum(before.values()) + messages
    if during is not None:
        with contextlib.suppress(AssertionError):
            await telegram.wait_for(lambda: answered(telegram, chats) >= sum(before.values()) + messages * 0.3,
                                    timeout=BURST_WAIT)  # fmt: skip
        await during()
    with contextlib.suppress(AssertionError):  # what never comes is counted as lost below
        await telegram.wait_for(lambda: answered(telegram, chats) >= target, timeout=BURST_WAIT)
    await asyncio.sleep(2.0)  # late duplicates, if any, show up here
    reply_times: dict[int, list[float]] = defaultdict(list)
    for call in telegram.requests:
        if call.method == "sendMessage" and call.params.get("chat_id") in sent_at and call.at >= began:
            reply_times[call.params["chat_id"]].append(call.at)
    latencies = [
        reply - asked for chat in chats for asked, reply in zip(sent_at[chat], reply_times[chat], strict=False)
    ]
    lost = sum(max(0, len(sent_at[chat]) - len(reply_times[chat])) for chat in chats)
    dupes = sum(max(0, len(reply_times[chat]) - len(sent_at[chat])) for chat in chats)
    wrong = {
        chat: telegram.sent.get(chat, [])[before[chat] :]
        for chat in chats
        if telegram.sent.get(chat, [])[before[chat] :] != [f"answer to {text}" for text in texts[chat]]
    }
    last = max((times[-1] for times in reply_times.values() if times), default=began)
    rate = sum(len(times) for times in reply_times.values()) / (last - began) if last > began else 0.0
    return Burst(rate, latencies, lost, dupes, len(wrong), wrong)


async def kill_poller(watch: PollWatch, bots: list[asyncio.subprocess.Process]) -> float:
    """SIGKILL the process polling now; seconds until another process's first getUpdates (the fake's clock)."""
    poller = await watch.poller()
    [victim] = [bot for bot in bots if bot.pid == poller]
    killed_at = time.monotonic()
    victim.send_signal(signal.SIGKILL)
    await victim.wait()
    at, _ = await watch.successor(poller, killed_at, timeout=120)
    return at - killed_at


async def row(server: PostgresServer, count: int, messages: int, users: int) -> list[str]:
    """One row of the table (and its take-over rows): `count` processes on a fresh database."""
    with fresh_database(server) as url:
        async with FakeTelegram() as telegram, EchoLLM() as llm, processes(count, llm, telegram, url) as bots:
            return await measure(telegram, bots, count, messages, users)


async def measure(
    telegram: FakeTelegram, bots: list[asyncio.subprocess.Process], count: int, messages: int, users: int
) -> list[str]:
    """One row's bursts (and take-overs) against processes already running."""
    lines = []
    watch = PollWatch(telegram, [bot.pid for bot in bots]).start()
    try:
        await watch.poller()
        await burst(telegram, 3 * count, 3 * count, WARM_UP_USER)  # every process's first turn
        result = await burst(telegram, messages, users, FIRST_USER)
        lines.append(line(f"{count}", messages, users, result, None))
        if count >= 2:  # mid-burst take-over, then idle take-over with the processes left
            taken: list[float] = []

            async def during() -> None:
                taken.append(await kill_poller(watch, bots))

            result = await burst(telegram, messages, users, FIRST_USER + users, during)
            lines.append(line(f"{count}, poller killed", messages, users, result, taken[0]))
            if count >= 3:
                idle = await kill_poller(watch, bots)
                lines.append(f"{f'{count - 1} left, idle':<20} {'':>10} {'':>9} {'':>8} {'':>8} {'':>8}"
                             f" {'':>5} {'':>5} {'':>5} {idle:>9.2f}")  # fmt: skip
    finally:
        await watch.stop()
    return lines


def line(label: str, messages: int, users: int, result: Burst, take_over: float | None) -> str:
    median = statistics.median(result.latencies) if result.latencies else float("nan")
    shown = f"{take_over:>9.2f}" if take_over is not None else f"{'-':>9}"
    details = "".join(f"\n    chat {chat} got: {texts}" for chat, texts in result.wrong.items())
    return (
        f"{label:<20} {f'{messages:,}/{users}':>10} {result.rate:>9.1f} {median:>8.2f} {result.percentile(0.95):>8.2f}"
        f" {result.percentile(0.99):>8.2f} {result.lost:>5} {result.dupes:>5} {result.disordered:>5} {shown}{details}"
    )


async def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--messages", type=int, default=1_000)
    parser.add_argument("--users", type=int, default=100)
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2, 3])
    args = parser.parse_args(argv)
    cores = len(os.sched_getaffinity(0))
    print(f"Python {sys.version.split()[0]}; {cores} cores; latency and take-over in seconds")
    print(f"{'processes':<20} {'DMs/users':>10} {'msgs/s':>9} {'p50':>8} {'p95':>8} {'p99':>8} {'lost':>5}"
          f" {'dupes':>5} {'order':>5} {'take-over':>9}")  # fmt: skip
    server = start_postgres()
    try:
        for count in args.processes:
            for text in await row(server, count, args.messages, args.users):
                print(text, flush=True)
    finally:
        server.stop()
    print(
        f"Note: all processes, PostgreSQL and the fakes share these {cores} cores, so more processes here add"
        " contention, not capacity: the rows show what the coordination costs, not how it scales on separate"
        " machines."
    )


if __name__ == "__main__":
    asyncio.run(main())
