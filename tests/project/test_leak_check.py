"""The leak check itself: a suite that leaves a process or a temporary folder behind fails, naming what it left and
the test that started it; a clean suite passes. Each case runs as one pytest process and under pytest-xdist (two
workers), where the workers' findings reach the controller and a crashed worker's orphans are still caught."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
from helpers import eventually

TESTS = Path(__file__).resolve().parent.parent


# How the inner suite runs: in one process, or spread over two xdist workers as `make test` runs the real one.
RUNNERS = {"one-process": ["-p", "no:xdist"], "xdist": ["-n", "2"]}


@pytest.fixture(params=list(RUNNERS))
def runner(request: pytest.FixtureRequest) -> list[str]:
    return RUNNERS[request.param]


def inner_suite(pytester: pytest.Pytester, runner: list[str], body: str) -> pytest.RunResult:
    """`body` as a test file of its own, run by a pytest process of its own with the leak check loaded."""
    pytester.makeconftest(
        f"import sys\nsys.path.insert(0, {str(TESTS)!r})\npytest_plugins = ['leaks']\n\n"
        "def pytest_configure(config):\n    import leaks\n    leaks.GRACE = 1.0\n"
    )
    pytester.makepyfile(test_inner=body)
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *runner)


def running(marker: str) -> list[int]:
    """Live processes whose command line holds `marker`."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            command = Path(f"/proc/{entry}/cmdline").read_bytes()
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in command and state != "Z":
            found.append(int(entry))
    return found


async def test_a_process_left_running_fails_the_run_names_its_test_and_is_killed(
    pytester: pytest.Pytester, runner: list[str]
) -> None:
    marker = f"planted-{uuid.uuid4().hex}"
    # Started through a shell that exits at once: the sleeper is an orphan, the case a parent-only check misses.
    result = inner_suite(
        pytester,
        runner,
        f"""
import subprocess
import sys

def test_clean():
    pass

def test_plants_a_process():
    sleeper = f"exec {{sys.executable}} -c 'import time; time.sleep(600)' {marker} &"
    subprocess.run(["sh", "-c", sleeper], check=True)
""",
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        ["*LEAK CHECK FAILED*", f"*process * (*{marker}*), started during *test_plants_a_process*"]
    )
    result.assert_outcomes(passed=2)
    await eventually(lambda: running(marker) == [], "the planted process killed")


def test_a_temporary_folder_left_behind_fails_the_run(pytester: pytest.Pytester, runner: list[str]) -> None:
    result = inner_suite(
        pytester,
        runner,
        """
import tempfile

def test_leaves_a_folder():
    tempfile.mkdtemp(prefix="forgotten-")
""",
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*LEAK CHECK FAILED*", "*temporary *forgotten-*"])


def test_a_suite_that_cleans_up_passes(pytester: pytest.Pytester, runner: list[str]) -> None:
    result = inner_suite(
        pytester,
        runner,
        """
import subprocess
import tempfile

def test_tidy(tmp_path):
    subprocess.run(["sleep", "0"], check=True)
    with tempfile.TemporaryDirectory():
        pass
    (tmp_path / "kept by pytest").write_text("fine")
""",
    )
    assert result.ret == pytest.ExitCode.OK
    assert "LEAK CHECK" not in result.stdout.str()


async def test_a_process_left_by_a_worker_that_crashed_is_caught_by_the_controller(pytester: pytest.Pytester) -> None:
    marker = f"planted-{uuid.uuid4().hex}"
    # The worker dies before its own check can run: its orphan comes to the controller, the subreaper above it.
    result = inner_suite(
        pytester,
        RUNNERS["xdist"],
        f"""
import os
import subprocess
import sys

def test_plants_a_process_and_dies():
    sleeper = f"exec {{sys.executable}} -c 'import time; time.sleep(600)' {marker} &"
    subprocess.run(["sh", "-c", sleeper], check=True)
    os._exit(1)
""",
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*LEAK CHECK FAILED*", f"*process * (*{marker}*), started during *"])
    await eventually(lambda: running(marker) == [], "the planted process killed")
