"""Slack files on the real slack_sdk client against FakeSlack: attachments of every kind from file_share messages,
downloads of url_private (the token only for Slack's file host, redirects judged hop by hop, the sign-in page as a
files:read error; streamed, on every platform: test_media_every_platform.py), uploads through the external upload
flow (bytes streamed from disk, the text as the comment or before the files, the share's ts from files.info), no
polls, and threads."""

from __future__ import annotations

import contextlib
import random
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
import pytest
from fakes.slack import USER_ID, FakeSlack, dm_channel
from helpers import FakeClock
from test_slack import Inbox, account

from channels.base import Attachment, Button, ChatTarget, OutboundFile, OutboundMessage, Poll
from channels.slack import (
    CAPABILITIES,
    DEFAULT_API_BASE_URL,
    SLACK_FILE_HOST,
    SlackAdapter,
    file_origins,
    files as slack_files,
    sending as slack_sending,
)
from routing import Peer
from routing.errors import ChannelError

CHANNEL = ChatTarget(channel="slack", peer=Peer("channel", "C0GENERAL"))
MiB = 1024 * 1024


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def adapter(fake_slack: FakeSlack, clock: FakeClock) -> AsyncIterator[SlackAdapter]:
    """A started adapter whose waits (between files.info calls) pass at once on `clock`."""
    started, inbox = SlackAdapter("default", account(fake_slack), sleep=clock.sleep), Inbox()
    await started.start(inbox.on_message, inbox.on_action)
    try:
        yield started
    finally:
        await started.stop()


async def collect(adapter: SlackAdapter, attachment: Attachment) -> list[bytes]:
    async with contextlib.aclosing(adapter.download(attachment)) as chunks:
        return [chunk async for chunk in chunks]


def some_bytes(size: int, seed: int = 15) -> bytes:
    return random.Random(seed).randbytes(size)


def on_disk(tmp_path: Path, name: str, data: bytes) -> OutboundFile:
    path = tmp_path / name
    path.write_bytes(data)
    return OutboundFile(path=str(path), name=name)


def test_capabilities_say_files_threads_and_no_polls() -> None:
    assert (CAPABILITIES.files, CAPABILITIES.threads, CAPABILITIES.polls) == (True, True, False)
    assert CAPABILITIES.max_upload_bytes == 1024**3  # Slack's limit for one file
    assert CAPABILITIES.max_caption_length == 4000


# --- inbound ------------------------------------------------------------------------------------------------------


async def test_a_file_share_without_text_is_a_message_with_an_attachment_of_each_kind(fake_slack: FakeSlack) -> None:
    adapter, inbox = SlackAdapter("default", account(fake_slack)), Inbox()
    await adapter.start(inbox.on_message, inbox.on_action)
    try:
        files = [
            fake_slack.add_file(b"png", "Photo 1.png"),
            fake_slack.add_file(b"mp3", "song.mp3", "audio/mpeg", duration_ms=184_000),
            fake_slack.add_file(b"clip", "audio_message.webm", "audio/webm", subtype="slack_audio", duration_ms=4200),
            fake_slack.add_file(b"mp4", "screen.mp4", "video/mp4"),
            fake_slack.add_file(b"%PDF", "report.pdf"),
            {"id": "F0GONE", "mode": "tombstone"},  # deleted: nothing to fetch
            {"id": "F0EXT", "is_external": True, "url_private": "https://docs.example/x", "name": "doc"},
        ]
        envelope = (await fake_slack.share_files(files))[0]
        await fake_slack.wait_for_ack(envelope)
        (message,) = await inbox.wait_messages(1)
        assert message.text == "" and message.peer == Peer("direct", USER_ID)
        kinds = [(item.kind, item.name, item.mime_type, item.size, item.duration) for item in message.attachments]
        assert kinds == [
            ("image", "Photo 1.png", "image/png", 3, None),
            ("audio", "song.mp3", "audio/mpeg", 3, 184.0),
            ("voice", "audio_message.webm", "audio/webm", 4, 4.2),  # recorded in Slack: a voice note
            ("video", "screen.mp4", "video/mp4", 3, None),
            ("document", "report.pdf", "application/pdf", 4, None),
        ]
        assert [item.ref for item in message.attachments] == [file["url_private"] for file in files[:5]]

        # A plain message (no subtype) carrying a file, with text, in a channel.
        sheet = fake_slack.add_file(b"a,b\n", "data.csv", "text/csv")
        await fake_slack.share_files([sheet], "the numbers", channel="C0DATA", subtype=None, mention=True)
        second = (await inbox.wait_messages(2))[1]
        assert second.text == "the numbers" and second.was_mentioned and second.peer == Peer("channel", "C0DATA")
        assert [(item.kind, item.ref) for item in second.attachments] == [("document", sheet["url_private"])]
    finally:
        await adapter.stop()


# --- download -----------------------------------------------------------------------------------------------------


async def test_url_private_download_serves_the_same_bytes_to_an_adapter_not_started(fake_slack: FakeSlack) -> None:
    adapter = SlackAdapter("default", account(fake_slack))  # downloads need no connection, only the token
    data = some_bytes(5 * MiB + 123)
    file = fake_slack.add_file(data, "big.bin")
    chunks = await collect(adapter, Attachment(ref=file["url_private_download"], name="big.bin", size=len(data)))
    assert b"".join(chunks) == data
    assert len(chunks) > 1 and max(map(len, chunks)) <= slack_files.CHUNK_BYTES  # streamed, never whole
    (request,) = fake_slack.file_requests
    assert request.authorization == f"Bearer {fake_slack.bot_token}"
    # url_private itself, the ordinary way in on every platform: test_media_every_platform.py


async def test_redirects_keep_the_token_on_slacks_host_and_drop_it_elsewhere(fake_slack: FakeSlack) -> None:
    adapter = SlackAdapter("default", account(fake_slack))
    token = f"Bearer {fake_slack.bot_token}"
    moved = fake_slack.add_file(b"moved bytes", "moved.txt", redirect="same")
    assert b"".join(await collect(adapter, Attachment(ref=moved["url_private"]))) == b"moved bytes"
    assert [request.authorization for request in fake_slack.file_requests] == [token, token]

    fake_slack.file_requests.clear()
    away = fake_slack.add_file(b"cdn bytes", "away.txt", redirect="other")
    assert b"".join(await collect(adapter, Attachment(ref=away["url_private"]))) == b"cdn bytes"
    first, second = fake_slack.file_requests
    assert first.authorization == token and second.path.startswith("/cdn/")
    assert second.host == fake_slack.other_url.removeprefix("http://") and second.authorization is None


async def test_a_file_that_is_not_on_slacks_host_is_refused_unfetched(fake_slack: FakeSlack) -> None:
    adapter = SlackAdapter("default", account(fake_slack))
    elsewhere = fake_slack.add_file(b"x", "x.txt")["id"]
    for ref in (f"{fake_slack.other_url}/cdn/{elsewhere}", "file:///etc/passwd", "not a url"):
        with pytest.raises(ChannelError, match="not on Slack's file host"):
            await collect(adapter, Attachment(ref=ref))
    assert fake_slack.file_requests == []
    api_host = urlsplit(DEFAULT_API_BASE_URL).hostname
    assert file_origins(None) == {SLACK_FILE_HOST, ("https", api_host, 443)}  # Slack's file host and API host
    assert ("http", "127.0.0.1", 8080) in file_origins("http://127.0.0.1:8080")


async def test_failed_downloads_are_channel_errors_without_the_token(fake_slack: FakeSlack) -> None:
    adapter = SlackAdapter("default", account(fake_slack))
    file = fake_slack.add_file(b"secret", "notes.txt")
    fake_slack.files_read = False  # the app was installed without files:read: Slack answers with its sign-in page
    with pytest.raises(ChannelError, match="files:read") as no_scope:
        await collect(adapter, Attachment(ref=file["url_private"], name="notes.txt"))
    fake_slack.files_read = True

    stranger = SlackAdapter("other", account(fake_slack, bot_token="xoxb-not-this-workspace"))
    with pytest.raises(ChannelError, match="files:read") as wrong_token:  # redirected to the sign-in page
        await collect(stranger, Attachment(ref=file["url_private"]))

    gone = file["url_private"].replace(file["id"], "F0NOTHERE")
    with pytest.raises(ChannelError, match="HTTP 404") as missing:
        await collect(adapter, Attachment(ref=gone))

    for error in (no_scope.value, wrong_token.value, missing.value):
        assert "xoxb-" not in str(error) and error.__cause__ is None
    assert "notes.txt" in str(no_scope.value)


# --- upload -------------------------------------------------------------------------------------------------------


async def test_a_file_goes_up_with_the_text_as_its_comment(
    adapter: SlackAdapter, fake_slack: FakeSlack, tmp_path: Path
) -> None:
    data = some_bytes(3 * MiB + 7)
    file = on_disk(tmp_path, "report.pdf", data)
    root = fake_slack.new_ts()
    target = CHANNEL.model_copy(update={"thread_id": root})
    ts = await adapter.send(target, OutboundMessage(text="**Here** it is", media=[file]))

    (asked,) = fake_slack.calls_to("files.getUploadURLExternal")
    assert (asked.body["filename"], asked.body["length"]) == ("report.pdf", str(len(data)))
    (upload,) = await fake_slack.wait_for_uploads(1)
    assert upload.data == data and not upload.multipart  # the raw bytes, as slack_sdk sends them
    assert upload.headers["content-length"] == str(len(data))
    assert "authorization" not in upload.headers  # the upload URL is signed: no token goes there
    assert (upload.channel, upload.thread_ts, upload.initial_comment) == ("C0GENERAL", root, "*Here* it is")
    assert upload.title == "report.pdf"
    assert ts is not None and ts == upload.ts  # read from files.info: completeUploadExternal does not say it
    assert fake_slack.posted == []  # the text went as the comment
    await adapter.react(CHANNEL, ts, "👍")  # the id names a real message
    assert fake_slack.reactions == [("C0GENERAL", ts, "thumbsup")]


async def test_text_too_long_for_a_comment_goes_first_and_files_share_one_message(
    adapter: SlackAdapter, fake_slack: FakeSlack, tmp_path: Path
) -> None:
    files = [on_disk(tmp_path, "a.txt", b"first"), on_disk(tmp_path, "b.png", b"\x89PNG second")]
    long = " ".join(["word"] * 900)  # 4,499 characters: more than a comment holds
    ts = await adapter.send(CHANNEL, OutboundMessage(text=long, media=files))

    methods = [call.method for call in fake_slack.calls if call.method.startswith(("chat.", "files."))]
    assert methods[:2] == ["chat.postMessage", "files.getUploadURLExternal"]  # the text before the files
    assert [body["text"] for body in fake_slack.posted] == [long]
    first, second = await fake_slack.wait_for_uploads(2)
    assert (first.data, second.data) == (b"first", b"\x89PNG second")
    assert first.ts == second.ts == ts and first.initial_comment is None  # one message holds both
    assert len(fake_slack.calls_to("files.completeUploadExternal")) == 1

    # Buttons cannot ride on a file share: the text and its buttons go as their own message.
    with_buttons = OutboundMessage(text="pick", buttons=[[Button(label="A", value="a")]], media=[files[0]])
    await adapter.send(CHANNEL, with_buttons)
    assert fake_slack.posted[-1]["text"] == "pick" and fake_slack.posted[-1]["blocks"]
    assert fake_slack.shared_uploads[-1].initial_comment is None


async def test_eleven_files_are_shared_in_two_messages(
    adapter: SlackAdapter, fake_slack: FakeSlack, tmp_path: Path
) -> None:
    files = [on_disk(tmp_path, f"f{number}.txt", str(number).encode()) for number in range(11)]
    ts = await adapter.send(CHANNEL, OutboundMessage(text="all of them", media=files))
    uploads = await fake_slack.wait_for_uploads(11)
    assert [upload.data for upload in uploads] == [str(number).encode() for number in range(11)]
    assert len({upload.ts for upload in uploads[:10]}) == 1 and uploads[10].ts == ts != uploads[0].ts
    assert [upload.initial_comment for upload in (uploads[0], uploads[10])] == ["all of them", None]


async def test_a_file_to_a_dm_is_shared_in_the_dm_channel(
    adapter: SlackAdapter, fake_slack: FakeSlack, tmp_path: Path
) -> None:
    target = ChatTarget(channel="slack", peer=Peer("direct", USER_ID))
    ts = await adapter.send(target, OutboundMessage(text="", media=[on_disk(tmp_path, "x.txt", b"x")]))
    (upload,) = await fake_slack.wait_for_uploads(1)
    assert upload.channel == dm_channel(USER_ID)  # completeUploadExternal takes no user id: the DM was opened
    assert fake_slack.calls_to("conversations.open") and upload.initial_comment is None
    assert ts is not None and ts == upload.ts and fake_slack.posted == []  # no text, no text message
    await adapter.delete(target, ts)
    assert (dm_channel(USER_ID), ts) not in fake_slack.messages


async def test_the_share_ts_is_asked_again_while_slack_has_not_shared_yet(
    adapter: SlackAdapter, fake_slack: FakeSlack, clock: FakeClock, tmp_path: Path
) -> None:
    fake_slack.share_lag = 2
    ts = await adapter.send(CHANNEL, OutboundMessage(text="late", media=[on_disk(tmp_path, "a.txt", b"a")]))
    assert ts is not None and ts == fake_slack.shared_uploads[0].ts
    assert len(fake_slack.calls_to("files.info")) == 3 and clock.slept == [0.5, 1.0]

    fake_slack.share_lag = 100  # Slack never says: the file is shared all the same, without an id
    assert await adapter.send(CHANNEL, OutboundMessage(text="never", media=[on_disk(tmp_path, "b.txt", b"b")])) is None
    assert len(fake_slack.shared_uploads) == 2


async def test_unsendable_files_and_polls_are_channel_errors(
    adapter: SlackAdapter, fake_slack: FakeSlack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ChannelError, match=r"cannot read missing\.txt"):
        await adapter.send(CHANNEL, OutboundMessage(text="", media=[OutboundFile(path="/nope/x", name="missing.txt")]))
    monkeypatch.setattr(slack_sending, "MAX_UPLOAD_BYTES", 10)
    with pytest.raises(ChannelError, match=r"big\.bin is 11 bytes"):
        await adapter.send(CHANNEL, OutboundMessage(text="", media=[on_disk(tmp_path, "big.bin", b"x" * 11)]))
    poll = Poll(question="Lunch?", options=["pizza", "soup"])
    with pytest.raises(ChannelError, match="no native polls"):
        await adapter.send(CHANNEL, OutboundMessage(text="vote", poll=poll))
    assert fake_slack.uploads == [] and fake_slack.posted == []


async def test_the_fake_speaks_the_upload_wire_of_files_upload_v2_and_multipart(
    adapter: SlackAdapter, fake_slack: FakeSlack
) -> None:
    assert adapter.client is not None
    done = await adapter.client.files_upload_v2(content=b"from the sdk", filename="sdk.txt", channel="C0GENERAL")
    assert done["file"]["name"] == "sdk.txt"
    ticket = await adapter.client.files_getUploadURLExternal(filename="form.txt", length=4)
    form = aiohttp.FormData()
    form.add_field("file", b"form", filename="form.txt")
    async with aiohttp.ClientSession() as session, session.post(ticket["upload_url"], data=form) as response:
        assert response.status == 200
    await adapter.client.files_completeUploadExternal(files=[{"id": ticket["file_id"]}], channel_id="C0GENERAL")
    sdk, multipart = await fake_slack.wait_for_uploads(2)
    assert (sdk.data, sdk.multipart, multipart.data, multipart.multipart) == (b"from the sdk", False, b"form", True)


# --- threads ------------------------------------------------------------------------------------------------------


async def test_create_thread_posts_its_name_or_uses_the_given_message(
    adapter: SlackAdapter, fake_slack: FakeSlack
) -> None:
    inside = CHANNEL.model_copy(update={"thread_id": "1.000001"})
    thread = await adapter.create_thread(inside, "Release 15")  # a new thread starts at the top of the chat
    (posted,) = fake_slack.posted
    assert posted["text"] == "Release 15" and "thread_ts" not in posted
    await adapter.send(CHANNEL.model_copy(update={"thread_id": thread}), OutboundMessage(text="first reply"))
    assert fake_slack.posted[-1]["thread_ts"] == thread == fake_slack.messages[("C0GENERAL", thread)]["ts"]

    assert await adapter.create_thread(CHANNEL, "ignored", message_id="2.000002") == "2.000002"
    assert len(fake_slack.posted) == 2  # replying to a message starts its thread: nothing to post
