"""Telegram through a real `bot run` process: the real adapter on python-telegram-bot, the fake Bot API, the
fake LLM. What a person on Telegram sees: answers in DMs, silence in groups unless mentioned, topics routed
by their group, long answers in chunks, pairing for strangers, bots ignored, 429s waited out, no duplicates."""

from __future__ import annotations

import re
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from configs import config_dict, telegram
from fakes.llm import FakeLLM, Reply
from fakes.telegram import FakeTelegram
from helpers import asked, bot_run, launch_bot, read_state

OWNER = 4242
STARTED = "channel telegram account main started"


def config(tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram, streaming: str) -> dict[str, Any]:
    gid = str(fake_telegram.group_id)
    return config_dict(
        tmp_path, fake_llm, telegram(fake_telegram, streaming=streaming),
        agents=[{"id": "main", "default": True}, {"id": "team"}],
        bindings=[
            # the account is named: a binding without one matches only the account called `default`
            {"agent": "team", "match": {"channel": "telegram", "account": "main", "peer": {"kind": "group", "id": gid}}}
        ],
        owners=[f"telegram:{OWNER}"],
        session={"queue": {"mode": "followup"}},
    )  # fmt: skip


def journal(tmp_path: Path, update: dict[str, Any]) -> tuple[str, str | None]:
    """The bot's journal entry (status, reason) for the message in `update`."""
    message = update["message"]
    sql = "SELECT status, error FROM inbound WHERE channel = 'telegram' AND message_id = ?"
    rows = read_state(tmp_path / "state", sql, str(message["message_id"]))
    assert rows, f"message {message['message_id']} is not in the journal"
    return rows[0][0], rows[0][1]


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
    await tg.group_message(f"@{tg.username}net are you there?")  # another bot whose name starts with ours: ignored
    await tg.group_message("what's up?", mention=True)
    await tg.wait_sent(tg.group_id, 1)
    await tg.topic_message("in the topic", mention=True)
    await tg.wait_sent(tg.group_id, 2)
    assert tg.sent[tg.group_id] == ["Team here.", "Topic answer."]
    assert asked(fake_llm)[1:] == [
        '"Bo": @switchboard_test_bot what\'s up?',
        '"Bo": @switchboard_test_bot in the topic',
    ]
    systems = [request.body["messages"][0]["content"] for request in fake_llm.requests]
    assert [system.split(",")[0] for system in systems] == ["You are main", "You are team", "You are team"]
    topic_reply = [call for call in tg.calls("sendMessage") if call.get("message_thread_id") == 77]
    assert len(topic_reply) == 1  # the topic's answer went into the topic

    await tg.private_message("a long one please", user_id=OWNER, name="Owner")
    chunks = await tg.wait_sent(OWNER, 4)
    assert [len(chunk) for chunk in chunks[1:]] == [4096, 4096, 808]


async def test_strangers_pair_bots_are_ignored_429s_wait_and_nothing_is_answered_twice(
    bot: Path, tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
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

    beep = await tg.private_message("beep", user_id=777, name="Robot", is_bot=True)  # another bot: never answered
    await tg.acknowledged(beep)  # confirmed once journaled and judged: closed, with nothing to send
    assert journal(tmp_path, beep) == ("done", "ignored: sent by a bot")

    fake_llm.script("Still here.")
    tg.fail_next("sendMessage", 1, retry_after=1)
    update = await tg.private_message("may I?", user_id=555, name="Stranger")
    await tg.redeliver(update)  # the same message delivered again
    # One chat's answers go out in order: an answer to the copy would come before the answer to a later message.
    await tg.private_message("still there?", user_id=555, name="Stranger")
    await tg.wait_sent(555, 4)
    assert tg.sent[555][1:] == ["You're approved: I'm listening now.", "Yes, you may.", "Still here."]
    assert asked(fake_llm) == ["may I?", "still there?"]  # one answer for the message delivered twice
    assert tg.sent.get(777, []) == []


async def test_a_streamed_answer_arrives_as_one_message_edited_to_the_final_text(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg = fake_telegram
    beginning = " ".join(f"word{number}" for number in range(30))
    answer = beginning + "".join(f" word{number}" for number in range(30, 60))
    # The model writes the first half, then waits for the test before it writes the rest.
    fake_llm.script(Reply.held(beginning, then=answer.removeprefix(beginning)), "You're welcome.")
    settings = config(tmp_path, fake_llm, fake_telegram, streaming="partial")
    async with bot_run(settings, tmp_path, STARTED):
        await tg.private_message("tell me slowly", user_id=OWNER, name="Owner")
        [first] = await tg.wait_sent(OWNER, 1)
        assert beginning.startswith(first)  # shown while the model was still writing
        fake_llm.release()
        await tg.wait_for(lambda: any(call["text"] == answer for call in tg.calls("editMessageText")), "the final edit")
        # One chat's answers go out in order: a second final message would come before the next answer.
        await tg.private_message("thanks", user_id=OWNER, name="Owner")
        await tg.wait_texts(OWNER, lambda texts: texts[-1:] == ["You're welcome."])
        assert tg.chat_texts(OWNER) == [answer, "You're welcome."]  # one message for the answer, edited
        assert len(tg.sent[OWNER]) == 2  # no duplicate final text
        edits = [call["text"] for call in tg.calls("editMessageText") if call["chat_id"] == OWNER]
        assert answer in edits and len(edits) == len(set(edits))  # never the same text twice


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
        await tg.wait_for(lambda: any(call["chat_id"] == OWNER for call in tg.calls("editMessageText")), "an edit")
        bot.send_signal(signal.SIGKILL)
        await bot.wait()
    finally:
        if bot.returncode is None:
            bot.kill()
            await bot.wait()
    [half_written] = [message.visible for (chat, _), message in tg.messages.items() if chat == OWNER]
    assert half_written.startswith("word0 word1")

    fake_llm.script("The whole answer, this time.", "Next.")
    async with bot_run(settings, tmp_path, STARTED):
        await tg.wait_for(
            lambda: any(call["text"] == "The whole answer, this time." for call in tg.calls("editMessageText")),
            "the answer finished in place",
        )
        # One chat's answers go out in order: a second message for the answer would come before the next one.
        await tg.private_message("and now?", user_id=OWNER, name="Owner")
        await tg.wait_texts(OWNER, lambda texts: texts[-1:] == ["Next."])
        assert asked(fake_llm) == ["tell me slowly", "tell me slowly", "and now?"]  # the turn ran again, once
        # and its answer went into the message the first run had started
        assert tg.chat_texts(OWNER) == ["The whole answer, this time.", "Next."]
        assert len(tg.sent[OWNER]) == 2


async def test_messages_waiting_at_start_are_answered_once(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg = fake_telegram
    # Slow answers: the runs are still going when the start-up looks for what a previous process left unfinished.
    fake_llm.script(*(Reply.slow(answer, 1.5) for answer in ("First answer.", "Second answer.", "Third answer.")))
    for text in ("one", "two", "three"):  # queued before the bot starts, as after any restart
        await tg.private_message(text, user_id=OWNER + 1 + len(text), name="Early")
    chats = sorted(tg.chats)
    settings = config(tmp_path, fake_llm, fake_telegram, streaming="off")
    settings["channels"]["telegram"]["accounts"]["main"]["dm_policy"] = "open"
    async with bot_run(settings, tmp_path, STARTED):
        await tg.wait_for(lambda: sum(len(texts) for texts in tg.sent.values()) >= 3, "the three answers")
        # One chat's answers go out in order: a second run of a message would answer before a later message.
        fake_llm.script(*("Later." for _ in chats))
        for chat in chats:
            await tg.private_message("later", user_id=chat, name="Early")
        await tg.wait_for(lambda: all(tg.sent[chat][-1:] == ["Later."] for chat in chats), "the later answers")
        assert sorted(asked(fake_llm)) == sorted(["one", "two", "three", *("later" for _ in chats)])
        assert sorted(text for texts in tg.sent.values() for text in texts) == sorted(
            ["First answer.", "Second answer.", "Third answer.", *("Later." for _ in chats)]
        )
