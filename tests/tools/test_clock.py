"""The host's time zone as messages and prompts name it: read once a minute, not at every message."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from types import SimpleNamespace

import pytest

from tools import clock


@pytest.fixture
def host_zone(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], None]]:
    """Set the host's zone (a POSIX TZ string: no zone files needed); the process's own is put back after."""

    def set_zone(tz: str) -> None:
        monkeypatch.setenv("TZ", tz)
        time.tzset()

    yield set_zone
    monkeypatch.undo()
    time.tzset()
    clock._host = None


def test_the_hosts_zone_is_read_again_once_the_minute_turns(
    monkeypatch: pytest.MonkeyPatch, host_zone: Callable[[str], None]
) -> None:
    now = [1_800_000_000.0]  # the start of a minute
    monkeypatch.setattr(clock, "time", SimpleNamespace(time=lambda: now[0]))
    host_zone("UTC0")
    clock._host = None
    assert clock.local_zone().utcoffset(None) == timedelta(0)
    host_zone("IST-5:30")
    now[0] += 59
    assert clock.local_zone().utcoffset(None) == timedelta(0)  # the same minute: as it was read
    now[0] += 1
    assert clock.local_zone().utcoffset(None) == timedelta(hours=5, minutes=30)
    assert clock.zone(None) is clock.local_zone()
