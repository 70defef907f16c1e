"""Telegram through a real `bot run` process: the real adapter on python-telegram-bot, the fake Bot API, the
fake LLM. What a person on Telegram sees: answers in DMs, silence in groups unless mentioned, topics routed
by their group, long answers in chunks, pairing for strangers, bots ignored, 429s waited out, no duplicates."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from fakes.llm import FakeLLM
from fakes.telegram import FakeTelegram
from helpers import asked, bot_run

OWNER = 4242


@pytest.fixture
async def bot(tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram) -> AsyncIterator[Path]:
    gid = str(fake_telegram.group_id)
    config = {
        "defaults": {"model": "fake/m", "workspace_root": str(tmp_path / "ws")},
        "agents": [{"id": "main", "default": True}, {"id": "team"}],
        "bindings": [
            # the account is named: a binding without one matches only the account called `default`
            {"agent": "team", "match": {"channel": "telegram", "account": "main", "peer": {"kind": "group", "id": gid}}}
        ],
        "providers": {"fake": {"kind": "openai", "base_url": fake_llm.openai_base_url}},
        "owners": [f"telegram:{OWNER}"],
        "channels": {"telegram": {"accounts": {"main": {
            "token": fake_telegram.token, "api_base_url": fake_telegram.url, "poll_timeout": 1, "streaming": "off",
        }}}},
        "session": {"queue": {"mode": "followup"}},
    }  # fmt: skip
    async with bot_run(config, tmp_path, "channel telegram account main started") as path:
        yield path


async def test_owner_dm_group_mentions_topics_and_chunks(
    bot: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg = fake_telegram
    fake_llm.script("Hello owner.", "Team here.", "Topic answer.", "x" * 9000)
    await tg.private_message("hi", user_id=OWNER, name="Owner")
    assert await tg.wait_sent(OWNER, 1) == ["Hello owner."]

    await tg.group_message("just chatting")  # no mention: ignored
    await tg.group_message("what's up?", mention=True)
    await tg.wait_sent(tg.group_id, 1)
    await tg.topic_message("in the topic", mention=True)
    await tg.wait_sent(tg.group_id, 2)
    assert tg.sent[tg.group_id] == ["Team here.", "Topic answer."]
    assert asked(fake_llm)[1:] == ["Bo: @switchboard_test_bot what's up?", "Bo: @switchboard_test_bot in the topic"]
    systems = [request.body["messages"][0]["content"] for request in fake_llm.requests]
    assert [system.split(",")[0] for system in systems] == ["You are main", "You are team", "You are team"]
    topic_reply = [call for call in tg.calls("sendMessage") if call.get("message_thread_id") == 77]
    assert len(topic_reply) == 1  # the topic's answer went into the topic

    await tg.private_message("a long one please", user_id=OWNER, name="Owner")
    chunks = await tg.wait_sent(OWNER, 4)
    assert [len(chunk) for chunk in chunks[1:]] == [4096, 4096, 808]


async def test_strangers_pair_bots_are_ignored_429s_wait_and_nothing_is_answered_twice(
    bot: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg = fake_telegram
    await tg.private_message("hello?", user_id=555, name="Stranger")
    [code_message] = await tg.wait_sent(555, 1)
    code = re.search(r"pairing code is ([A-Z2-9]{8})", code_message)
    assert code is not None and fake_llm.requests == []

    fake_llm.script("Yes, you may.")
    await tg.private_message(f"/pair {code.group(1)}", user_id=OWNER, name="Owner")
    assert await tg.wait_sent(OWNER, 1) == ["Approved Stranger."]
    await tg.wait_sent(555, 2)

    await tg.private_message("beep", user_id=777, name="Robot", is_bot=True)  # another bot: never answered
    tg.fail_next("sendMessage", 1, retry_after=1)
    update = await tg.private_message("may I?", user_id=555, name="Stranger")
    await tg.redeliver(update)  # the same message delivered again
    await tg.wait_sent(555, 3)
    await asyncio.sleep(2.0)
    assert tg.sent[555][1] == "You're approved: I'm listening now."
    assert tg.sent[555][2] == "Yes, you may."
    assert len(tg.sent[555]) == 3  # one answer for the message delivered twice
    assert tg.sent.get(777, []) == []
    assert asked(fake_llm) == ["may I?"]
