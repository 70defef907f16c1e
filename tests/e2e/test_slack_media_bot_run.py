"""Uploads and threads on Slack through a real `bot run` process (issue 15): the real adapter on the fake Slack, a
model that can see on the fake LLM. What the agent does with Slack's own means: it uploads a file of its workspace
with the text as the file's comment and starts a thread whose id is its new parent message. What every platform does
with the files a person sends (a photo, hostile names, a Slack audio clip, a file over the limit) is in
tests/e2e/test_media_bot_run.py; tests/turns/test_media.py proves the same behaviours on the in-memory channel,
tests/channels/test_slack_media.py the adapter's own download and upload paths."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from configs import config_dict, slack
from fakes.llm import FakeLLM, Reply, ToolCallSpec
from fakes.slack import FakeSlack, dm_channel
from helpers import bot_run, eventually, finished, tool_result

OWNER = "U0OWNER01"
CHANNEL = "C0GENERAL"
DM = dm_channel(OWNER)


def config(tmp_path: Path, llm: FakeLLM, fake: FakeSlack) -> dict[str, Any]:
    """A bot with one Slack account, an agent on a model that can see, days in UTC."""
    binding = {"agent": "main", "match": {"channel": "slack", "account": "main"}}
    defaults = {"model": "fake/gpt-4o", "timezone": "UTC"}
    owners = [f"slack:{OWNER}"]
    return config_dict(
        tmp_path, llm, slack(fake, streaming="off"), defaults=defaults, owners=owners, bindings=[binding]
    )


@contextlib.asynccontextmanager
async def running(config: dict[str, Any], tmp_path: Path, env: dict[str, str] | None = None) -> AsyncIterator[Path]:
    """`bot run` on `config`; yields its state directory. Stopped (exit 0) at the end."""
    async with bot_run(config, tmp_path, "channel slack account main started", env=env) as path:
        yield path.parent / "state"


def said(slack: FakeSlack, channel: str) -> list[dict[str, Any]]:
    """The bot's messages in one channel, in order."""
    return [message for (where, _), message in slack.messages.items() if where == channel]


async def wait_said(slack: FakeSlack, channel: str, count: int) -> list[dict[str, Any]]:
    await eventually(lambda: len(said(slack, channel)) >= count, f"{count} messages in {channel}")
    return said(slack, channel)


async def test_the_agent_uploads_a_file_of_its_workspace_with_the_text_as_its_comment(
    tmp_path: Path, fake_llm: FakeLLM, fake_slack: FakeSlack
) -> None:
    report = tmp_path / "ws" / "main" / "reports" / "q3.pdf"
    report.parent.mkdir(parents=True)
    report.write_bytes(b"%PDF-1.7 quarterly " + bytes(range(256)))
    send = ToolCallSpec("message", {"action": "send", "text": "The report.", "media": ["reports/q3.pdf"]})
    fake_llm.script(Reply.tool_calls(send), "NO_REPLY")
    async with running(config(tmp_path, fake_llm, fake_slack), tmp_path) as state:
        await fake_slack.dm("send me the q3 report", user=OWNER)
        [upload] = await fake_slack.wait_for_uploads(1)
        await eventually(lambda: len(fake_llm.requests) == 2, "the model to read the tool's result")
        await finished(state)

    assert (upload.filename, upload.data, upload.initial_comment) == ("q3.pdf", report.read_bytes(), "The report.")
    assert upload.channel == DM and upload.thread_ts is None
    assert said(fake_slack, DM) == [fake_slack.messages[(DM, str(upload.ts))]]  # the share alone: NO_REPLY
    assert fake_slack.posted == []  # the text went as the file's comment
    result = tool_result(fake_llm, 1)
    assert (result["status"], result["files"], result["message_id"]) == ("ok", ["q3.pdf"], upload.ts)


async def test_the_agent_starts_a_thread_whose_id_is_the_new_parent_message(
    tmp_path: Path, fake_llm: FakeLLM, fake_slack: FakeSlack
) -> None:
    thread = ToolCallSpec("message", {"action": "thread-create", "thread_name": "Lunch"}, id="t1")
    fake_llm.script(Reply.tool_calls(thread), "Started a thread for lunch.")
    async with running(config(tmp_path, fake_llm, fake_slack), tmp_path) as state:
        await fake_slack.channel_message("start a lunch thread", channel=CHANNEL, user=OWNER, mention=True)
        parent, answer = await wait_said(fake_slack, CHANNEL, 2)
        await finished(state)

    assert parent["text"] == "Lunch" and "thread_ts" not in parent  # a new message at the top of the channel
    assert answer["text"] == "Started a thread for lunch."
    result = tool_result(fake_llm, 1)
    assert (result["status"], result["action"], result["thread_id"]) == ("ok", "thread-create", parent["ts"])
    assert fake_slack.messages[(CHANNEL, result["thread_id"])] is parent
