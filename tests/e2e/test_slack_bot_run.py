"""Slack through a real `bot run` process: the real adapter on slack-bolt in Socket Mode, the fake Slack (Web API and
socket), the fake LLM. What a person on Slack sees: answers in DMs, silence in channels unless mentioned, a mention
that Slack delivers twice answered once, threads as their own sessions answered in the thread, pairing for
strangers, bots ignored, 429s waited out, no duplicates, long answers in chunks and streamed ones edited in place."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from configs import config_dict, slack as slack_account
from fakes.llm import FakeLLM, Reply
from fakes.slack import BOT_USER_ID, TEAM_ID, USER_ID, FakeSlack, dm_channel
from helpers import asked, bot_run, eventually, read_state, settled

OWNER = "U0OWNER01"  # upper case, as Slack writes user ids
STRANGER = "U0STRANGE1"
CHANNEL = "C0GENERAL"
WAIT = 30.0  # generous: only ever reached when something is broken


@pytest.fixture
async def bot(tmp_path: Path, fake_llm: FakeLLM, fake_slack: FakeSlack) -> AsyncIterator[Path]:
    config = config_dict(
        tmp_path, fake_llm, slack_account(fake_slack, streaming="off"),
        agents=[{"id": "main", "default": True}, {"id": "team"}],
        bindings=[
            # the account is named: a binding without one matches only the account called `default`
            {"agent": "team", "match": {"channel": "slack", "account": "main", "team": TEAM_ID}}
        ],
        owners=[f"slack:{OWNER}"],
        session={"queue": {"mode": "followup"}},
    )  # fmt: skip
    async with bot_run(config, tmp_path, "channel slack account main started") as path:
        yield path


def said(slack: FakeSlack, channel: str) -> list[dict[str, Any]]:
    """The bot's messages in one channel (a DM's D... channel included), in order."""
    return [message for (where, _), message in slack.messages.items() if where == channel]


async def wait_said(slack: FakeSlack, channel: str, count: int) -> list[dict[str, Any]]:
    await eventually(lambda: len(said(slack, channel)) >= count, f"{count} messages in {channel}")
    return said(slack, channel)


def sessions(state_dir: Path) -> dict[str, str]:
    return dict(read_state(state_dir, "SELECT session_key, agent FROM sessions"))


async def test_owner_dm_channel_mentions_once_and_threads(bot: Path, fake_llm: FakeLLM, fake_slack: FakeSlack) -> None:
    slack = fake_slack
    fake_llm.script("Hello owner.", "Team here.", "Thread answer.")
    await slack.dm("hi", user=OWNER)
    [hello] = await wait_said(slack, dm_channel(OWNER), 1)
    assert hello["text"] == "Hello owner." and "thread_ts" not in hello

    [quiet] = await slack.channel_message("just chatting", channel=CHANNEL)  # no mention: ignored
    await slack.wait_for_ack(quiet, timeout=WAIT)  # acked once the gateway has judged it
    mention = await slack.channel_message("what's up?", channel=CHANNEL, mention=True)
    assert len(mention) == 2  # the message event and the app_mention event, same ts
    for envelope in mention:
        await slack.wait_for_ack(envelope, timeout=WAIT)
    [team] = await wait_said(slack, CHANNEL, 1)
    assert team["text"] == "Team here." and "thread_ts" not in team

    # A reply in the thread under the bot's answer: addressed to the bot without a mention, its own session.
    root = str(team["ts"])
    [in_thread] = await slack.thread_reply("and in here?", thread_ts=root, channel=CHANNEL, parent_user_id=BOT_USER_ID)
    await slack.wait_for_ack(in_thread, timeout=WAIT)
    answers = await wait_said(slack, CHANNEL, 2)
    assert answers[1]["text"] == "Thread answer." and answers[1]["thread_ts"] == root
    [thread_post] = [body for body in slack.posted if body.get("thread_ts")]
    assert thread_post["thread_ts"] == root and thread_post["channel"] == CHANNEL

    await eventually(lambda: settled(bot.parent / "state"), "the bot to have nothing left to do")
    assert [len(said(slack, where)) for where in (dm_channel(OWNER), CHANNEL)] == [1, 2]  # no duplicates
    # the unmentioned message and the second delivery of the mention never reached the model
    assert asked(fake_llm) == ["hi", f'"{USER_ID}": what\'s up?', f'"{USER_ID}": and in here?']
    systems = [request.body["messages"][0]["content"] for request in fake_llm.requests]
    assert [system.split(",")[0] for system in systems] == ["You are team"] * 3  # the team binding routes it all
    thread_messages = fake_llm.requests[2].body["messages"]
    assert len(thread_messages) == 2  # the system prompt and the reply: none of the channel's history
    assert not any("Team here." in json.dumps(message) for message in thread_messages)
    keys = sessions(bot.parent / "state")
    [thread_key] = [key for key in keys if key.endswith(f":thread:{root}")]
    assert keys[thread_key] == "team" and len(keys) == 3


async def test_strangers_pair_bots_are_ignored_and_429s_are_waited_out(
    bot: Path, fake_llm: FakeLLM, fake_slack: FakeSlack
) -> None:
    slack = fake_slack
    await slack.dm("hello?", user=STRANGER)
    [code_message] = await wait_said(slack, dm_channel(STRANGER), 1)
    code = re.search(r"pairing code is ([A-Z2-9]{8})", code_message["text"])
    assert code is not None and fake_llm.requests == []

    fake_llm.script("Yes, you may.")
    await slack.dm(f"/pair {code.group(1)}", user=OWNER)
    [approved] = await wait_said(slack, dm_channel(OWNER), 1)
    assert approved["text"] == f"Approved {STRANGER}."
    welcome = (await wait_said(slack, dm_channel(STRANGER), 2))[1]
    assert welcome["text"] == "You're approved: I'm listening now."

    # Another bot, in a DM and mentioning us in a channel: never answered.
    robot = {"user": "U0ROBOT01", "bot_id": "B0ROBOT01"}
    ignored = [await slack.dm("beep", **robot), *await slack.channel_message("boop", mention=True, **robot)]
    for envelope in ignored:
        await slack.wait_for_ack(envelope, timeout=WAIT)

    slack.rate_limit(1, retry_after=1, method="chat.postMessage")  # the answer's post gets a 429
    await slack.dm("may I?", user=STRANGER)
    answers = await wait_said(slack, dm_channel(STRANGER), 3)
    assert answers[2]["text"] == "Yes, you may."
    limited = [call for call in slack.calls if call.status == 429]
    assert [call.method for call in limited] == ["chat.postMessage"]
    assert limited[0].body["text"] == "Yes, you may."

    await eventually(lambda: settled(bot.parent / "state"), "the bot to have nothing left to do")
    assert [body["text"] for body in slack.posted].count("Yes, you may.") == 1
    assert len(said(slack, dm_channel(STRANGER))) == 3
    assert said(slack, dm_channel("U0ROBOT01")) == [] and said(slack, "C0GENERAL") == []
    assert asked(fake_llm) == ["may I?"]


async def test_a_long_answer_arrives_in_chunks_and_a_streamed_one_as_one_message_edited(
    tmp_path: Path, fake_llm: FakeLLM, fake_slack: FakeSlack
) -> None:
    slack = fake_slack
    config = config_dict(
        tmp_path, fake_llm, slack_account(slack, streaming="partial"), owners=[f"slack:{OWNER}"],
        bindings=[{"agent": "main", "match": {"channel": "slack", "account": "main"}}],
    )  # fmt: skip
    long_answer = "\n\n".join(f"Paragraph {number}: " + "word " * 120 for number in range(12))  # ~7,400 characters
    beginning = " ".join(f"word{number}" for number in range(30))
    streamed = beginning + "".join(f" word{number}" for number in range(30, 60))
    # The second answer's model writes the first half, then waits for the test before it writes the rest.
    fake_llm.script(long_answer, Reply.held(beginning, then=streamed.removeprefix(beginning)))
    async with bot_run(config, tmp_path, "channel slack account main started") as path:
        state = path.parent / "state"

        def shown() -> list[str]:
            return [message["text"] for message in said(slack, dm_channel(OWNER))]

        await slack.dm("a long one", user=OWNER)
        whole = " ".join(long_answer.split())
        await eventually(lambda: " ".join(" ".join(shown()).split()) == whole, "the long answer, all of it in order")
        await eventually(lambda: settled(state), "the long answer sent")
        chunks = shown()  # the messages as they stand (were the bot slow, the first was streamed, then edited)
        assert len(chunks) >= 3 and all(len(chunk) <= 3000 for chunk in chunks)

        await slack.dm("now slowly", user=OWNER)
        await eventually(lambda: len(shown()) > len(chunks), "the streamed answer's first words")
        assert beginning.startswith(shown()[-1])  # shown while being written
        fake_llm.release()
        await eventually(lambda: shown()[len(chunks) :] == [streamed], "the streamed answer, complete")
        await eventually(lambda: settled(state), "the streamed answer finished")
        [ts] = [ts for (_, ts), message in slack.messages.items() if message["text"] == streamed]
        assert len([body for body in slack.posted if streamed.startswith(body["text"])]) == 1  # one message
        edits = [call.body["text"] for call in slack.calls_to("chat.update") if call.body["ts"] == ts]
        assert edits[-1] == streamed and len(edits) == len(set(edits))  # edited in place, never to the same text
        assert shown() == [*chunks, streamed]  # and no second message with the final text
