"""The leak check (a pytest plugin): after the suite, no process it started is still running and no temporary file or
folder is left outside pytest's own; otherwise the run fails and names what leaked and which test started it.

Under pytest-xdist every worker checks what its own tests left (their processes, its own scratch folder) and hands
what it found to the controller, which fails the run; the controller then checks the run as a whole once the workers
are gone: a process a crashed worker left comes to it (it is the subreaper above the workers), and so does a worker's
scratch folder that was never removed."""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

GRACE = 10.0  # seconds a process may take to finish exiting after the last test; only a leak outlives it
PR_SET_CHILD_SUBREAPER = 36


@dataclass(frozen=True)
class Leftover:
    pid: int
    command: str
    started: float  # seconds since boot


class LeakCheck:
    """Makes this process the parent of every orphan it leaves (Linux's child subreaper), so nothing it started can
    slip away by double-forking, and gives the tests a temporary folder of their own to look into afterwards."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.from_workers: list[str] = []  # what the xdist workers found, when this is their controller
        _become_subreaper()
        # pytest's own folders stay where they are; everything else the tests make goes into `scratch`
        os.environ.setdefault("PYTEST_DEBUG_TEMPROOT", tempfile.gettempdir())
        self.scratch = Path(tempfile.mkdtemp(prefix="switchboard-tests-"))
        os.environ["TMPDIR"] = str(self.scratch)  # for the processes the tests start
        tempfile.tempdir = str(self.scratch)  # for this one
        self.tests: list[tuple[float, str]] = []  # (seconds since boot when it began, test id)

    @pytest.hookimpl
    def pytest_runtest_logstart(self, nodeid: str) -> None:
        self.tests.append((_since_boot(), nodeid))

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: object, error: object) -> None:
        """An xdist worker is done: what its own check found (sent back in its `workeroutput`) fails this run."""
        self.from_workers += (getattr(node, "workeroutput", None) or {}).get("leaks", [])

    # Last: after the session's fixtures are torn down and, in an xdist controller, after its workers have exited.
    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        problems = [f"process {p.pid} ({p.command}), started during {self._test_at(p.started)}" for p in self._wait()]
        problems += [f"temporary {path}" for path in sorted(self.scratch.iterdir())]
        shutil.rmtree(self.scratch, ignore_errors=True)
        tempfile.tempdir = None
        workeroutput = getattr(self.config, "workeroutput", None)
        if workeroutput is not None:  # an xdist worker: its controller reports (a worker's output is not shown)
            worker = os.environ.get("PYTEST_XDIST_WORKER")
            workeroutput["leaks"] = [f"{problem} (worker {worker})" for problem in problems]
            return
        problems = self.from_workers + problems
        if not problems:
            return
        reporter = session.config.pluginmanager.getplugin("terminalreporter")
        heading = "LEAK CHECK FAILED: the suite left behind (processes now killed, files removed):"
        for line in ["", heading, *(f"  {problem}" for problem in problems)]:
            reporter.write_line(line, red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def _wait(self) -> list[Leftover]:
        """The processes still running under this one after GRACE seconds, each killed once named."""
        deadline = time.monotonic() + GRACE
        while (left := descendants()) and time.monotonic() < deadline:
            time.sleep(0.05)
        for process in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)
        return left

    def _test_at(self, started: float) -> str:
        # /proc counts a start time in whole clock ticks, so it reads up to one tick early.
        during = [test for began, test in self.tests if began <= started + 1 / os.sysconf("SC_CLK_TCK")]
        return during[-1] if during else "collection"


def _become_subreaper() -> None:
    with contextlib.suppress(OSError, AttributeError):  # not Linux: orphans go to init; only descendants are seen
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _since_boot() -> float:
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def descendants(root: int | None = None) -> list[Leftover]:
    """Live (not zombie) processes below `root` (default: this process), from /proc."""
    root = os.getpid() if root is None else root
    parents: dict[int, int] = {}
    details: dict[int, Leftover] = {}
    ticks = os.sysconf("SC_CLK_TCK")
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            command = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone meanwhile
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) ": state, ppid, ..., starttime is 20th
        if fields[0] in ("Z", "X"):
            continue
        pid = int(entry)
        parents[pid] = int(fields[1])
        name = command.strip()[:200] or stat[stat.index("(") : stat.rindex(")") + 1]  # a kernel thread has no cmdline
        details[pid] = Leftover(pid, name, int(fields[19]) / ticks)

    def below_root(pid: int) -> bool:
        while pid in parents:
            pid = parents[pid]
            if pid == root:
                return True
        return False

    return sorted((details[pid] for pid in details if below_root(pid)), key=lambda leftover: leftover.pid)


def pytest_configure(config: pytest.Config) -> None:
    if os.name == "posix" and Path("/proc").is_dir():
        config.pluginmanager.register(LeakCheck(config), "leak-check")
