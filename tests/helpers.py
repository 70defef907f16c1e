"""Small helpers the tests share."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import sqlite3
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from fakes.llm import FakeLLM

WAIT = 30.0  # generous: only ever reached when something is broken
# The stamp a person's message (or each line of a batch) starts with: `[Wed 2026-11-25 14:03 UTC] `.
ENVELOPE = re.compile(r"^\[[A-Z][a-z]{2} \d{4}-\d\d-\d\d \d\d:\d\d [^\]\n]+\] ", re.MULTILINE)


def unstamped(text: str) -> str:
    """`text` without the envelopes that start its lines: what the people wrote (tests/test_prompt_stability.py
    proves the envelopes themselves)."""
    return ENVELOPE.sub("", text)


class FakeClock:
    """A clock the test moves by hand, for components that take `clock` (and `sleep`): `sleep` moves the clock to the
    end of the wait at once and records it in `slept`, so time-based behaviour is checked without waiting for it."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += max(seconds, 0.0)
        await asyncio.sleep(0)


async def eventually(condition: Callable[[], bool | Awaitable[bool]], what: str, timeout: float = WAIT) -> None:
    """Wait until `condition()` (sync or async) holds; fail naming `what` after `timeout`, never on speed."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        outcome = condition()
        if not isinstance(outcome, bool):
            outcome = await outcome
        if outcome:
            return
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


async def launch_bot(
    config: dict[str, Any], folder: Path, started: str, *args: str, env: dict[str, str] | None = None
) -> asyncio.subprocess.Process:
    """A real `bot run` process on `config` (written to folder/bindings.yaml) with `args` and `env` added, returned
    once its log shows `started`. Its log goes to folder/bot.log (a pipe nobody reads could fill up and stall it)."""
    path = folder / "bindings.yaml"
    path.write_text(json.dumps(config))
    log_path = folder / "bot.log"
    env = {key: value for key, value in os.environ.items() if not key.endswith("_API_KEY")} | (env or {})
    with log_path.open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot", "run", *args, "--config", str(path),
            stdout=asyncio.subprocess.DEVNULL, stderr=log, env=env,
        )  # fmt: skip
    try:
        await eventually(lambda: started in log_path.read_text(errors="replace"), f"the log line {started!r}")
    except BaseException:
        process.kill()
        await process.wait()
        raise
    return process


@contextlib.asynccontextmanager
async def bot_run(
    config: dict[str, Any], folder: Path, started: str, *args: str, env: dict[str, str] | None = None
) -> AsyncIterator[Path]:
    """launch_bot, as a context: stopped with SIGTERM at the end, which must exit 0; yields the config's path."""
    process = await launch_bot(config, folder, started, *args, env=env)
    log_path = folder / "bot.log"
    try:
        yield folder / "bindings.yaml"
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), 30) == 0, log_path.read_text(errors="replace")
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


def asked(llm: FakeLLM) -> list[str]:
    """The last user text of every request the fake model got."""
    texts = []
    for request in llm.requests:
        content: Any = request.body["messages"][-1]["content"]
        texts.append(unstamped(content if isinstance(content, str) else content[-1]["text"]))
    return texts


def read_state(state_dir: Path, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    """Rows straight from a bot's state.db: what the bot itself recorded, the proof that does not depend on timing."""
    with contextlib.closing(sqlite3.connect(state_dir / "state.db")) as connection:
        return connection.execute(sql, params).fetchall()


def settled(state_dir: Path) -> bool:
    """The bot's own journal: every message it took in is finished and every reply it owes has been sent. Once
    this holds after the test's last message was answered (or acknowledged), nothing more is coming."""
    unfinished = read_state(state_dir, "SELECT count(*) FROM inbound WHERE status IN ('pending', 'running')")
    unsent = read_state(state_dir, "SELECT count(*) FROM outbox WHERE status = 'pending'")
    return bool(unfinished[0][0] == unsent[0][0] == 0)
