"""The exec and process tools: real commands in a workspace, approval, a clean environment, timeouts and caps."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from helpers import WAIT, FakeClock, eventually
from leaks import descendants

from tools.base import RunInfo, ToolContext, ToolResult, invoke
from tools.exec import (
    ENV_ALLOW,
    Authorization,
    ExecTool,
    OutputBuffer,
    ProcessTable,
    ProcessTool,
    command_environment,
)
from tools.exec_programs import NEUTRAL_ENV

SESSION = "agent:main:test"


class Authorizer:
    """An `authorize` that gives one fixed answer and records what it was asked."""

    def __init__(self, answer: Authorization) -> None:
        self.answer = answer
        self.asked: list[str] = []

    async def __call__(self, command: str, ctx: ToolContext) -> Authorization:
        self.asked.append(command)
        return self.answer


def allow() -> Authorizer:
    return Authorizer(Authorization(allowed=True, status="allowed"))


def deny(reason: str = "too risky", status: Any = "denied") -> Authorizer:
    return Authorizer(Authorization(allowed=False, status=status, reason=reason, decided_by="telegram:1"))


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    return tmp_path / "ws"


def context(ws: Path, session_key: str = SESSION) -> ToolContext:
    return ToolContext(RunInfo(agent="main", session_key=session_key, workspace=str(ws)))


@pytest.fixture
async def processes() -> AsyncIterator[ProcessTable]:
    table = ProcessTable()
    yield table
    await table.close()


async def run(tool: Any, arguments: dict[str, Any], ctx: ToolContext) -> tuple[ToolResult, dict[str, Any]]:
    result = await invoke(tool, "call_1", arguments, ctx)
    assert isinstance(result.details, dict)
    return result, result.details


def parent_and_group(pid: int | str) -> tuple[int, int] | None:
    """A live (not zombie) process's parent and process group, from /proc; None once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) ": state, ppid, pgrp, ...
    return None if fields[0] in ("Z", "X") else (int(fields[1]), int(fields[2]))


def live_processes() -> dict[int, tuple[int, int]]:
    """pid -> (parent, process group) of every live process."""
    found = {int(entry): parent_and_group(entry) for entry in os.listdir("/proc") if entry.isdigit()}
    return {pid: about for pid, about in found.items() if about is not None}


def process_group(pid: int) -> int | None:
    about = parent_and_group(pid)
    return None if about is None else about[1]


def group_alive(pgid: int) -> bool:
    """Whether any live process is in process group `pgid`."""
    return any(group == pgid for _, group in live_processes().values())


def running_below_us() -> set[int]:
    """The live processes below this one, orphans of the commands included (the leak check makes this process their
    new parent)."""
    return {process.pid for process in descendants()}


@pytest.fixture(autouse=True)
async def nothing_left_running() -> AsyncIterator[None]:
    """Each test ends every process it starts, even when it fails: whatever of them is still running after the
    test (given time to die) is killed here, and fails the test."""
    before = running_below_us()
    yield
    try:
        await eventually(lambda: not running_below_us() - before, "the test's processes to end")
    finally:
        for pid in running_below_us() - before:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def pid_in(path: Path) -> int | None:
    """The process id a command wrote to `path` (`echo $$ > path`), once it is there."""
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return None
    return int(text) if text else None


async def pid_written(path: Path) -> int:
    await eventually(lambda: pid_in(path) is not None, f"a process id in {path.name}")
    pid = pid_in(path)
    assert pid is not None
    return pid


async def group_gone(pgid: int) -> None:
    await eventually(lambda: not group_alive(pgid), f"process group {pgid} to be gone")


@contextlib.asynccontextmanager
async def calling(tool: ExecTool, arguments: dict[str, Any], ctx: ToolContext) -> AsyncIterator[asyncio.Task[Any]]:
    """The call as a task; if it is still running when the block ends (a failed test), it is cancelled, which kills
    its command."""
    task = asyncio.create_task(invoke(tool, "call_1", arguments, ctx))
    try:
        yield task
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


# --- foreground -----------------------------------------------------------------------------------------------


async def test_output_and_exit_code(ws: Path, processes: ProcessTable) -> None:
    tool = ExecTool(allow(), processes)
    result, details = await run(tool, {"command": "echo a; echo b >&2; echo c"}, context(ws))
    assert not result.is_error
    assert details["status"] == "ok"
    assert details["exit_code"] == 0
    assert details["output"] == "a\nb\nc\n"  # stdout and stderr interleaved, in order
    assert details["truncated"] is False
    assert details["cwd"] == str(ws)
    assert isinstance(details["duration_ms"], int)


async def test_non_zero_exit_is_an_error(ws: Path, processes: ProcessTable) -> None:
    tool = ExecTool(allow(), processes)
    result, details = await run(tool, {"command": "echo oops >&2; exit 3"}, context(ws))
    assert result.is_error
    assert details["status"] == "error"
    assert details["exit_code"] == 3
    assert details["output"] == "oops\n"


async def test_runs_in_the_workspace(ws: Path, processes: ProcessTable) -> None:
    tool = ExecTool(allow(), processes)
    assert not ws.exists()
    _, details = await run(tool, {"command": "pwd && touch made"}, context(ws))
    assert details["output"].strip() in (str(ws), os.path.realpath(ws))
    assert (ws / "made").exists()


async def test_no_workspace_is_an_error(processes: ProcessTable) -> None:
    authorize = allow()
    tool = ExecTool(authorize, processes)
    ctx = ToolContext(RunInfo(agent="main", session_key=SESSION))
    result, details = await run(tool, {"command": "true"}, ctx)
    assert result.is_error
    assert details["error"] == "this agent has no workspace"
    assert authorize.asked == []  # nobody is asked to approve what cannot run


async def test_denied_command_does_not_run(ws: Path, processes: ProcessTable) -> None:
    authorize = deny("rm is not allowed here")
    tool = ExecTool(authorize, processes)
    result, details = await run(tool, {"command": "touch made"}, context(ws))
    assert result.is_error
    assert details == {"status": "denied", "command": "touch made", "reason": "rm is not allowed here"}
    assert authorize.asked == ["touch made"]
    assert not (ws / "made").exists()


async def test_expired_approval_passes_through(ws: Path, processes: ProcessTable) -> None:
    tool = ExecTool(deny("nobody approved it in time", status="expired"), processes)
    result, details = await run(tool, {"command": "touch made"}, context(ws))
    assert result.is_error
    assert details["status"] == "expired"
    assert details["reason"] == "nobody approved it in time"
    assert not (ws / "made").exists()


async def test_secrets_do_not_reach_the_command(
    ws: Path, processes: ProcessTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-sekrit-1")
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "sekrit-2")
    monkeypatch.setenv("HTTPS_PROXY", "http://user:sekrit-3@proxy:8080")
    monkeypatch.setenv("LANG", "C.UTF-8")
    env = command_environment(str(ws))
    assert set(env) <= {*ENV_ALLOW, *NEUTRAL_ENV, "PWD"}
    assert env["PWD"] == str(ws)
    assert env["GIT_CONFIG_GLOBAL"] == "/dev/null"  # git reads no ~/.gitconfig
    tool = ExecTool(allow(), processes)
    _, details = await run(tool, {"command": "env"}, context(ws))
    output = details["output"]
    assert "sekrit" not in output
    assert "LANG=C.UTF-8" in output
    assert f"PWD={ws}" in output
    names = {line.split("=", 1)[0] for line in output.splitlines() if "=" in line}
    assert names <= {*ENV_ALLOW, *NEUTRAL_ENV, "PWD", "SHLVL", "_", "OLDPWD"}  # the last three: the shell's own


async def test_timeout_kills_the_group_with_its_grandchildren(ws: Path, processes: ProcessTable) -> None:
    waited: list[float] = []
    grandchild_groups: list[int | None] = []

    async def timeout_once_the_grandchild_runs(seconds: float) -> None:
        waited.append(seconds)
        grandchild_groups.append(process_group(await pid_written(ws / "grandchild")))

    tool = ExecTool(allow(), processes, sleep=timeout_once_the_grandchild_runs)
    command = "echo $$ > pgid; echo started; sh -c 'echo $$ > grandchild; sleep 100' & sleep 100"
    result, details = await run(tool, {"command": command, "timeout": 5}, context(ws))
    assert result.is_error
    assert (details["status"], details["timeout_seconds"], details["output"]) == ("timeout", 5, "started\n")
    assert waited == [5]
    pgid = await pid_written(ws / "pgid")
    assert grandchild_groups == [pgid]  # the grandchild was running, in the shell's group, when the timeout struck
    await group_gone(pgid)  # and nothing of the group is left to act later


async def test_default_timeout_applies(ws: Path, processes: ProcessTable) -> None:
    tool = ExecTool(allow(), processes, default_timeout=0.3)  # real time: the command would take 300 times longer
    _, details = await run(tool, {"command": "sleep 100"}, context(ws))
    assert details["status"] == "timeout"
    assert details["timeout_seconds"] == 0.3


async def test_long_output_keeps_head_and_tail(ws: Path, processes: ProcessTable) -> None:
    tool = ExecTool(allow(), processes, output_limit=4096)
    _, details = await run(tool, {"command": "seq 1 200000"}, context(ws))
    output = details["output"]
    total = sum(len(str(n)) + 1 for n in range(1, 200001))
    assert details["status"] == "ok"
    assert details["truncated"] is True
    assert output.startswith("1\n2\n3\n")
    assert output.endswith("199999\n200000\n")
    assert f"[… {total - 4096:,} bytes cut …]" in output
    assert len(output.encode()) < 4096 + 100


def test_output_buffer_stays_bounded() -> None:
    buffer = OutputBuffer(1000)
    for n in range(2000):  # ~128 MB in 64 KiB chunks, never held
        buffer.feed(bytes([65 + n % 26]) * 65536)
        assert len(buffer.head) + len(buffer.tail) <= 1000
    assert buffer.head == b"A" * 500
    assert buffer.tail == bytes([65 + 1999 % 26]) * 500
    assert buffer.cut == 2000 * 65536 - 1000


def test_output_buffer_short_output_is_whole() -> None:
    buffer = OutputBuffer(8)
    buffer.feed("héé".encode()[:3])  # a character split across chunks and across the head/tail boundary
    buffer.feed("héé".encode()[3:])
    assert buffer.text() == "héé"
    assert not buffer.truncated


async def test_cancelling_the_task_kills_the_group(ws: Path, processes: ProcessTable) -> None:
    tool = ExecTool(allow(), processes)
    async with calling(tool, {"command": "echo $$ > pgid; sleep 100"}, context(ws)) as task:
        pgid = await pid_written(ws / "pgid")
        assert group_alive(pgid)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    await group_gone(pgid)


async def test_a_call_cancelled_while_its_command_starts_kills_the_command(
    ws: Path, processes: ProcessTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A command runs from the moment its process exists, before asyncio has connected its pipes; a cancel in that
    # window must not leave it running. Here the window stays open until the test has cancelled.
    connected = asyncio.Event()
    start = asyncio.create_subprocess_exec

    async def slow_to_connect(*args: Any, **kwargs: Any) -> asyncio.subprocess.Process:
        process = await start(*args, **kwargs)
        await connected.wait()
        return process

    monkeypatch.setattr(asyncio, "create_subprocess_exec", slow_to_connect)
    tool = ExecTool(allow(), processes)
    async with calling(tool, {"command": "echo $$ > pgid; sleep 100"}, context(ws)) as task:
        pgid = await pid_written(ws / "pgid")
        task.cancel()
        connected.set()
        with pytest.raises(asyncio.CancelledError):
            await task
    await group_gone(pgid)


async def test_cancelled_event_kills_the_group(ws: Path, processes: ProcessTable) -> None:
    tool = ExecTool(allow(), processes)
    ctx = context(ws)
    async with calling(tool, {"command": "echo $$ > pgid; sleep 100"}, ctx) as task:
        pgid = await pid_written(ws / "pgid")
        ctx.cancelled.set()
        result = await asyncio.wait_for(task, WAIT)
    assert result.is_error
    assert isinstance(result.details, dict)
    assert result.details["status"] == "cancelled"
    await group_gone(pgid)


async def test_invalid_arguments_are_an_error_result(ws: Path, processes: ProcessTable) -> None:
    authorize = allow()
    tool = ExecTool(authorize, processes)
    result, details = await run(tool, {}, context(ws))
    assert result.is_error
    assert details["status"] == "error"
    assert "command" in details["error"]
    result, details = await run(tool, {"command": "true", "timeout": 0}, context(ws))
    assert result.is_error
    assert "timeout" in details["error"]
    assert authorize.asked == []


# --- background -----------------------------------------------------------------------------------------------


async def test_background_start_list_read_kill(ws: Path, processes: ProcessTable) -> None:
    exec_tool = ExecTool(allow(), processes)
    process_tool = ProcessTool(processes)
    ctx = context(ws)
    result, started = await run(exec_tool, {"command": "echo up; echo $$ > pgid; sleep 100", "background": True}, ctx)
    assert not result.is_error
    assert started["status"] == "running"
    assert re.fullmatch(r"p_[0-9a-f]{8}", started["id"])
    assert isinstance(started["pid"], int)
    handle = started["id"]

    _, listed = await run(process_tool, {"action": "list"}, ctx)
    assert [(p["id"], p["status"], p["exit_code"]) for p in listed["processes"]] == [(handle, "running", None)]
    assert listed["processes"][0]["command"].startswith("echo up")

    pgid = await pid_written(ws / "pgid")  # written after "up"
    entry = processes.get(handle)
    assert entry is not None
    await eventually(lambda: entry.output.total > 0, "the output to be read")
    _, read = await run(process_tool, {"action": "read", "id": handle}, ctx)
    assert read["status"] == "running"
    assert read["output"] == "up\n"

    _, killed = await run(process_tool, {"action": "kill", "id": handle}, ctx)
    assert killed["status"] == "killed"
    await group_gone(pgid)
    _, listed = await run(process_tool, {"action": "list"}, ctx)
    assert listed["processes"][0]["status"] == "killed"


async def test_background_exit_code_is_kept(ws: Path, processes: ProcessTable) -> None:
    exec_tool = ExecTool(allow(), processes)
    process_tool = ProcessTool(processes)
    ctx = context(ws)
    _, started = await run(exec_tool, {"command": "echo done; exit 4", "background": True}, ctx)
    entry = processes.get(started["id"])
    assert entry is not None
    await asyncio.wait_for(entry.task, WAIT)
    _, read = await run(process_tool, {"action": "read", "id": started["id"]}, ctx)
    assert (read["status"], read["exit_code"], read["output"]) == ("exited", 4, "done\n")
    _, killed = await run(process_tool, {"action": "kill", "id": started["id"]}, ctx)
    assert killed["status"] == "exited"
    assert "already ended" in killed["note"]


async def test_background_timeout(ws: Path) -> None:
    clock = FakeClock()  # its sleep ends at once: the timeout passes as soon as the table waits for it
    table = ProcessTable(sleep=clock.sleep)
    try:
        exec_tool = ExecTool(allow(), table)
        _, started = await run(exec_tool, {"command": "sleep 100", "background": True, "timeout": 7}, context(ws))
        entry = table.get(started["id"])
        assert entry is not None
        await asyncio.wait_for(entry.task, WAIT)
        assert entry.status == "timeout"
        assert clock.slept == [7]
        await group_gone(started["pid"])
    finally:
        await table.close()


async def test_background_needs_approval_too(ws: Path, processes: ProcessTable) -> None:
    authorize = deny()
    exec_tool = ExecTool(authorize, processes)
    result, details = await run(exec_tool, {"command": "touch made", "background": True}, context(ws))
    assert result.is_error
    assert details["status"] == "denied"
    assert processes.list(SESSION) == []
    assert not (ws / "made").exists()


async def test_sessions_do_not_see_each_others_processes(ws: Path, processes: ProcessTable) -> None:
    exec_tool = ExecTool(allow(), processes)
    process_tool = ProcessTool(processes)
    mine, theirs = context(ws), context(ws, session_key="agent:main:other")
    _, started = await run(exec_tool, {"command": "sleep 100", "background": True}, mine)
    handle = started["id"]

    _, listed = await run(process_tool, {"action": "list"}, theirs)
    assert listed["processes"] == []
    for action in ("read", "kill"):
        result, details = await run(process_tool, {"action": action, "id": handle}, theirs)
        assert result.is_error
        assert details["error"] == f"no such process: {handle}"
    _, read = await run(process_tool, {"action": "read", "id": handle}, mine)
    assert read["status"] == "running"  # the other session's kill did nothing


async def test_process_read_and_kill_need_an_id(ws: Path, processes: ProcessTable) -> None:
    process_tool = ProcessTool(processes)
    result, details = await run(process_tool, {"action": "read"}, context(ws))
    assert result.is_error
    assert "needs the id" in details["error"]
    result, details = await run(process_tool, {"action": "read", "id": "p_00000000"}, context(ws))
    assert details["error"] == "no such process: p_00000000"


async def test_close_kills_every_background_command(ws: Path) -> None:
    table = ProcessTable()
    try:
        exec_tool = ExecTool(allow(), table)
        for n in range(2):
            await run(exec_tool, {"command": f"echo $$ > pgid{n}; sleep 100", "background": True}, context(ws))
        pgids = [await pid_written(ws / f"pgid{n}") for n in range(2)]
    finally:
        await table.close()
    assert [entry.status for entry in table.list(SESSION)] == ["killed", "killed"]
    for pgid in pgids:
        await group_gone(pgid)
    with pytest.raises(RuntimeError):
        await table.start("true", session_key=SESSION, cwd=str(ws), timeout=1, output_limit=100)


async def test_leftovers_do_not_hold_the_call_and_are_killed(ws: Path, processes: ProcessTable) -> None:
    tool = ExecTool(allow(), processes)  # the default timeout: 60 s
    command = "echo $$ > pgid; sleep 600 & echo done"  # the leftover sleep would hold the output pipe for 10 minutes
    _, details = await run(tool, {"command": command}, context(ws))
    # "ok", not "timeout": the call ended with the shell, long before the leftover would have let go of the pipe
    assert (details["status"], details["exit_code"], details["output"]) == ("ok", 0, "done\n")
    await group_gone(await pid_written(ws / "pgid"))


async def test_an_escaped_process_holding_the_pipe_does_not_hang_the_call(ws: Path, processes: ProcessTable) -> None:
    tool = ExecTool(allow(), processes)
    command = "setsid sleep 600 & echo $! > escaped; echo done"  # its own session: out of reach of the group kill
    try:
        # The call gives up on the pipe after a short wait; had it waited for the pipe, it would take 10 minutes.
        _, details = await asyncio.wait_for(run(tool, {"command": command}, context(ws)), WAIT)
        assert (details["status"], details["output"]) == ("ok", "done\n")
    finally:
        escaped = pid_in(ws / "escaped")
        if escaped is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(escaped, signal.SIGKILL)
