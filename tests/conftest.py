"""Shared pytest setup: the fake servers in tests/fakes are available as fixtures everywhere (and `platform`, each of
the three chat platforms in turn: tests/platforms.py), the leak check (tests/leaks.py) fails the run if the suite
leaves a process or a temporary file behind, and the hang guard (tests/hangs.py) fails a test that hangs instead of
letting it hold the run."""

import os

import pytest

pytest_plugins = [
    "fakes.llm",
    "fakes.bridge",
    "fakes.slack",
    "fakes.telegram",
    "fakes.discord",
    "platforms",
    "leaks",
    "hangs",
    "postgres",
    "stores",
    "pytester",
]


@pytest.hookimpl(optionalhook=True)  # xdist's hook: absent when xdist is not loaded (`-p no:xdist`)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """`-n auto` (`make test`): two workers per core. Much of the suite waits on real processes and servers, so one
    worker per core leaves the cores idle a third of the time (measured on 2 cores: 330 s with 2 workers, 240 s with
    4). PYTEST_XDIST_AUTO_NUM_WORKERS still decides when set."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # xdist's own reading of it
    return 2 * len(os.sched_getaffinity(0))
