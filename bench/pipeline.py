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
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

# Run as a script, this file's folder comes first on sys.path and its name would shadow the package.
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != Path(__file__).resolve().parent]

from agent.messages import AssistantMessage, Usage  # noqa: E402
from agent.providers.base import Completed, ModelRequest, SchemaDialect, StreamEvent, TextDelta  # noqa: E402
from agent.runner import Runner  # noqa: E402
from bot.config import parse_config  # noqa: E402
from bot.gateway import Gateway  # noqa: E402
from bot.store import SqliteStore  # noqa: E402
from channels.base import (  # noqa: E402
    CONSOLE,
    AccountSettings,
    ChatTarget,
    InboundMessage,
    OnAction,
    OnMessage,
    OutboundMessage,
)
from routing import Peer  # noqa: E402


class InstantModel:
    """A provider that answers at once, without a network."""

    name = "instant"

    def dialect(self, model: str) -> SchemaDialect:
        return "openai"

    async def stream(self, request: ModelRequest, *, api_key: str | None = None) -> AsyncIterator[StreamEvent]:
        yield TextDelta(text="ok")
        yield Completed(message=AssistantMessage(text="ok"), stop_reason="end_turn", usage=Usage(input_tokens=1))

    async def aclose(self) -> None:
        return None


class MemoryChannel:
    """An in-process adapter: `deliver` hands a message to the gateway, `send` notes when each reply left."""

    channel = "bench"
    account = "default"
    capabilities = CONSOLE
    settings = AccountSettings(dm_policy="open", streaming="off")
    bot_username: str | None = None

    def __init__(self) -> None:
        self.on_message: OnMessage | None = None
        self.replied: dict[str, asyncio.Future[float]] = {}

    async def start(self, on_message: OnMessage, on_action: OnAction) -> None:
        self.on_message = on_message

    async def stop(self) -> None:
        return None

    async def deliver(self, peer: str, text: str) -> asyncio.Future[float]:
        assert self.on_message is not None
        done = asyncio.get_running_loop().create_future()
        self.replied.setdefault(peer, done)
        message = InboundMessage(
            channel="bench", peer=Peer("direct", peer), sender_id=peer, text=text, message_id=f"{peer}-{time.time_ns()}"
        )
        await self.on_message(message)
        return done

    async def send(self, target: ChatTarget, message: OutboundMessage) -> str | None:
        future = self.replied.pop(str(target.peer.id), None)
        if future is not None and not future.done():
            future.set_result(time.perf_counter())
        return None

    async def edit(self, target: ChatTarget, message_id: str, message: OutboundMessage) -> None: ...
    async def delete(self, target: ChatTarget, message_id: str) -> None: ...
    async def react(self, target: ChatTarget, message_id: str, emoji: str) -> None: ...
    async def typing(self, target: ChatTarget) -> None: ...


def instant_factory(name: str, config: Any, client: Any = None) -> InstantModel:
    return InstantModel()


async def measure(sessions: int, messages: int, folder: Path) -> str:
    config = parse_config(
        json.dumps(
            {
                "defaults": {"model": "instant/model", "workspace_root": str(folder / "ws"), "max_concurrent": 4},
                "providers": {"instant": {"kind": "openai", "base_url": "http://127.0.0.1:9"}},
                "session": {"queue": {"mode": "followup", "debounce_ms": 0}},
                "tools": {"profile": "minimal", "deny": ["*"]},
            }
        ),
        environ={},
    )
    store = await SqliteStore.open(folder / "state")
    channel = MemoryChannel()
    gateway = Gateway(config, store, folder / "state", [channel], runner=Runner(provider_factory=instant_factory))
    await gateway.start()
    latencies: list[float] = []
    started = time.perf_counter()
    sent = 0
    while sent < messages:
        wave = []
        for index in range(min(sessions, messages - sent)):
            began = time.perf_counter()
            wave.append((began, await channel.deliver(f"user{index}", f"message {sent + index}")))
        for began, future in wave:
            latencies.append((await asyncio.wait_for(future, 60)) - began)
        sent += len(wave)
    elapsed = time.perf_counter() - started
    await gateway.stop(5)
    await store.close()
    latencies.sort()
    p50 = statistics.median(latencies) * 1000
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000
    return f"{sessions:>9,} {messages:>9,} {messages / elapsed:>11,.0f} {p50:>9.2f} {p99:>9.2f}"


async def main() -> None:
    print(f"Python {sys.version.split()[0]}; instant model, in-process channel, SQLite in a temporary folder")
    print(f"{'sessions':>9} {'messages':>9} {'messages/s':>11} {'p50 ms':>9} {'p99 ms':>9}")
    for sessions, messages in ((1, 300), (1_000, 3_000)):
        with tempfile.TemporaryDirectory() as folder:
            print(await measure(sessions, messages, Path(folder)))


if __name__ == "__main__":
    asyncio.run(main())
    print()
    runpy.run_path(str(Path(__file__).with_name("transcripts.py")), run_name="__main__")
