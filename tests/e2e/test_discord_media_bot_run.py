"""Files, polls and threads on Discord through a real `bot run` process (issue 15): the real adapter on the fake
Discord (REST, gateway and CDN), a model that can see on the fake LLM. What a person on Discord sees and what the
agent gets: a photo reaches the model as an image and lands in the workspace's inbox, hostile names stay inside it,
a voice message is transcribed, a file over the account's limit is refused with a word to the person, and the agent
uploads a file of its workspace, starts a thread and posts a native poll. tests/turns/test_media.py proves the same
behaviours on the in-memory channel, tests/channels/test_discord.py the adapter's own download, upload, poll and thread
paths."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from fakes.discord import CHANNEL_ID, GUILD_ID, FakeDiscord
from fakes.llm import FakeLLM, Reply, ToolCallSpec
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

PHOTO = b"\xff\xd8\xff\xe0" + bytes(range(256)) * 40  # JPEG-ish bytes, 10,244 of them: "10.2 KB"
RECORDING = b"OggS\x00\x02" + bytes(range(98))  # an Ogg-ish voice message, 104 bytes
TRANSCRIBE_KEY = "sk-transcribe-fake-key"


def config(
    tmp_path: Path, llm: FakeLLM, dc: FakeDiscord, *, limits: dict[str, int] | None = None, **media: Any
) -> dict[str, Any]:
    """A bot with one Discord account (`limits` as its `media`), an agent on a model that can see, days in UTC."""
    account: dict[str, Any] = {
        "token": dc.token, "api_base_url": dc.root, "gateway_url": dc.gateway_url,
        # A short guild_ready_timeout only makes start quick: the fake sends the guild before anything needs it.
        "guild_ready_timeout": 0.05, "streaming": "off",
    }  # fmt: skip
    if limits is not None:
        account["media"] = limits
    return {
        "defaults": {"model": "fake/gpt-4o", "workspace_root": str(tmp_path / "ws"), "timezone": "UTC"},
        "providers": {"fake": {"kind": "openai", "base_url": llm.openai_base_url}},
        "owners": [f"discord:{dc.alice.id}"],
        "channels": {"discord": {"accounts": {"main": account}}},
        "bindings": [{"agent": "main", "match": {"channel": "discord", "account": "main"}}],
        "media": media,
    }


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


def cdn_path(attachment: dict[str, Any]) -> str:
    """The path the fake's CDN records a download of `attachment` under (decoded, as its route reads it)."""
    return unquote(str(attachment["proxy_url"]).split("/attachments/", 1)[1])


async def test_a_photo_without_text_reaches_the_model_as_an_image_and_a_file_in_the_inbox(
    tmp_path: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord
) -> None:
    dc = fake_discord
    dm = dc.dm_channel_id(dc.alice)
    fake_llm.script("A test pattern.")
    async with running(config(tmp_path, fake_llm, dc), tmp_path) as state:
        photo = dc.attachment(PHOTO, "IMG_0001.jpg", "image/jpeg")
        await dc.message_with_files([photo])
        [answer] = await wait_said(dc, dm, 1)
        await finished(state)
        day = inbox_of(state)

    assert answer["content"] == "A test pattern."
    workspace = tmp_path / "ws" / "main"
    assert files_under(workspace / "inbox") == {f"{day.removeprefix('inbox/')}/IMG_0001.jpg": PHOTO}
    assert user_images(fake_llm) == [PHOTO]
    assert user_text(fake_llm) == f'[image "IMG_0001.jpg" (10.2 KB), saved as {day}/IMG_0001.jpg]'
    [download] = dc.downloads  # fetched once, from the CDN, without the bot token
    assert (download.path, download.status) == (cdn_path(photo), 200)
    assert "Authorization" not in download.headers


async def test_a_photo_with_text_carries_the_text_the_line_and_the_image(
    tmp_path: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord
) -> None:
    dc = fake_discord
    dm = dc.dm_channel_id(dc.alice)
    fake_llm.script("A fine cat.")
    async with running(config(tmp_path, fake_llm, dc), tmp_path) as state:
        await dc.message_with_files([dc.attachment(PHOTO, "cat.jpg", "image/jpeg")], "look at my cat")
        [answer] = await wait_said(dc, dm, 1)
        await finished(state)
        day = inbox_of(state)

    assert answer["content"] == "A fine cat."
    assert (tmp_path / "ws" / "main" / day / "cat.jpg").read_bytes() == PHOTO
    assert [part["type"] for part in user_parts(fake_llm)] == ["text", "image_url"]
    assert user_text(fake_llm) == f'look at my cat\n[image "cat.jpg" (10.2 KB), saved as {day}/cat.jpg]'
    assert user_images(fake_llm) == [PHOTO]


async def test_hostile_file_names_land_inside_the_inbox_and_nowhere_else(
    tmp_path: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord
) -> None:
    dc = fake_discord
    dm = dc.dm_channel_id(dc.alice)
    fake_llm.script("Got them.")
    async with running(config(tmp_path, fake_llm, dc), tmp_path) as state:
        files = [dc.attachment(b"one", "../../x"), dc.attachment(b"two", ".bashrc")]
        files.append(dc.attachment(b"three", "x"))  # the name the first one was given: a suffix
        await dc.message_with_files(files, "files")
        await wait_said(dc, dm, 1)
        await finished(state)
        day = inbox_of(state)

    assert [message["content"] for message in said(dc, dm)] == ["Got them."]  # every file taken: no refusal
    assert [download.status for download in dc.downloads] == [200, 200, 200]
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
    assert user_images(fake_llm) == []


async def test_a_voice_message_is_transcribed_and_the_transcript_follows_its_line(
    tmp_path: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord
) -> None:
    dc = fake_discord
    dm = dc.dm_channel_id(dc.alice)
    fake_llm.script("Milk it is.")
    fake_llm.transcribe_as("Please buy milk.")
    transcription = {"base_url": fake_llm.openai_base_url, "model": "whisper-1", "api_key": "${SB_TRANSCRIBE_KEY}"}
    settings = config(tmp_path, fake_llm, dc, transcription=transcription)
    async with running(settings, tmp_path, env={"SB_TRANSCRIBE_KEY": TRANSCRIBE_KEY}) as state:
        recording = dc.attachment(RECORDING, "voice-message.ogg", "audio/ogg", duration=4.2)
        await dc.message_with_files([recording], voice=True)
        [answer] = await wait_said(dc, dm, 1)
        await finished(state)
        day = inbox_of(state)

    assert answer["content"] == "Milk it is."
    [upload] = fake_llm.transcriptions
    assert (upload.model, upload.file_name, upload.content_type, upload.data, upload.authorization) == (
        "whisper-1", "voice-message.ogg", "audio/ogg", RECORDING, f"Bearer {TRANSCRIBE_KEY}"
    )  # fmt: skip
    assert (tmp_path / "ws" / "main" / day / "voice-message.ogg").read_bytes() == RECORDING
    assert user_text(fake_llm) == (
        f'[voice note "voice-message.ogg" (104 bytes, 4 s), saved as {day}/voice-message.ogg; its transcript:]\n'
        "Please buy milk."
    )
    assert user_images(fake_llm) == []
    # the key went to the transcription endpoint only: never to the model
    assert all(TRANSCRIBE_KEY not in json.dumps(request.headers) for request in fake_llm.requests)


async def test_a_file_over_the_account_limit_is_refused_with_a_word_to_the_person(
    tmp_path: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord
) -> None:
    dc = fake_discord
    dm = dc.dm_channel_id(dc.alice)
    fake_llm.script("The big one did not come through.")
    async with running(config(tmp_path, fake_llm, dc, limits={"max_bytes": 1000}), tmp_path) as state:
        big = dc.attachment(b"x" * 5000, "big.bin")
        small = dc.attachment(b"small", "small.txt", "text/plain")
        await dc.message_with_files([big, small], "here")
        notice, answer = await wait_said(dc, dm, 2)
        await finished(state)
        day = inbox_of(state)

    assert notice["content"] == 'I could not take the file "big.bin": larger than the limit of 1.0 KB (it is 5.0 KB).'
    assert answer["content"] == "The big one did not come through."
    assert len(said(dc, dm)) == 2
    assert user_text(fake_llm).splitlines() == [
        "here",
        '[file "big.bin" (5.0 KB): not fetched, larger than the limit of 1.0 KB (it is 5.0 KB)]',
        f'[file "small.txt" (5 bytes), saved as {day}/small.txt]',
    ]
    assert files_under(tmp_path / "ws" / "main" / "inbox") == {f"{day.removeprefix('inbox/')}/small.txt": b"small"}
    assert [download.path for download in dc.downloads] == [cdn_path(small)]  # the big one never fetched


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
