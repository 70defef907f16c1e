"""`bot run` serves for days: its garbage collector is set for that while it serves, and set back afterwards."""

from __future__ import annotations

import gc

import pytest

from bot.cli.run import YOUNG_COLLECTION_THRESHOLD, long_running_collector


def test_while_serving_start_up_objects_are_frozen_and_young_collections_wait_longer() -> None:
    before = gc.get_threshold()
    with long_running_collector():
        assert gc.get_freeze_count() > 0  # what start-up built is left out of every collection
        assert gc.get_threshold() == (YOUNG_COLLECTION_THRESHOLD, *before[1:])
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_the_collector_is_set_back_even_when_serving_fails() -> None:
    before = gc.get_threshold()
    with pytest.raises(RuntimeError), long_running_collector():
        raise RuntimeError("a channel failed")
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0
