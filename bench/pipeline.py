"""Gateway throughput and framework-added latency with an instant fake model, for 1 and 1,000 sessions,
then the transcript append cost at 10 and 10,000 lines (bench/transcripts.py).

Run with `.venv/bin/python bench/pipeline.py`. Everything real except the model and the platform: the
journal, routing, lanes, the runner, the loop, the SQLite store (WAL, in a temporary folder), the outbox
and the JSONL transcripts. The channel is an in-process adapter, so the figures are the framework's own.
"""

from __future__ import annotations

import asyncio
import json
import runpy
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

# Run as a script, this file's folder comes first on sys.path and its name would shadow the package.
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != Path(__file__).resolve().parent]

from agent.providers.scripted import Scripted, ScriptedProvider  # noqa: E402
from bot.app import App  # noqa: E402
from bot.config.loading import parse_config  # noqa: E402
from bot.plugins import Plugins  # noqa: E402
from channels.base import CONSOLE, AccountSettings  # noqa: E402
from channels.memory import MemoryChannel  # noqa: E402

SIZES = ((1, 300), (1_000, 3_000))  # (sessions, messages): one message at a time, then 1,000 at once
HEADER = f"{'sessions':>9} {'messages':>9} {'messages/s':>11} {'p50 ms':>9} {'p99 ms':>9}"


@dataclass(frozen=True)
class Pipeline:
    """One run's figures: its size, messages per second, and the framework's latency (p50, p99) in milliseconds."""

    sessions: int
    messages: int
    rate: float
    p50_ms: float
    p99_ms: float

    def row(self) -> str:
        return f"{self.sessions:>9,} {self.messages:>9,} {self.rate:>11,.0f} {self.p50_ms:>9.2f} {self.p99_ms:>9.2f}"


async def measure(sessions: int, messages: int, folder: Path) -> Pipeline:
    """`messages` messages from `sessions` users, `sessions` at a time, each batch awaited until all are answered.
    A batch arrives at once, so each message's latency runs from the batch's start: with 1,000 at a time it holds
    the message's wait in line, wherever it waits (before 2026-11-29 it ran from the message's own `say`, which
    left out the wait of the messages the channel had not yet handed over while the journal took the others in)."""
    model = ScriptedProvider(default=Scripted.text("ok"), record=False)  # answers at once, without a network
    plugins = Plugins(providers={"scripted": model.plugin()})
    config = parse_config(
        json.dumps(
            {
                "defaults": {"model": "instant/model", "workspace_root": str(folder / "ws"), "max_concurrent": 4},
                "providers": {"instant": {"kind": "scripted"}},
                "session": {"queue": {"mode": "followup", "debounce_ms": 0}},
                "tools": {"profile": "minimal", "deny": ["*"]},
            }
        ),
        environ={},
        plugins=plugins,
    )
    channel = MemoryChannel("bench", capabilities=CONSOLE, settings=AccountSettings(dm_policy="open", streaming="off"))
    app = App(config, folder / "state", plugins=plugins)
    latencies: list[float] = []
    async with app.running([channel], grace_seconds=5):
        started = time.perf_counter()
        sent = 0
        while sent < messages:
            batch = min(sessions, messages - sent)
            arrived = time.perf_counter()
            for index in range(batch):
                await channel.say(f"message {sent + index}", sender=f"user{index}")
            latencies += [reply.at - arrived for reply in await channel.replies(batch, timeout=60)]
            sent += batch
        elapsed = time.perf_counter() - started
    latencies.sort()
    p50 = statistics.median(latencies) * 1000
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000
    return Pipeline(sessions, messages, messages / elapsed, p50, p99)


async def main() -> None:
    print(f"Python {sys.version.split()[0]}; instant model, in-process channel, SQLite in a temporary folder")
    print(HEADER)
    for sessions, messages in SIZES:
        with tempfile.TemporaryDirectory() as folder:
            print((await measure(sessions, messages, Path(folder))).row())


if __name__ == "__main__":
    asyncio.run(main())
    print()
    runpy.run_path(str(Path(__file__).with_name("transcripts.py")), run_name="__main__")
