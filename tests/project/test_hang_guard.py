"""The hang guard itself: a test that hangs fails, showing where each of its tasks waited, and the run goes on; one
stuck outside an event loop is interrupted where it is."""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent.parent


def inner_suite(pytester: pytest.Pytester, body: str) -> pytest.RunResult:
    """`body` as a test file of its own, run by a pytest process of its own with the hang guard at one second."""
    pytester.makeconftest(
        f"import sys\nsys.path.insert(0, {str(TESTS)!r})\npytest_plugins = ['hangs']\n\n"
        "def pytest_configure(config):\n    import hangs\n    hangs.HANG_SECONDS = 1.0\n"
    )
    pytester.makepyfile(test_inner=body)
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist", "-o", "asyncio_mode=auto")


def test_an_async_test_that_hangs_fails_with_its_tasks_and_the_run_goes_on(pytester: pytest.Pytester) -> None:
    result = inner_suite(
        pytester,
        """
import asyncio

async def wait_for_nothing():
    await asyncio.Event().wait()

async def test_hangs():
    await asyncio.gather(wait_for_nothing(), asyncio.sleep(600))

def test_after():
    pass
""",
    )
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines(
        ["*HUNG: still running after 1 s*", "*--- task *", "*test_inner.py:* in wait_for_nothing*"]
    )


def test_a_test_stuck_outside_an_event_loop_is_interrupted_even_with_sigint_ignored(pytester: pytest.Pytester) -> None:
    # SIGINT ignored, as in everything a non-interactive shell starts in the background (as CI may start the suite).
    result = inner_suite(
        pytester,
        """
import signal
import time

signal.signal(signal.SIGINT, signal.SIG_IGN)

def test_stuck():
    time.sleep(600)
""",
    )
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*KeyboardInterrupt: the hang guard: * at *test_inner.py:7 in test_stuck*"])
