"""`exec` and `process`: the agent runs shell commands in its workspace, once approved, in the foreground or not."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field, model_validator

from tools.base import NO_WORKSPACE, Sleep, Tool, ToolContext, ToolResult, error_result, json_result
from tools.exec_programs import NEUTRAL_ENV
from tools.sandbox import (
    BotFolders,
    Launch,
    Release,
    SandboxSettings,
    launch,
    sandbox_problem,
    shield,
    shield_problem,
)

ENV_ALLOW = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TERM", "TZ", "USER", "LOGNAME", "SHELL", "TMPDIR")
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
SHELL = "/bin/sh"
MAX_TIMEOUT = 3600.0
BACKGROUND_TIMEOUT = 3600.0  # a background command without `timeout` is stopped after an hour
MAX_RUNNING_PER_SESSION = 16
MAX_FINISHED = 50  # finished background commands kept for `process read`, oldest dropped first
READ_CHUNK = 64 * 1024
SETTLE_SECONDS = 2.0  # after a kill, how long to wait for the last output and the exit status
EXIT_POLL_SECONDS = 0.05

ProcessStatus = Literal["running", "exited", "killed", "timeout"]


class Authorization(BaseModel):
    """Whether a command may run, as decided by policy or a person."""

    allowed: bool
    status: Literal["allowed", "denied", "expired"]
    reason: str = ""
    decided_by: str | None = None


# (command, ctx) -> may it run? It may wait for a person to decide.
Authorize = Callable[[str, ToolContext], Awaitable[Authorization]]
# Waits out a command's timeout: asyncio.sleep, or one a test controls.


def base_environment() -> dict[str, str]:
    """A few harmless variables of ours (ENV_ALLOW: PATH, HOME, the locale ...; never tokens or keys): where every
    environment this process gives a child starts from."""
    env = {name: os.environ[name] for name in ENV_ALLOW if name in os.environ}
    env.setdefault("PATH", DEFAULT_PATH)
    return env


def command_environment(cwd: str | None = None) -> dict[str, str]:
    """The environment a command gets: base_environment(), the settings that stop git, pagers and Python from
    loading configuration from the user's home (NEUTRAL_ENV), and PWD."""
    env = base_environment()
    env.update(NEUTRAL_ENV)
    if cwd is not None:
        env["PWD"] = cwd
    return env


class OutputBuffer:
    """A command's output in bounded memory: the first half of `limit` bytes and the last half."""

    def __init__(self, limit: int) -> None:
        self.head_limit = max(limit // 2, 0)
        self.tail_limit = max(limit - self.head_limit, 0)
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if not chunk or not self.tail_limit:
            return
        self.tail += chunk[-self.tail_limit :]
        excess = len(self.tail) - self.tail_limit
        if excess > 0:
            del self.tail[:excess]

    @property
    def cut(self) -> int:
        """How many bytes in the middle were dropped."""
        return self.total - len(self.head) - len(self.tail)

    @property
    def truncated(self) -> bool:
        return self.cut > 0

    def text(self) -> str:
        """The output as text, with a marker line where the middle was cut."""
        if not self.truncated:
            return bytes(self.head + self.tail).decode("utf-8", errors="replace")
        head = self.head.decode("utf-8", errors="replace")
        tail = self.tail.decode("utf-8", errors="replace")
        newline = "" if not head or head.endswith("\n") else "\n"
        return f"{head}{newline}[… {self.cut:,} bytes cut …]\n{tail}"


def _launch(command: str, cwd: str, sandbox: SandboxSettings | None, hide: BotFolders | None) -> Launch:
    """The command line: /bin/sh inside the sandbox; else, shielded from the bot when `hide` names its folders;
    else (a tool used without a bot around it) /bin/sh itself."""
    if sandbox is not None:
        return launch(sandbox, command, cwd, command_environment(cwd))
    if hide is not None:
        return shield([SHELL, "-c", command], cwd, hide)
    return Launch([SHELL, "-c", command])


_releasing: set[asyncio.Task[None]] = set()  # cleanups that outlive a cancelled call


def _release_later(release: Release) -> None:
    task = asyncio.ensure_future(release())
    _releasing.add(task)
    task.add_done_callback(_releasing.discard)


async def _spawn(
    command: str, cwd: str, sandbox: SandboxSettings | None = None, hide: BotFolders | None = None
) -> tuple[asyncio.subprocess.Process, Release]:
    """Start `command` under /bin/sh in `cwd` (inside the sandbox when `sandbox` is set), in its own process group,
    with stdout and stderr as one pipe; also returns what to clean up once it has ended.

    The command runs as soon as the process exists, before its pipes are connected; a cancellation in between
    would otherwise leave it (and whatever it started) running with nobody to stop it, so its group is killed.
    A sandbox (bwrap) is the group's leader and dies with its sandboxed command, and the command with it.
    """
    await asyncio.to_thread(Path(cwd).mkdir, parents=True, exist_ok=True)
    how = _launch(command, cwd, sandbox, hide)
    starting = asyncio.ensure_future(
        asyncio.create_subprocess_exec(
            *how.argv,
            cwd=cwd,
            env=command_environment(cwd),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
    )
    try:
        return await asyncio.shield(starting), how.release
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            process = await starting
            os.killpg(process.pid, signal.SIGKILL)
        _release_later(how.release)
        raise
    except BaseException:
        _release_later(how.release)
        raise


Outcome = Literal["exited", "timeout", "cancelled"]


class _Job:
    """One started command: its output read as it comes, its process group killable as a whole."""

    def __init__(
        self,
        spawned: tuple[asyncio.subprocess.Process, Release],
        output_limit: int,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.process, self._release = spawned
        self.output = OutputBuffer(output_limit)
        self.sleep = sleep
        self.started = time.monotonic()
        self._reader = asyncio.create_task(self._pump())

    async def _pump(self) -> None:
        stream = self.process.stdout
        assert stream is not None
        while chunk := await stream.read(READ_CHUNK):
            self.output.feed(chunk)

    def kill(self) -> None:
        """SIGKILL the whole process group (the shell was its leader, so the group id is its pid)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is already gone
            os.killpg(self.process.pid, signal.SIGKILL)

    async def _exit(self) -> None:
        """Return once the shell has exited, even while something it left behind holds the output pipe open.

        `Process.wait()` also waits for the pipe to close, which a leftover `cmd &` could delay until the timeout.
        """
        while self.process.returncode is None:
            await asyncio.sleep(EXIT_POLL_SECONDS)

    async def run(self, timeout: float | None, cancelled: asyncio.Event | None = None) -> Outcome:
        """Wait for the command to end, for `timeout`, or for `cancelled`; then read the last of its output.

        Whatever happens, nothing of the process group is left running afterwards: on a timeout or
        cancellation it is killed, and so is anything the command left behind when it ended.
        """
        waiter = asyncio.ensure_future(self.process.wait())  # exited and the pipe closed: the usual end
        exited = asyncio.ensure_future(self._exit())
        stopper = asyncio.ensure_future(cancelled.wait()) if cancelled is not None else None
        timer = asyncio.ensure_future(self.sleep(timeout)) if timeout is not None else None
        watched: set[asyncio.Future[Any]] = {w for w in (waiter, exited, stopper, timer) if w is not None}
        try:
            done, _ = await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            self.abandon()
            waiter.cancel()
            raise
        finally:
            for watcher in (exited, stopper, timer):
                if watcher is not None:
                    watcher.cancel()
        ended = waiter in done or exited in done
        outcome: Outcome = "exited" if ended else "cancelled" if stopper in done else "timeout"
        self.kill()
        # Once every member is gone the pipe closes; one that escaped the group (setsid) could hold it open
        # forever, so the wait is bounded.
        pending = {task for task in (waiter, self._reader) if not task.done()}
        if pending:
            _, still = await asyncio.wait(pending, timeout=SETTLE_SECONDS)
            for task in still:
                task.cancel()
            if still:  # asyncio has no public way to let go of a subprocess's pipes
                transport = getattr(self.process, "_transport", None)
                if transport is not None:
                    transport.close()
        await self._release()
        return outcome

    def abandon(self) -> None:
        """Kill the group and stop reading (the caller is being cancelled and cannot wait)."""
        self.kill()
        self._reader.cancel()
        _release_later(self._release)

    @property
    def duration_ms(self) -> int:
        return int((time.monotonic() - self.started) * 1000)


class BackgroundProcess:
    """A command started with `background: true`, as the process table keeps it."""

    def __init__(self, id: str, command: str, session_key: str, cwd: str, job: _Job, timeout: float) -> None:
        self.id = id
        self.command = command
        self.session_key = session_key
        self.cwd = cwd
        self.timeout = timeout
        self.status: ProcessStatus = "running"
        self.exit_code: int | None = None
        self.finished: float | None = None
        self._job = job
        self.task = asyncio.create_task(self._supervise())

    @property
    def pid(self) -> int:
        return self._job.process.pid

    @property
    def output(self) -> OutputBuffer:
        return self._job.output

    @property
    def age_seconds(self) -> int:
        return int(time.monotonic() - self._job.started)

    async def _supervise(self) -> None:
        outcome = await self._job.run(self.timeout)
        self.exit_code = self._job.process.returncode
        self.finished = time.monotonic()
        if self.status == "running":
            self.status = "timeout" if outcome == "timeout" else "exited"

    def kill(self) -> None:
        """Kill the group now; the status says "killed" unless the command had already ended."""
        if self.status == "running" and self._job.process.returncode is None:
            self.status = "killed"
            self._job.kill()

    def summary(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "command": self.command,
            "status": self.status,
            "exit_code": self.exit_code,
            "age_seconds": self.age_seconds,
        }


class ProcessTable:
    """The background commands of all runs, keyed by handle; each handle belongs to one session key."""

    def __init__(self, *, sleep: Sleep = asyncio.sleep, hide: BotFolders | None = None) -> None:
        self._entries: dict[str, BackgroundProcess] = {}
        # The bot's own folders (its config's, its state): every command of a bot runs shielded from them and from
        # the bot's processes; None only where no bot is around (a tool used on its own).
        self.hide = hide
        self._closed = False
        self.sleep = sleep  # waits out each command's timeout

    def running(self, session_key: str) -> int:
        """How many background commands of `session_key` are still running."""
        return sum(1 for e in self._entries.values() if e.session_key == session_key and e.status == "running")

    async def start(
        self,
        command: str,
        *,
        session_key: str,
        cwd: str,
        timeout: float,
        output_limit: int,
        sandbox: SandboxSettings | None = None,
    ) -> BackgroundProcess:
        """Start `command` in the background (same shell, environment, sandbox and process group rules as `exec`)."""
        if self._closed:
            raise RuntimeError("the process table is closed")
        self._prune()
        handle = "p_" + secrets.token_hex(4)
        while handle in self._entries:
            handle = "p_" + secrets.token_hex(4)
        job = _Job(await _spawn(command, cwd, sandbox, self.hide), output_limit, self.sleep)
        entry = BackgroundProcess(handle, command, session_key, cwd, job, timeout)
        self._entries[handle] = entry
        return entry

    def get(self, id: str) -> BackgroundProcess | None:
        return self._entries.get(id)

    def list(self, session_key: str) -> Sequence[BackgroundProcess]:
        """The background commands of one session, oldest first."""
        return [entry for entry in self._entries.values() if entry.session_key == session_key]

    async def kill(self, id: str) -> BackgroundProcess | None:
        """Kill a background command's process group and wait (briefly) for it to be gone."""
        entry = self._entries.get(id)
        if entry is None:
            return None
        entry.kill()
        await asyncio.wait({entry.task})  # bounded: the supervisor gives up on the pipe after SETTLE_SECONDS
        return entry

    async def close(self) -> None:
        """Kill every background command (at shutdown); no new ones can start."""
        self._closed = True
        for entry in self._entries.values():
            entry.kill()
        tasks = {entry.task for entry in self._entries.values() if not entry.task.done()}
        if tasks:
            await asyncio.wait(tasks)

    def _prune(self) -> None:
        finished = [entry for entry in self._entries.values() if entry.status != "running"]
        for entry in finished[: max(len(finished) - MAX_FINISHED + 1, 0)]:
            del self._entries[entry.id]


class ExecArgs(BaseModel):
    """The exec tool's parameters."""

    command: str = Field(
        min_length=1,
        description=(
            "One shell command line, run by /bin/sh in your workspace, e.g. `ls -la`, `python3 script.py`, "
            "`grep -rn TODO src | head -50`. Pipes, redirections, && and ; work."
        ),
    )
    timeout: float | None = Field(
        default=None,
        ge=1,
        le=MAX_TIMEOUT,
        description=(
            "Seconds before the command (and everything it started) is killed. Default 60 for normal commands "
            f"and {int(BACKGROUND_TIMEOUT)} for background ones; at most {int(MAX_TIMEOUT)}."
        ),
    )
    background: bool = Field(
        default=False,
        description=(
            "Start the command and return at once with an id, for servers, watchers and long jobs; read its "
            "output and stop it with the `process` tool."
        ),
    )


class ExecTool(Tool):
    name: ClassVar[str] = "exec"
    label: ClassVar[str] = "Run a command"
    group: ClassVar[str | None] = "group:runtime"
    owner_only: ClassVar[bool] = False
    description: ClassVar[str] = (
        "Run a shell command line (/bin/sh -c) in your workspace folder and get its exit code and output "
        "(stdout and stderr together, in order). Commands may need a person's approval first and can be "
        "refused: then the status is 'denied' or 'expired', the command did NOT run, and you should not simply "
        "retry it — ask, or do it another way. The environment is minimal (PATH, HOME, locale; no tokens or keys) "
        "and stdin is empty, so interactive commands cannot prompt. Outside an owner's direct messages a command "
        "may run in a sandbox that sees only your workspace and, unless allowed, no network (the result says so). "
        "A command is killed, with everything it started, when its timeout passes (default 60 s); whatever it "
        "leaves running when it ends is killed too. "
        "Long output is cut: its beginning and end are kept, with a line saying how many bytes were cut between "
        "them, so filter it (grep, head, tail) when you can. For servers, watchers and long jobs set "
        "background: true: you get an id at once, and the `process` tool lists, reads and kills them."
    )
    parameters: ClassVar[type[BaseModel]] = ExecArgs

    def __init__(
        self,
        authorize: Authorize,
        processes: ProcessTable,
        *,
        output_limit: int = 64 * 1024,
        default_timeout: float = 60.0,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.authorize = authorize
        self.processes = processes
        self.output_limit = output_limit
        self.default_timeout = default_timeout
        self.sleep = sleep  # waits out a foreground command's timeout

    async def execute(self, call_id: str, args: ExecArgs, ctx: ToolContext) -> ToolResult:
        # Checked before asking: no one should approve a command that cannot run.
        cwd = ctx.run.workspace
        if cwd is None:
            return error_result(self.name, NO_WORKSPACE)
        if ctx.run.sandbox is not None:  # never run unsandboxed what should be sandboxed
            problem = await sandbox_problem(ctx.run.sandbox)
            if problem is not None:
                return error_result(self.name, f"cannot run commands in the sandbox: {problem}")
        elif self.processes.hide is not None:  # nor unshielded what should be shielded from the bot
            problem = await shield_problem()
            if problem is not None:
                return error_result(self.name, f"cannot run commands apart from the bot: {problem}")
        if args.background and self.processes.running(ctx.run.session_key) >= MAX_RUNNING_PER_SESSION:
            return error_result(
                self.name,
                f"{MAX_RUNNING_PER_SESSION} background commands are already running here; kill one with `process`",
            )
        verdict = await self.authorize(args.command, ctx)
        if not verdict.allowed:
            status = "expired" if verdict.status == "expired" else "denied"
            reason = verdict.reason or ("nobody approved it in time" if status == "expired" else "not approved")
            return json_result({"status": status, "command": args.command, "reason": reason}, is_error=True)
        if ctx.cancelled.is_set():
            return json_result({"status": "cancelled", "command": args.command}, is_error=True)
        if args.background:
            return await self._start_background(args, ctx, cwd)
        return await self._run(args, ctx, cwd)

    async def _start_background(self, args: ExecArgs, ctx: ToolContext, cwd: str) -> ToolResult:
        entry = await self.processes.start(
            args.command,
            session_key=ctx.run.session_key,
            cwd=cwd,
            timeout=args.timeout or BACKGROUND_TIMEOUT,
            output_limit=self.output_limit,
            sandbox=ctx.run.sandbox,
        )
        payload = {"status": "running", "id": entry.id, "pid": entry.pid, "command": args.command}
        return json_result(payload | _sandbox_note(ctx))

    async def _run(self, args: ExecArgs, ctx: ToolContext, cwd: str) -> ToolResult:
        timeout = args.timeout or self.default_timeout
        job = _Job(await _spawn(args.command, cwd, ctx.run.sandbox, self.processes.hide), self.output_limit, self.sleep)
        try:
            outcome = await job.run(timeout, ctx.cancelled)
        except asyncio.CancelledError:
            job.abandon()
            raise
        common = {
            "output": job.output.text(),
            "duration_ms": job.duration_ms,
            "cwd": cwd,
            "truncated": job.output.truncated,
            **_sandbox_note(ctx),
        }
        if outcome == "timeout":
            return json_result({"status": "timeout", "timeout_seconds": timeout, **common}, is_error=True)
        if outcome == "cancelled":
            return json_result({"status": "cancelled", **common}, is_error=True)
        code = job.process.returncode
        exit_code = -1 if code is None else code
        status = "ok" if exit_code == 0 else "error"
        return json_result({"status": status, "exit_code": exit_code, **common}, is_error=exit_code != 0)


def _sandbox_note(ctx: ToolContext) -> dict[str, Any]:
    """Tells the model, when so, that the command ran in the sandbox (only the workspace, maybe no network)."""
    sandbox = ctx.run.sandbox
    return {} if sandbox is None else {"sandbox": {"network": sandbox.network}}


class ProcessArgs(BaseModel):
    """The process tool's parameters."""

    action: Literal["list", "read", "kill"] = Field(
        description="'list' your background commands, 'read' one's output and status, or 'kill' one."
    )
    id: str | None = Field(default=None, description="The id exec returned, e.g. 'p_1a2b3c4d'; needed for read, kill.")

    @model_validator(mode="after")
    def _id_needed(self) -> ProcessArgs:
        if self.action != "list" and not self.id:
            raise ValueError(f"'{self.action}' needs the id exec returned")
        return self


class ProcessTool(Tool):
    name: ClassVar[str] = "process"
    label: ClassVar[str] = "Background commands"
    group: ClassVar[str | None] = "group:runtime"
    owner_only: ClassVar[bool] = False
    description: ClassVar[str] = (
        "Manage the commands you started with exec and background: true. 'list' shows this conversation's "
        "background commands (id, command, status running/exited/killed/timeout, exit code, age in seconds); "
        "'read' returns one's output so far (beginning and end kept when long) and its status and exit code; "
        "'kill' stops it and everything it started. A background command is killed after its timeout "
        f"(default {int(BACKGROUND_TIMEOUT)} s) and when the bot stops."
    )
    parameters: ClassVar[type[BaseModel]] = ProcessArgs

    def __init__(self, processes: ProcessTable) -> None:
        self.processes = processes

    async def execute(self, call_id: str, args: ProcessArgs, ctx: ToolContext) -> ToolResult:
        session_key = ctx.run.session_key
        if args.action == "list":
            entries = self.processes.list(session_key)
            return json_result({"processes": [entry.summary() for entry in entries]})
        assert args.id is not None  # the validator saw to it
        entry = self.processes.get(args.id)
        if entry is None or entry.session_key != session_key:  # other sessions' processes do not exist here
            return error_result(self.name, f"no such process: {args.id}")
        if args.action == "kill":
            was = entry.status
            await self.processes.kill(entry.id)
            payload = entry.summary()
            if was != "running":
                payload["note"] = f"it had already ended ({was})"
            return json_result(payload)
        payload = entry.summary()
        payload["output"] = entry.output.text()
        payload["truncated"] = entry.output.truncated
        return json_result(payload)
