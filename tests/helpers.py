"""Small helpers the tests share."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import textwrap
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fakes.llm import FakeLLM, Reply

from bot.gateway.status import read_report

WAIT = 30.0  # generous: only ever reached when something is broken
# The stamp a person's message (or each line of a batch) starts with: `[Wed 2026-11-25 14:03 UTC] `.
ENVELOPE = re.compile(r"^\[[A-Z][a-z]{2} \d{4}-\d\d-\d\d \d\d:\d\d [^\]\n]+\] ", re.MULTILINE)


def unstamped(text: str) -> str:
    """`text` without the envelopes that start its lines: what the people wrote (tests/agent/test_prompt_stability.py
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

    def up() -> bool:
        log_text = log_path.read_text(errors="replace")
        if process.returncode is not None:  # it will never start: say why now, not after WAIT
            raise AssertionError(f"bot run exited ({process.returncode}) before {started!r}:\n{log_text}")
        return started in log_text

    try:
        await eventually(up, f"the log line {started!r}")
    except BaseException:
        with contextlib.suppress(ProcessLookupError):  # it may have exited since
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


def write_state(state_dir: Path, sql: str, *params: Any) -> None:
    """Change a bot's state.db behind its back (committed at once), as anything with access to the file could: how a
    test moves a stored moment instead of waiting for the clock to reach it."""
    with contextlib.closing(sqlite3.connect(state_dir / "state.db", timeout=WAIT)) as connection, connection:
        connection.execute(sql, params)


def status_file_shows(state_dir: Path, channel: str, account: str, state: str) -> bool:
    """Whether the status file a running bot writes shows `channel/account` in `state`: a cheap look, to wait on
    before asking `bot status` (a process each time) to confirm it once."""
    report = read_report(state_dir)
    return report is not None and any(
        (shown.channel, shown.account, shown.state) == (channel, account, state) for shown in report.channels
    )


def settled(state_dir: Path) -> bool:
    """The bot's own journal: every message it took in is finished and every reply it owes has been sent. Once
    this holds after the test's last message was answered (or acknowledged), nothing more is coming."""
    unfinished = read_state(state_dir, "SELECT count(*) FROM inbound WHERE status IN ('pending', 'running')")
    unsent = read_state(state_dir, "SELECT count(*) FROM outbox WHERE status = 'pending'")
    return bool(unfinished[0][0] == unsent[0][0] == 0)


# --- what the model was sent, and where the files went ---------------------------------------------------------------


def user_parts(llm: FakeLLM, request: int = -1) -> list[dict[str, Any]]:
    """The content parts of the last user message of an OpenAI-style request (a plain string is one text part)."""
    content = [m for m in llm.requests[request].body["messages"] if m["role"] == "user"][-1]["content"]
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)


def user_text(llm: FakeLLM, request: int = -1) -> str:
    """The text of that message, without its envelopes."""
    return unstamped("\n".join(part["text"] for part in user_parts(llm, request) if part["type"] == "text"))


def user_images(llm: FakeLLM, request: int = -1) -> list[bytes]:
    """The images in that message, decoded from their data URLs."""
    urls = [part["image_url"]["url"] for part in user_parts(llm, request) if part["type"] == "image_url"]
    return [base64.b64decode(url.split(",", 1)[1]) for url in urls]


def tool_result(llm: FakeLLM, request: int) -> dict[str, Any]:
    """The JSON of the last tool result a request showed the model (without notes after it)."""
    [message] = [m for m in llm.requests[request].body["messages"] if m["role"] == "tool"][-1:]
    content = message["content"]
    text = content if isinstance(content, str) else "".join(part["text"] for part in content)
    found: dict[str, Any] = json.JSONDecoder().raw_decode(text[text.index("{") :])[0]
    return found


async def finished(state: Path) -> None:
    """Wait until the bot has nothing left to do."""
    await eventually(lambda: settled(state), "the bot to have nothing left to do")


def inbox_of(state: Path) -> str:
    """`inbox/<YYYY-MM-DD>`: the day (in UTC) the bot's journal received its one message."""
    [(received,)] = read_state(state, "SELECT received FROM inbound")
    return f"inbox/{datetime.fromtimestamp(received, UTC):%Y-%m-%d}"


def files_under(folder: Path) -> dict[str, bytes]:
    """Every file under `folder`, by its path relative to it."""
    return {path.relative_to(folder).as_posix(): path.read_bytes() for path in folder.rglob("*") if path.is_file()}


# --- several processes on one bot (tests/e2e/test_cluster_bot_run.py, bench/cluster.py) -----------------------------


class EchoLLM(FakeLLM):
    """The fake model answering every request at once with `answer to <what the person wrote last>`: nothing to
    script for a thousand turns, and each answer names the message it answers."""

    def _next_reply(self, body: Any) -> Reply | None:
        users = [m for m in (body or {}).get("messages", []) if isinstance(m, dict) and m.get("role") == "user"]
        content = users[-1]["content"] if users else ""
        if not isinstance(content, str):
            content = "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
        return Reply.text(f"answer to {unstamped(content).strip()}")


def connections_to(port: int, pids: Sequence[int]) -> dict[int, int]:
    """client port -> pid, for every TCP connection one of `pids` holds to 127.0.0.1:`port` right now (the socket's
    inode from /proc/net/tcp, its owner from /proc/<pid>/fd)."""
    inodes: dict[str, int] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                local, remote, inode = fields[1], fields[2], fields[9]
                if int(remote.rsplit(":", 1)[1], 16) == port:
                    inodes[inode] = int(local.rsplit(":", 1)[1], 16)
    owners: dict[int, int] = {}
    for pid in pids:
        try:
            descriptors = os.listdir(f"/proc/{pid}/fd")
        except OSError:  # it ended
            continue
        for descriptor in descriptors:
            with contextlib.suppress(OSError):
                link = os.readlink(f"/proc/{pid}/fd/{descriptor}")
                if link.startswith("socket:[") and link[8:-1] in inodes:
                    owners[inodes[link[8:-1]]] = pid
    return owners


@dataclass
class PollWatch:
    """Which process each getUpdates came from: the fake Telegram records the client port of each
    (`poll_connections`), and this maps the ports to pids while their connections are open (every 50 ms).
    `polls` is (the fake's time of the call, the pid or None when not mapped) for each getUpdates."""

    telegram: Any  # a fakes.telegram.FakeTelegram (not imported here: it imports this module)
    pids: list[int]
    owner: dict[int, int] = field(default_factory=dict)
    task: asyncio.Task[None] | None = None

    async def _follow(self) -> None:
        port = int(self.telegram.url.rsplit(":", 1)[1])
        while True:
            self.owner.update(await asyncio.to_thread(connections_to, port, self.pids))
            await asyncio.sleep(0.05)

    def start(self) -> PollWatch:
        self.task = asyncio.create_task(self._follow())
        return self

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task

    @property
    def polls(self) -> list[tuple[float, int | None]]:
        times = [call.at for call in self.telegram.requests if call.method == "getUpdates"]
        return [(at, self.owner.get(port)) for at, port in zip(times, self.telegram.poll_connections, strict=True)]

    def pollers(self, since: float = 0.0, until: float = float("inf")) -> Counter[int | None]:
        """How many getUpdates each pid made between `since` and `until` (the fake's clock, time.monotonic)."""
        return Counter(pid for at, pid in self.polls if since <= at < until)

    async def poller(self) -> int:
        """The process polling now (the one that made the last getUpdates), once its connection is mapped."""
        await eventually(lambda: bool(self.polls) and self.polls[-1][1] is not None, "a getUpdates to be mapped")
        pid = self.polls[-1][1]
        assert pid is not None
        return pid

    async def successor(self, killed: int, since: float, timeout: float = WAIT) -> tuple[float, int]:
        """The first getUpdates after `since` from a process other than `killed`: (its time, its pid)."""

        def found() -> list[tuple[float, int]]:
            return [(at, pid) for at, pid in self.polls if at > since and pid is not None and pid != killed]

        await eventually(lambda: bool(found()), "another process to poll", timeout)
        return found()[0]


# --- the `bot` command line as a process --------------------------------------------------------------------------

# A model on this machine: it needs no key, so only what a case breaks is reported.
LOCAL = "defaults: {model: local/m, workspace_root: ws}\nproviders: {local: {kind: openai, base_url: 'http://127.0.0.1:9/v1'}}\n"


def environment(**extra: str) -> dict[str, str]:
    """This process's environment without anything a config here might read, plus `extra`."""
    drop = ("SWITCHBOARD", "SB_TEST", "TELEGRAM", "DISCORD", "SLACK")
    kept = {k: v for k, v in os.environ.items() if not k.startswith(drop) and not k.endswith("_API_KEY")}
    return kept | extra


def bot(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`bot <args>` as a subprocess, stdin closed (so `bot run` never serves a console); ended by its timeout."""
    return subprocess.run(
        [sys.executable, "-m", "bot", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env or environment(),
        stdin=subprocess.DEVNULL,
        timeout=60,
    )


def write(folder: Path, text: str) -> Path:
    path = folder / "bindings.yaml"
    path.write_text(textwrap.dedent(text))
    return path
