"""What the store keeps so that a turn run again after a crash does nothing twice, on both backends (tests/stores.py):
where a message's files went in the workspace (found by any journal row of a folded batch, gone with the row), and
the answer to a sessions_send, recorded once (first writer wins) and kept for a day."""

from __future__ import annotations

from helpers import FakeClock
from stores import AnyStore, Backend

from bot.store import InboundRecord
from bot.store.answers import ANSWERS_KEPT_SECONDS


async def inbound(store: AnyStore, message_id: str) -> InboundRecord:
    record = await store.record_inbound("telegram", "default", "42", message_id, {"text": message_id})
    assert record is not None
    return record


async def test_a_files_place_is_found_by_any_message_of_its_batch_and_goes_with_its_journal_row(
    store: AnyStore, backend: Backend, clock: FakeClock
) -> None:
    first, newest = await inbound(store, "1"), await inbound(store, "2")
    await store.set_inbox_file(newest.id, "file-a", "inbox/2026-11-25/photo.jpg", complete=False)
    found = await store.inbox_file([first.id, newest.id], "file-a")
    assert found is not None and (found.path, found.complete) == ("inbox/2026-11-25/photo.jpg", False)

    await store.set_inbox_file(newest.id, "file-a", "inbox/2026-11-25/photo.jpg", complete=True)
    reopened = await backend.reopen(store)  # a restarted process finds it
    found = await reopened.inbox_file([newest.id], "file-a")
    assert found is not None and found.complete
    assert await reopened.inbox_file([first.id], "file-a") is None  # another message's file is not this one's
    assert await reopened.inbox_file([newest.id], "file-b") is None
    assert await reopened.inbox_file([], "file-a") is None

    await reopened.finish_inbound([first.id, newest.id], "done")
    clock.advance(2.0)
    assert await reopened.prune_inbound(older_than_seconds=1.0) == 2
    assert await backend.query("SELECT count(*) FROM inbox_files") == [(0,)]


async def test_the_first_answer_recorded_stands_and_old_ones_go(
    store: AnyStore, backend: Backend, clock: FakeClock
) -> None:
    assert await store.get_answer("send:1:1") == (False, None)
    assert await store.put_answer("send:1:1", "All green.")
    assert not await store.put_answer("send:1:1", None)  # the sender stopped waiting too late: the answer stands
    assert await (await backend.reopen(store)).get_answer("send:1:1") == (True, "All green.")

    other = await backend.open()
    assert await other.put_answer("send:1:2", None)  # stopped waiting first: the answer goes back as a message
    assert not await other.put_answer("send:1:2", "late")
    assert await other.get_answer("send:1:2") == (True, None)

    clock.advance(ANSWERS_KEPT_SECONDS + 1)
    assert await other.put_answer("send:2:1", "new")  # answers older than a day go as new ones come
    assert await other.get_answer("send:1:1") == (False, None)
    assert await other.get_answer("send:2:1") == (True, "new")
