"""Uploads, polls and threads on Discord through a real `bot run` process (issue 15): the real adapter on the fake
Discord (REST, gateway and CDN), a model that can see on the fake LLM. What the agent does with Discord's own means:
it uploads a file of its workspace with the text as the message's content, starts a thread and posts a native poll.
What every platform does with the files a person sends (a photo, hostile names, a voice message, a file over the
limit) is in tests/e2e/test_media_bot_run.py; tests/turns/test_media.py proves the same behaviours on the in-memory
channel, tests/channels/test_discord.py the adapter's own download, upload, poll and thread paths."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from configs import config_dict, discord
from fakes.discord import CHANNEL_ID, GUILD_ID, FakeDiscord
from fakes.llm import FakeLLM, Reply, ToolCallSpec
from helpers import bot_run, eventually, finished, tool_result


def config(tmp_path: Path, llm: FakeLLM, dc: FakeDiscord) -> dict[str, Any]:
    """A bot with one Discord account, an agent on a model that can see, days in UTC."""
    binding = {"agent": "main", "match": {"channel": "discord", "account": "main"}}
    defaults = {"model": "fake/gpt-4o", "timezone": "UTC"}
    owners = [f"discord:{dc.alice.id}"]
    return config_dict(
        tmp_path, llm, discord(dc, streaming="off"), defaults=defaults, owners=owners, bindings=[binding]
    )


@contextlib.asynccontextmanager
async def running(config: dict[str, Any], tmp_path: Path, env: dict[str, str] | None = None) -> AsyncIterator[Path]:
    """`bot run` on `config`; yields its state directory. Stopped (exit 0) at the end."""
    async with bot_run(config, tmp_path, "channel discord account main started", env=env) as path:
        yield path.parent / "state"


def said(dc: FakeDiscord, channel_id: str) -> list[dict[str, Any]]:
    """The bot's messages in one channel, in order (as the fake keeps them: content, attachments, poll)."""
    return [message for message in dc.messages.values() if message["channel_id"] == channel_id]


async def wait_said(dc: FakeDiscord, channel_id: str, count: int) -> list[dict[str, Any]]:
    await eventually(lambda: len(said(dc, channel_id)) >= count, f"{count} messages in {channel_id}")
    return said(dc, channel_id)


async def test_the_agent_uploads_a_file_of_its_workspace_with_the_text_as_its_content(
    tmp_path: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord
) -> None:
    dc = fake_discord
    dm = dc.dm_channel_id(dc.alice)
    report = tmp_path / "ws" / "main" / "reports" / "q3.pdf"
    report.parent.mkdir(parents=True)
    report.write_bytes(b"%PDF-1.7 quarterly " + bytes(range(256)))
    send = ToolCallSpec("message", {"action": "send", "text": "The report.", "media": ["reports/q3.pdf"]})
    fake_llm.script(Reply.tool_calls(send), "NO_REPLY")
    async with running(config(tmp_path, fake_llm, dc), tmp_path) as state:
        await dc.dm("send me the q3 report")
        await eventually(lambda: len(dc.uploads(dm)) == 1, "the upload")
        await eventually(lambda: len(fake_llm.requests) == 2, "the model to read the tool's result")
        await finished(state)

    [post] = dc.posts()  # one message: the file with the text, nothing else (NO_REPLY)
    assert post.path == f"/channels/{dm}/messages"
    assert post.body["content"] == "The report."
    [upload] = post.files
    assert (upload.filename, upload.data) == ("q3.pdf", report.read_bytes())
    [message] = said(dc, dm)
    assert [(shown["filename"], shown["size"]) for shown in message["attachments"]] == [
        ("q3.pdf", report.stat().st_size)
    ]
    result = tool_result(fake_llm, 1)
    assert (result["status"], result["files"], result["message_id"]) == ("ok", ["q3.pdf"], message["id"])


async def test_the_agent_starts_a_thread_and_posts_a_native_poll(
    tmp_path: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord
) -> None:
    dc = fake_discord
    thread = ToolCallSpec("message", {"action": "thread-create", "thread_name": "Lunch"}, id="t1")
    poll = ToolCallSpec(
        "message", {"action": "poll", "poll_question": "Where?", "poll_options": ["Pizza", " Sushi "]}, id="p1"
    )
    fake_llm.script(Reply.tool_calls(thread), Reply.tool_calls(poll), "Thread and poll are up.")
    async with running(config(tmp_path, fake_llm, dc), tmp_path) as state:
        await dc.guild_message("set up a lunch thread and poll", channel_id=CHANNEL_ID, mention=True)
        await eventually(lambda: len(fake_llm.requests) == 3, "the model to read both tools' results")
        await wait_said(dc, CHANNEL_ID, 2)
        await finished(state)

    [(thread_id, started)] = dc.threads.items()
    assert (started["name"], started["parent_id"], started["guild_id"], started["type"]) == (
        "Lunch", CHANNEL_ID, GUILD_ID, 11
    )  # fmt: skip
    [call] = dc.calls("POST", f"/channels/{CHANNEL_ID}/threads")  # a thread in the channel, from no message
    assert call.status == 201
    created = tool_result(fake_llm, 1)
    assert (created["status"], created["action"], created["thread_id"]) == ("ok", "thread-create", thread_id)

    polled, answer = said(dc, CHANNEL_ID)
    assert polled["content"] == ""  # the poll alone: no text came with it
    assert polled["poll"]["question"] == {"text": "Where?"}
    assert [option["poll_media"]["text"] for option in polled["poll"]["answers"]] == ["Pizza", "Sushi"]
    [sent] = [post.body["poll"] for post in dc.posts(CHANNEL_ID) if post.body.get("poll")]
    assert (sent["question"], sent["allow_multiselect"]) == ({"text": "Where?"}, False)
    result = tool_result(fake_llm, 2)
    assert (result["status"], result["action"], result["message_id"]) == ("ok", "poll", polled["id"])
    assert answer["content"] == "Thread and poll are up."
    assert dc.texts(thread_id) == []  # nothing went into the thread by itself
