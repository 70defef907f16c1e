"""Files on Slack through a real `bot run` process (issue 15): the real adapter on the fake Slack, a model that can see
on the fake LLM. What a person on Slack sees and what the agent gets: a shared photo reaches the model as an image and
lands in the workspace's inbox, hostile names stay inside it, a Slack audio clip is transcribed, a file over the
account's limit is refused with a word to the person, and the agent uploads a file of its workspace and starts a
thread. tests/turns/test_media.py proves the same behaviours on the in-memory channel,
tests/channels/test_slack_media.py the adapter's own download and upload paths."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from fakes.llm import FakeLLM, Reply, ToolCallSpec
from fakes.slack import FakeSlack, dm_channel
from helpers import (
    bot_run,
    eventually,
    files_under,
    finished,
    inbox_of,
    tool_result,
    user_images,
    user_parts,
    user_text,
)

OWNER = "U0OWNER01"
CHANNEL = "C0GENERAL"
DM = dm_channel(OWNER)
PHOTO = b"\xff\xd8\xff\xe0" + bytes(range(256)) * 40  # JPEG-ish bytes, 10,244 of them: "10.2 KB"
CLIP = b"\x1aE\xdf\xa3" + bytes(range(100))  # a WebM-ish recording, 104 bytes
TRANSCRIBE_KEY = "sk-transcribe-fake-key"


def config(
    tmp_path: Path, llm: FakeLLM, slack: FakeSlack, *, limits: dict[str, int] | None = None, **media: Any
) -> dict[str, Any]:
    """A bot with one Slack account (`limits` as its `media`), an agent on a model that can see, days in UTC."""
    account: dict[str, Any] = {
        "bot_token": slack.bot_token, "app_token": slack.app_token, "api_base_url": slack.url, "streaming": "off",
    }  # fmt: skip
    if limits is not None:
        account["media"] = limits
    return {
        "defaults": {"model": "fake/gpt-4o", "workspace_root": str(tmp_path / "ws"), "timezone": "UTC"},
        "providers": {"fake": {"kind": "openai", "base_url": llm.openai_base_url}},
        "owners": [f"slack:{OWNER}"],
        "channels": {"slack": {"accounts": {"main": account}}},
        "bindings": [{"agent": "main", "match": {"channel": "slack", "account": "main"}}],
        "media": media,
    }


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


async def test_a_photo_without_text_reaches_the_model_as_an_image_and_a_file_in_the_inbox(
    tmp_path: Path, fake_llm: FakeLLM, fake_slack: FakeSlack
) -> None:
    fake_llm.script("A test pattern.")
    async with running(config(tmp_path, fake_llm, fake_slack), tmp_path) as state:
        photo = fake_slack.add_file(PHOTO, "IMG_0001.jpg", "image/jpeg")
        await fake_slack.share_files([photo], user=OWNER)
        [answer] = await wait_said(fake_slack, DM, 1)
        await finished(state)
        day = inbox_of(state)

    assert answer["text"] == "A test pattern."
    workspace = tmp_path / "ws" / "main"
    assert files_under(workspace / "inbox") == {f"{day.removeprefix('inbox/')}/IMG_0001.jpg": PHOTO}
    assert user_images(fake_llm) == [PHOTO]
    assert user_text(fake_llm) == f'[image "IMG_0001.jpg" (10.2 KB), saved as {day}/IMG_0001.jpg]'
    [request] = fake_slack.file_requests  # fetched once, from url_private, with the bot token
    assert request.authorization == f"Bearer {fake_slack.bot_token}"
    assert request.path == photo["url_private"].removeprefix(fake_slack.url)


async def test_a_photo_with_text_carries_the_text_the_line_and_the_image(
    tmp_path: Path, fake_llm: FakeLLM, fake_slack: FakeSlack
) -> None:
    fake_llm.script("A fine cat.")
    async with running(config(tmp_path, fake_llm, fake_slack), tmp_path) as state:
        photo = fake_slack.add_file(PHOTO, "cat.jpg", "image/jpeg")
        await fake_slack.share_files([photo], "look at my cat", user=OWNER)
        [answer] = await wait_said(fake_slack, DM, 1)
        await finished(state)
        day = inbox_of(state)

    assert answer["text"] == "A fine cat."
    assert (tmp_path / "ws" / "main" / day / "cat.jpg").read_bytes() == PHOTO
    assert [part["type"] for part in user_parts(fake_llm)] == ["text", "image_url"]
    assert user_text(fake_llm) == f'look at my cat\n[image "cat.jpg" (10.2 KB), saved as {day}/cat.jpg]'
    assert user_images(fake_llm) == [PHOTO]


async def test_hostile_file_names_land_inside_the_inbox_and_nowhere_else(
    tmp_path: Path, fake_llm: FakeLLM, fake_slack: FakeSlack
) -> None:
    fake_llm.script("Got them.")
    async with running(config(tmp_path, fake_llm, fake_slack), tmp_path) as state:
        files = [fake_slack.add_file(b"one", "../../x"), fake_slack.add_file(b"two", ".bashrc")]
        files.append(fake_slack.add_file(b"three", "x"))  # the name the first one was given: a suffix
        await fake_slack.share_files(files, "files", user=OWNER)
        await wait_said(fake_slack, DM, 1)
        await finished(state)
        day = inbox_of(state)

    folder = day.removeprefix("inbox/")
    assert files_under(tmp_path / "ws" / "main" / "inbox") == {
        f"{folder}/x": b"one",
        f"{folder}/bashrc": b"two",
        f"{folder}/x (2)": b"three",
    }
    landed = [path for path in tmp_path.rglob("*") if path.name in ("x", "bashrc", ".bashrc", "x (2)")]
    assert sorted(path.relative_to(tmp_path).as_posix() for path in landed) == [
        f"ws/main/{day}/bashrc",
        f"ws/main/{day}/x",
        f"ws/main/{day}/x (2)",
    ]
    assert user_text(fake_llm).splitlines() == [
        "files",
        f'[file "../../x" (3 bytes), saved as {day}/x]',  # the sender's name, quoted as data
        f'[file ".bashrc" (3 bytes), saved as {day}/bashrc]',
        f'[file "x" (5 bytes), saved as {day}/x (2)]',
    ]


async def test_a_slack_audio_clip_is_transcribed_and_the_transcript_follows_its_line(
    tmp_path: Path, fake_llm: FakeLLM, fake_slack: FakeSlack
) -> None:
    fake_llm.script("Milk it is.")
    fake_llm.transcribe_as("Please buy milk.")
    transcription = {"base_url": fake_llm.openai_base_url, "model": "whisper-1", "api_key": "${SB_TRANSCRIBE_KEY}"}
    settings = config(tmp_path, fake_llm, fake_slack, transcription=transcription)
    async with running(settings, tmp_path, env={"SB_TRANSCRIBE_KEY": TRANSCRIBE_KEY}) as state:
        clip = fake_slack.add_file(CLIP, "audio_message.webm", "audio/webm", subtype="slack_audio", duration_ms=4200)
        await fake_slack.share_files([clip], user=OWNER)
        [answer] = await wait_said(fake_slack, DM, 1)
        await finished(state)
        day = inbox_of(state)

    assert answer["text"] == "Milk it is."
    [upload] = fake_llm.transcriptions
    assert (upload.model, upload.file_name, upload.content_type, upload.data, upload.authorization) == (
        "whisper-1", "audio_message.webm", "audio/webm", CLIP, f"Bearer {TRANSCRIBE_KEY}"
    )  # fmt: skip
    assert (tmp_path / "ws" / "main" / day / "audio_message.webm").read_bytes() == CLIP
    assert user_text(fake_llm) == (
        f'[voice note "audio_message.webm" (104 bytes, 4 s), saved as {day}/audio_message.webm; its transcript:]\n'
        "Please buy milk."
    )
    assert user_images(fake_llm) == []
    # the key went to the transcription endpoint only: never to the model
    assert all(TRANSCRIBE_KEY not in json.dumps(request.headers) for request in fake_llm.requests)


async def test_a_file_over_the_account_limit_is_refused_with_a_word_to_the_person(
    tmp_path: Path, fake_llm: FakeLLM, fake_slack: FakeSlack
) -> None:
    fake_llm.script("The big one did not come through.")
    async with running(config(tmp_path, fake_llm, fake_slack, limits={"max_bytes": 1000}), tmp_path) as state:
        big = fake_slack.add_file(b"x" * 5000, "big.bin")
        small = fake_slack.add_file(b"small", "small.txt", "text/plain")
        await fake_slack.share_files([big, small], "here", user=OWNER)
        notice, answer = await wait_said(fake_slack, DM, 2)
        await finished(state)
        day = inbox_of(state)

    assert notice["text"] == 'I could not take the file "big.bin": larger than the limit of 1.0 KB (it is 5.0 KB).'
    assert answer["text"] == "The big one did not come through."
    assert len(said(fake_slack, DM)) == 2
    assert user_text(fake_llm).splitlines() == [
        "here",
        '[file "big.bin" (5.0 KB): not fetched, larger than the limit of 1.0 KB (it is 5.0 KB)]',
        f'[file "small.txt" (5 bytes), saved as {day}/small.txt]',
    ]
    assert files_under(tmp_path / "ws" / "main" / "inbox") == {f"{day.removeprefix('inbox/')}/small.txt": b"small"}
    assert [request.path for request in fake_slack.file_requests] == [small["url_private"].removeprefix(fake_slack.url)]


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
