"""Discord through a real `bot run` process: the real adapter on discord.py, the fake Discord (REST and gateway),
the fake LLM. What a person on Discord sees: answers in DMs, silence in guild channels unless mentioned, role and
channel bindings, threads routed by their channel but kept apart, long answers in 2,000-character chunks, pairing
for strangers, bots ignored, 429s waited out, no duplicates, streamed answers edited in place."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from configs import config_dict, discord
from fakes.discord import CHANNEL_ID, GUILD_ID, OTHER_CHANNEL_ID, ROLE_ID, THREAD_ID, FakeDiscord
from fakes.llm import FakeLLM, Reply
from helpers import asked, bot_run, eventually, settled

from channels.chunking import chunk_text

WAIT = 30.0  # generous: only reached when something is broken
STARTED = "channel discord account main started"


@pytest.fixture
async def bot(tmp_path: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord) -> AsyncIterator[Path]:
    main = {"channel": "discord", "account": "main"}
    config = config_dict(
        tmp_path, fake_llm, discord(fake_discord, streaming="off"),
        agents=[{"id": "main", "default": True}, {"id": "team"}, {"id": "general"}],
        bindings=[
            # the account is named: a binding without one matches only the account called `default`
            {"agent": "team", "match": {**main, "guild": GUILD_ID, "roles": [ROLE_ID]}},
            {"agent": "general", "match": {**main, "peer": {"kind": "channel", "id": CHANNEL_ID}}},
        ],
        owners=[f"discord:{fake_discord.alice.id}"],
        session={"queue": {"mode": "followup"}},
    )  # fmt: skip
    async with bot_run(config, tmp_path, "channel discord account main started") as path:
        yield path


def systems(llm: FakeLLM) -> list[str]:
    """Who each model request was addressed to: the first clause of its system prompt."""
    return [request.body["messages"][0]["content"].split(",")[0] for request in llm.requests]


async def test_owner_dm_guild_mentions_roles_threads_and_chunks(
    bot: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord
) -> None:
    dc = fake_discord
    owner_dm = dc.dm_channel_id(dc.alice)
    paragraphs = [f"Paragraph {n}: " + ("lorem ipsum dolor sit amet " * 40).strip() for n in range(5)]
    long_answer = "\n\n".join(paragraphs)[:4500]
    fake_llm.script("Hello owner.", "Team here.", "General here.", "Thread answer.", long_answer)

    await dc.dm("hi", user=dc.alice)
    await dc.wait_for_posts(1, owner_dm, timeout=WAIT)
    assert dc.texts(owner_dm) == ["Hello owner."]

    await dc.guild_message("just chatting", channel_id=OTHER_CHANNEL_ID, roles=(ROLE_ID,))  # no mention: ignored
    await dc.guild_message("what's up?", channel_id=OTHER_CHANNEL_ID, roles=(ROLE_ID,), mention=True)
    await dc.wait_for_posts(1, OTHER_CHANNEL_ID, timeout=WAIT)
    # the channel's own binding outranks the role binding
    await dc.guild_message("in general", channel_id=CHANNEL_ID, roles=(ROLE_ID,), mention=True)
    await dc.wait_for_posts(1, CHANNEL_ID, timeout=WAIT)
    # a thread: routed by its parent channel's binding, answered in the thread, a session of its own
    await dc.thread_message("in the thread", roles=(ROLE_ID,), mention=True)
    await dc.wait_for_posts(1, THREAD_ID, timeout=WAIT)

    assert dc.texts(OTHER_CHANNEL_ID) == ["Team here."]
    assert dc.texts(CHANNEL_ID) == ["General here."]
    assert dc.texts(THREAD_ID) == ["Thread answer."]
    assert asked(fake_llm)[1:] == [
        '"Alice" (owner): what\'s up?',
        '"Alice" (owner): in general',
        '"Alice" (owner): in the thread',
    ]
    assert systems(fake_llm) == ["You are main", "You are team", "You are general", "You are general"]
    thread_request = fake_llm.requests[3].body["messages"]
    assert [message["role"] for message in thread_request] == ["system", "user"]  # nothing of the channel's talk
    assert "in general" not in json.dumps(thread_request)

    await dc.dm("a long one please", user=dc.alice)
    expected = chunk_text(long_answer, 2000)
    assert len(expected) >= 3
    await dc.wait_for_posts(1 + len(expected), owner_dm, timeout=WAIT)
    chunks = dc.texts(owner_dm)[1:]
    assert chunks == expected
    assert all(len(chunk) <= 2000 for chunk in chunks)
    assert "".join(chunks).replace("\n", "") == long_answer.replace("\n", "")
    assert all(request.status == 200 for request in dc.calls("POST", "/messages"))  # nothing too long was tried
    assert len(fake_llm.requests) == 5


async def test_strangers_pair_bots_are_ignored_429s_wait_and_nothing_is_answered_twice(
    bot: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord
) -> None:
    dc = fake_discord
    owner_dm, stranger_dm, bot_dm = (dc.dm_channel_id(user) for user in (dc.alice, dc.bob, dc.other_bot))
    await dc.dm("hello?", user=dc.bob)
    await dc.wait_for_posts(1, stranger_dm, timeout=WAIT)
    code = re.search(r"pairing code is ([A-Z2-9]{8})", dc.texts(stranger_dm)[0])
    assert code is not None and fake_llm.requests == []

    fake_llm.script("Yes, you may.", "You're welcome.")
    await dc.dm(f"/pair {code.group(1)}", user=dc.alice)
    await dc.wait_for_posts(1, owner_dm, timeout=WAIT)
    assert dc.texts(owner_dm) == ["Approved Bob."]
    await dc.wait_for_posts(2, stranger_dm, timeout=WAIT)

    await dc.dm("beep", user=dc.other_bot)  # another bot: never answered, not even with a pairing code
    await dc.guild_message("beep boop", user=dc.other_bot, roles=(ROLE_ID,), mention=True)
    dc.rate_limit(1, retry_after=1.0, method="POST", path_contains=f"/channels/{stranger_dm}/messages")
    message = await dc.dm("may I?", user=dc.bob)
    await dc.dispatch("MESSAGE_CREATE", message)  # the same message delivered again
    await dc.wait_for_posts(3, stranger_dm, timeout=WAIT)
    # A later message in the same chat: the bot takes messages in the order they came, and one chat's turns run
    # one after another, so a second delivery let through would have reached the model before this one.
    await dc.dm("thanks", user=dc.bob)
    await dc.wait_for_posts(4, stranger_dm, timeout=WAIT)
    await eventually(lambda: settled(bot.parent / "state"), "the bot to have nothing left to do")
    assert asked(fake_llm) == ["may I?", "thanks"]
    assert dc.texts(stranger_dm)[1:] == ["You're approved: I'm listening now.", "Yes, you may.", "You're welcome."]
    statuses = [request.status for request in dc.calls("POST", f"/channels/{stranger_dm}/messages")]
    assert statuses == [200, 200, 429, 200, 200]  # the 429 was waited out and the answer sent once
    assert dc.texts(bot_dm) == []
    assert dc.texts(OTHER_CHANNEL_ID) == [] and dc.texts(CHANNEL_ID) == []


async def test_a_streamed_answer_arrives_as_one_message_edited_to_the_final_text(
    tmp_path: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord
) -> None:
    dc = fake_discord
    config = config_dict(
        tmp_path, fake_llm, discord(dc),  # streaming: partial is the default
        owners=[f"discord:{dc.alice.id}"],
        bindings=[{"agent": "main", "match": {"channel": "discord", "account": "main"}}],
    )  # fmt: skip
    beginning = " ".join(f"word{number}" for number in range(30))
    answer = beginning + "".join(f" word{number}" for number in range(30, 60))
    # The model writes the first half, then waits for the test before it writes the rest.
    fake_llm.script(Reply.held(beginning, then=answer.removeprefix(beginning)))
    async with bot_run(config, tmp_path, STARTED):
        await dc.dm("tell me slowly", user=dc.alice)
        owner_dm = dc.dm_channel_id(dc.alice)
        await dc.wait_for_posts(1, owner_dm, timeout=WAIT)
        [first] = dc.texts(owner_dm)
        assert beginning.startswith(first)  # shown while the model was still writing
        fake_llm.release()
        await dc.wait_for(
            lambda: any(call.body.get("content") == answer for call in dc.calls("PATCH", "/messages/")),
            "the final edit",
            timeout=WAIT,
        )
        await eventually(lambda: settled(tmp_path / "state"), "the bot to have nothing left to do")
        edits = [call.body["content"] for call in dc.calls("PATCH", "/messages/")]
        assert edits[-1] == answer and len(edits) == len(set(edits))  # never the same text twice
        assert len(dc.posts(owner_dm)) == 1
        assert [message["content"] for message in dc.messages.values()] == [answer]
