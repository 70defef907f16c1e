"""A streamed reply on each platform, end to end through a real Gateway (its adapter built from the config as `bot run`
builds it, on the platform's fake server; the fake LLM; a SQLite state directory): the bot shows it is typing, the
answer shows in one message while the model is still writing, in the platform's markup, and stays the one message
when the model finishes. How each adapter edits, chunks and marks up: test_<platform>.py."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from configs import config_of
from fakes.llm import FakeLLM, Reply
from helpers import eventually, finished, read_state
from platforms import Platform

from bot.app import App
from bot.gateway.adapters import build_adapters
from bot.gateway.process import Gateway
from bot.plugins import Plugins
from bot.store import SqliteStore

ANSWER = "Hello, **Ann**!"
SAID = {"telegram": "Hello, Ann!", "discord": ANSWER, "slack": "Hello, *Ann*!"}  # as the platform shows it
SENT = {"telegram": "Hello, <b>Ann</b>!", "discord": ANSWER, "slack": "Hello, *Ann*!"}  # in its markup


@contextlib.asynccontextmanager
async def serving(platform: Platform, llm: FakeLLM, tmp_path: Path) -> AsyncIterator[Path]:
    """A real Gateway serving the platform's account (dm_policy open, streaming partial); yields its state directory.
    Stopped at the end."""
    config = config_of(
        tmp_path, llm, platform.part(dm_policy="open", streaming="partial"),
        providers={"fake": {"timeout_seconds": 60}},
        session={"queue": {"mode": "followup", "debounce_ms": 20}},
    )  # fmt: skip
    adapters, skipped = build_adapters(config, Plugins())
    assert skipped == [] and len(adapters) == 1
    state = tmp_path / "state"
    store = await SqliteStore.open(state)
    gateway = Gateway(App(config, state), store, adapters)
    try:
        await gateway.start()
        yield state
    finally:
        await gateway.stop(0.5)
        await store.close()


async def test_a_dm_gets_a_reply_streamed_into_one_message_in_the_platforms_markup(
    platform: Platform, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    fake_llm.script(Reply.held(ANSWER))  # the answer written, then the model holds until the test releases it
    async with serving(platform, fake_llm, tmp_path) as state:
        await platform.dm("hi there")
        await platform.confirmed()
        if platform.shows_typing:
            await eventually(platform.typed, "typing in the DM while the model answers")
        # the model has not finished: what shows was streamed
        await platform.wait_said(lambda said: said == [SAID[platform.name]])
        fake_llm.release()
        await finished(state)

        assert platform.said() == [SAID[platform.name]]
        assert platform.sent() == [SENT[platform.name]]
        # one message, into the DM (on Slack the DM's channel, which the adapter remembered), in no thread
        assert platform.posted_to() == [(platform.chat(), None)]
        assert len(fake_llm.requests) == 1
        assert read_state(state, "SELECT agent FROM sessions") == [("main",)]
