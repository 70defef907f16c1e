"""Telegram through a real `bot run` process: the real adapter on python-telegram-bot, the fake Bot API, the
fake LLM. What a person on Telegram sees: answers in DMs, silence in groups unless mentioned, topics routed
by their group, long answers in chunks, pairing for strangers, bots ignored, 429s waited out, no duplicates."""

from __future__ import annotations

import asyncio
import itertools
import re
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from fakes.llm import FakeLLM, Reply
from fakes.telegram import FakeTelegram
from helpers import asked, bot_run, launch_bot

OWNER = 4242
STARTED = "channel telegram account main started"


def config(tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram, streaming: str) -> dict[str, Any]:
    gid = str(fake_telegram.group_id)
    return {
        "defaults": {"model": "fake/m", "workspace_root": str(tmp_path / "ws")},
        "agents": [{"id": "main", "default": True}, {"id": "team"}],
        "bindings": [
            # the account is named: a binding without one matches only the account called `default`
            {"agent": "team", "match": {"channel": "telegram", "account": "main", "peer": {"kind": "group", "id": gid}}}
        ],
        "providers": {"fake": {"kind": "openai", "base_url": fake_llm.openai_base_url}},
        "owners": [f"telegram:{OWNER}"],
        "channels": {"telegram": {"accounts": {"main": {
            "token": fake_telegram.token, "api_base_url": fake_telegram.url, "poll_timeout": 1, "streaming": streaming,
        }}}},
        "session": {"queue": {"mode": "followup"}},
    }  # fmt: skip


@pytest.fixture
async def bot(tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram) -> AsyncIterator[Path]:
    settings = config(tmp_path, fake_llm, fake_telegram, streaming="off")
    async with bot_run(settings, tmp_path, STARTED) as path:
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


async def test_a_streamed_answer_arrives_as_one_message_edited_to_the_final_text(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg = fake_telegram
    answer = " ".join(f"word{number}" for number in range(60))
    fake_llm.script(Reply.slow(answer, 3.5))
    settings = config(tmp_path, fake_llm, fake_telegram, streaming="partial")
    async with bot_run(settings, tmp_path, STARTED):
        await tg.private_message("tell me slowly", user_id=OWNER, name="Owner")
        [first] = await tg.wait_sent(OWNER, 1)
        assert answer.startswith(first) and first != answer  # shown while the model was still writing
        await tg.wait_for(lambda: any(call["text"] == answer for call in tg.calls("editMessageText")), 15)
        await asyncio.sleep(1.5)  # a second final message, if one were sent, would show up here
        edits = [call["text"] for call in tg.calls("editMessageText") if call["chat_id"] == OWNER]
        assert edits[-1] == answer and len(edits) == len(set(edits))  # never the same text twice
        assert len(tg.sent[OWNER]) == 1  # one message, edited: no duplicate final text
        assert [message.visible for (chat, _), message in tg.messages.items() if chat == OWNER] == [answer]
        times = [call.at for call in tg.requests if call.method == "editMessageText"]
        assert all(later - earlier >= 0.9 for earlier, later in itertools.pairwise(times))


async def test_an_answer_cut_short_by_a_crash_is_finished_in_the_same_message(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg = fake_telegram
    fake_llm.script(Reply.slow(" ".join(f"word{number}" for number in range(200)), 60, pieces=120))  # never finished
    settings = config(tmp_path, fake_llm, fake_telegram, streaming="partial")
    bot = await launch_bot(settings, tmp_path, STARTED)
    try:
        await tg.private_message("tell me slowly", user_id=OWNER, name="Owner")
        await tg.wait_sent(OWNER, 1)
        # The edit after the first preview comes once the preview's message is recorded.
        await tg.wait_for(lambda: any(call["chat_id"] == OWNER for call in tg.calls("editMessageText")), 15)
        bot.send_signal(signal.SIGKILL)
        await bot.wait()
    finally:
        if bot.returncode is None:
            bot.kill()
            await bot.wait()
    [half_written] = [message.visible for (chat, _), message in tg.messages.items() if chat == OWNER]
    assert half_written.startswith("word0 word1")

    fake_llm.script("The whole answer, this time.")
    async with bot_run(settings, tmp_path, STARTED):
        await tg.wait_for(
            lambda: any(call["text"] == "The whole answer, this time." for call in tg.calls("editMessageText")), 15
        )
        await asyncio.sleep(1.5)  # a second message, if one were sent, would show up here
        assert len(fake_llm.requests) == 2  # the turn ran again
        assert len(tg.sent[OWNER]) == 1  # and its answer went into the message the first run had started
        assert [message.visible for (chat, _), message in tg.messages.items() if chat == OWNER] == [
            "The whole answer, this time."
        ]


async def test_messages_waiting_at_start_are_answered_once(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg = fake_telegram
    # Slow answers: the runs are still going when the start-up looks for what a previous process left unfinished.
    fake_llm.script(*(Reply.slow(answer, 1.5) for answer in ("First answer.", "Second answer.", "Third answer.")))
    for text in ("one", "two", "three"):  # queued before the bot starts, as after any restart
        await tg.private_message(text, user_id=OWNER + 1 + len(text), name="Early")
    settings = config(tmp_path, fake_llm, fake_telegram, streaming="off")
    settings["channels"]["telegram"]["accounts"]["main"]["dm_policy"] = "open"
    async with bot_run(settings, tmp_path, STARTED):
        await tg.wait_for(lambda: sum(len(texts) for texts in tg.sent.values()) >= 3, 15)
        await asyncio.sleep(1.5)  # a second run of the same message would answer here
        assert len(fake_llm.requests) == 3
        assert sorted(text for texts in tg.sent.values() for text in texts) == [
            "First answer.", "Second answer.", "Third answer."
        ]  # fmt: skip
