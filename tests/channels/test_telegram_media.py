"""Files on Telegram, on the real python-telegram-bot against the fake Bot API: what comes with a message (each kind,
albums merged into one message and confirmed only once recorded), downloads that fail (an expired path, a file over
20 MB), uploads (one file, albums, text before or as the caption), polls and forum topics. A download streamed from
the file server, on every platform: test_media_every_platform.py."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator
from contextlib import aclosing
from pathlib import Path
from typing import Any

import httpx
import pytest
from fakes.telegram import MAX_DOWNLOAD, FakeTelegram
from helpers import WAIT, FakeClock, eventually
from telegram_adapter import Inbox, dm, running, settings

import channels.telegram.sending as telegram_sending  # where send() looks markdown_to_html up
from channels.base import Attachment, Button, ChatTarget, OutboundFile, OutboundMessage, Poll
from channels.telegram import CAPABILITIES, TelegramAdapter, TelegramRateLimiter, TelegramSendError
from routing import Peer
from routing.errors import ChannelError


async def no_wait() -> None:
    """An album wait that ends at once: the tests that use it queue every part before the bot polls."""


@pytest.fixture
def tg(fake_telegram: FakeTelegram) -> FakeTelegram:
    return fake_telegram


@pytest.fixture
async def started(tg: FakeTelegram) -> AsyncIterator[tuple[TelegramAdapter, Inbox]]:
    async with running(tg, album_wait=no_wait) as started:
        yield started


def written(folder: Path, name: str, data: bytes) -> str:
    path = folder / name
    path.write_bytes(data)
    return str(path)


async def fetched(adapter: TelegramAdapter, attachment: Attachment) -> list[bytes]:
    async with aclosing(adapter.download(attachment)) as chunks:
        return [chunk async for chunk in chunks]


# --- what comes with a message -------------------------------------------------------------------------------------


async def test_a_photo_without_a_caption_is_a_message_with_the_largest_size(
    tg: FakeTelegram, started: tuple[TelegramAdapter, Inbox]
) -> None:
    adapter, inbox = started
    update = await tg.media_message("photo", b"\xff\xd8 a jpeg " * 50)
    message = await inbox.message()
    assert message.text == "" and message.message_id == str(update["message"]["message_id"])
    [photo] = message.attachments
    largest = update["message"]["photo"][-1]
    assert photo == Attachment(kind="image", ref=largest["file_id"], mime_type="image/jpeg", size=largest["file_size"])
    assert b"".join(await fetched(adapter, photo)) == b"\xff\xd8 a jpeg " * 50
    await tg.acknowledged(update)


@pytest.mark.parametrize(
    ("kind", "options", "expected"),
    [
        (
            "document",
            {"name": "report.pdf", "mime_type": "application/pdf"},
            ("document", "report.pdf", "application/pdf"),
        ),
        ("voice", {"duration": 4}, ("voice", None, "audio/ogg")),
        ("audio", {"name": "song.mp3", "duration": 200}, ("audio", "song.mp3", "audio/mpeg")),
        ("video", {"name": "clip.mp4", "duration": 9}, ("video", "clip.mp4", "video/mp4")),
        ("video_note", {"duration": 5}, ("video", None, "video/mp4")),
        ("animation", {"name": "dance.gif.mp4", "mime_type": "video/mp4"}, ("video", "dance.gif.mp4", "video/mp4")),
        ("sticker", {}, ("sticker", None, "image/webp")),
        ("sticker", {"mime_type": "video/webm"}, ("sticker", None, "video/webm")),
        ("sticker", {"mime_type": "application/x-tgsticker"}, ("sticker", None, "application/x-tgsticker")),
    ],
)
async def test_each_kind_of_file_becomes_one_attachment(
    tg: FakeTelegram,
    started: tuple[TelegramAdapter, Inbox],
    kind: str,
    options: dict[str, Any],
    expected: tuple[str, str | None, str],
) -> None:
    _, inbox = started
    update = await tg.media_message(kind, b"bytes of a " + kind.encode(), caption=f"a {kind}", **options)
    message = await inbox.message()
    assert message.text == f"a {kind}"  # the caption is the text
    [attachment] = message.attachments  # an animation's document copy is not a second file
    assert (attachment.kind, attachment.name, attachment.mime_type) == expected
    assert attachment.ref == update["message"][kind]["file_id"]
    assert attachment.size == len(b"bytes of a " + kind.encode())
    timed = kind in ("voice", "audio", "video", "video_note", "animation")
    assert attachment.duration == (float(options.get("duration", 3)) if timed else None)  # the fake's default: 3


async def test_a_caption_can_mention_the_bot_in_a_group(
    tg: FakeTelegram, started: tuple[TelegramAdapter, Inbox]
) -> None:
    _, inbox = started
    handle = f"@{tg.username}"
    caption_entities = [{"type": "mention", "offset": 0, "length": len(handle)}]
    await tg.media_message(
        "photo", b"jpeg", caption=f"{handle} what is this?", chat_id=tg.group_id, caption_entities=caption_entities
    )
    message = await inbox.message()
    assert message.peer == Peer("group", str(tg.group_id))
    assert message.was_mentioned is True and message.text == f"{handle} what is this?"


async def test_an_album_is_one_message_with_its_files_in_order(
    tg: FakeTelegram, started: tuple[TelegramAdapter, Inbox]
) -> None:
    _, inbox = started
    parts = await tg.media_group([("photo", b"one", ""), ("photo", b"two", "the trip"), ("video", b"three", "")])
    after = await tg.private_message("and a question")
    first = await inbox.message()
    assert (await inbox.message(2)).text == "and a question"
    assert first.text == "the trip" and first.message_id == str(parts[0]["message"]["message_id"])
    assert [attachment.kind for attachment in first.attachments] == ["image", "image", "video"]
    assert [attachment.size for attachment in first.attachments] == [3, 3, 5]
    assert all(attachment.caption is None for attachment in first.attachments)
    await tg.acknowledged(after)
    assert len(inbox.messages) == 2


async def test_an_albums_other_captions_stay_on_their_files(
    tg: FakeTelegram, started: tuple[TelegramAdapter, Inbox]
) -> None:
    _, inbox = started
    await tg.media_group([("document", b"a", "first notes"), ("document", b"b", "second notes")])
    message = await inbox.message()
    assert message.text == "first notes"
    assert [attachment.caption for attachment in message.attachments] == [None, "second notes"]


async def test_a_late_part_of_an_album_joins_it_and_nothing_is_confirmed_before_it_is_recorded(
    tg: FakeTelegram,
) -> None:
    waiting, go_on = asyncio.Event(), asyncio.Event()

    async def album_wait() -> None:
        waiting.set()
        await go_on.wait()

    async with running(tg, album_wait=album_wait) as (adapter, inbox):
        await tg.private_message("before")
        first = await tg.media_message("photo", b"first", caption="two photos", media_group_id="g-1")
        await eventually(waiting.is_set, "the bot to wait for the rest of the album")
        # what came before the album is delivered; the album's first part is neither delivered nor confirmed
        assert [message.text for message in inbox.messages] == ["before"]
        assert adapter._offset == first["update_id"] and max(tg.offsets) <= first["update_id"]
        inbox.hold = asyncio.Event()
        inbox.entered.clear()
        late = await tg.media_message("photo", b"second", media_group_id="g-1")
        go_on.set()
        await eventually(inbox.entered.is_set, "the album to be handed over")
        assert max(tg.offsets) <= first["update_id"]  # on_message is still running: nothing of the album confirmed
        inbox.hold.set()
        album = await inbox.message(2)
        assert album.text == "two photos" and album.message_id == str(first["message"]["message_id"])
        assert [attachment.size for attachment in album.attachments] == [5, 6]
        await tg.acknowledged(late)
        assert len(inbox.messages) == 2


async def test_an_album_the_gateway_could_not_record_comes_again_whole(tg: FakeTelegram) -> None:
    async with running(tg, album_wait=no_wait) as (_, inbox):
        inbox.failures = 1
        parts = await tg.media_group([("photo", b"a", "album"), ("photo", b"b", "")])
        message = await inbox.message()
        assert len(message.attachments) == 2 and message.text == "album"
        await tg.acknowledged(parts[-1])
        assert len(inbox.messages) == 1


async def test_in_webhook_mode_each_part_of_an_album_is_a_message_of_its_own(tg: FakeTelegram) -> None:
    account = settings(tg, mode="webhook", webhook_url="https://example.invalid/tg", webhook_secret="s", webhook_port=0)
    adapter = TelegramAdapter("hook", account)
    inbox = Inbox()
    await adapter.start(inbox.on_message, inbox.on_action)
    try:
        parts = [tg.media_update("photo", data, media_group_id="g-9") for data in (b"a", b"b")]
        async with httpx.AsyncClient(timeout=WAIT) as client:
            for part in parts:
                answer = await client.post(
                    f"http://127.0.0.1:{adapter.webhook_port}/",
                    json=part,
                    headers={"X-Telegram-Bot-Api-Secret-Token": "s"},
                )
                assert answer.status_code == 200
        assert [len(message.attachments) for message in inbox.messages] == [1, 1]
    finally:
        await adapter.stop()


# --- downloads -----------------------------------------------------------------------------------------------------


async def test_a_failed_download_is_a_channel_error_without_the_token(
    tg: FakeTelegram, started: tuple[TelegramAdapter, Inbox], caplog: pytest.LogCaptureFixture
) -> None:
    adapter, _ = started
    caplog.set_level(logging.DEBUG)
    stored = tg.add_file(b"gone", "documents", ".txt")
    tg.expire_file(stored.file_id)
    with pytest.raises(ChannelError, match="404") as expired:
        await fetched(adapter, Attachment(ref=stored.file_id))
    with pytest.raises(ChannelError) as unknown:
        await fetched(adapter, Attachment(ref="no-such-file"))
    for error in (expired.value, unknown.value):
        assert tg.token not in str(error) and tg.token.split(":")[1] not in repr(error)
        assert error.__cause__ is None and error.__suppress_context__
    assert tg.token not in caplog.text


async def test_a_file_over_20_mb_is_refused_by_telegram_with_a_clear_error(
    tg: FakeTelegram, started: tuple[TelegramAdapter, Inbox]
) -> None:
    adapter, _ = started
    stored = tg.add_file(bytes(MAX_DOWNLOAD + 1), "videos", ".mp4")
    with pytest.raises(ChannelError, match="20 MB"):
        await fetched(adapter, Attachment(kind="video", ref=stored.file_id))
    assert tg.downloads == []


# --- uploads -------------------------------------------------------------------------------------------------------


async def test_one_image_goes_as_a_photo_with_the_text_as_its_caption(
    tg: FakeTelegram, started: tuple[TelegramAdapter, Inbox], tmp_path: Path
) -> None:
    adapter, _ = started
    data = os.urandom(300_000)
    photo = OutboundFile(path=written(tmp_path, "chart.png", data), name="chart.png", kind="image")
    buttons = [[Button(label="More", value="more")]]
    message_id = await adapter.send(dm(tg), OutboundMessage(text="the **chart**", media=[photo], buttons=buttons))
    [upload] = tg.uploads
    assert (upload.method, upload.filename, upload.content_type, upload.data) == (
        "sendPhoto",
        "chart.png",
        "image/png",
        data,
    )
    assert upload.caption == "the <b>chart</b>" and message_id == str(upload.message_id)
    assert tg.calls("sendPhoto")[0]["reply_markup"] == {
        "inline_keyboard": [[{"text": "More", "callback_data": "more"}]]
    }
    assert tg.calls("sendMessage") == []
    assert tg.chat_texts(tg.user_id) == ["the chart"]


@pytest.mark.parametrize(
    ("name", "kind", "mime", "method"),
    [
        ("note.ogg", "voice", None, "sendVoice"),
        ("note.bin", "voice", "audio/ogg", "sendVoice"),
        ("talk.mp3", "voice", None, "sendAudio"),
        ("song.mp3", "audio", None, "sendAudio"),
        ("clip.mp4", "video", None, "sendVideo"),
        ("clip.mkv", "video", None, "sendDocument"),
        ("notes.txt", "document", None, "sendDocument"),
        ("drawing.svg", "image", None, "sendDocument"),
        ("data.json", "sticker", None, "sendDocument"),
    ],
)
async def test_each_kind_of_file_goes_by_its_method(
    tg: FakeTelegram,
    started: tuple[TelegramAdapter, Inbox],
    tmp_path: Path,
    name: str,
    kind: Any,
    mime: str | None,
    method: str,
) -> None:
    adapter, _ = started
    file = OutboundFile(
        path=written(tmp_path, name, b"content of " + name.encode()), name=name, kind=kind, mime_type=mime
    )
    await adapter.send(dm(tg), OutboundMessage(text="", media=[file]))
    [upload] = tg.uploads
    assert (upload.method, upload.data, upload.filename, upload.caption) == (
        method,
        b"content of " + name.encode(),
        name,
        None,
    )
    if mime:
        assert upload.content_type == mime


async def test_a_text_too_long_for_a_caption_goes_first_and_the_file_after_it(
    tg: FakeTelegram, started: tuple[TelegramAdapter, Inbox], tmp_path: Path
) -> None:
    adapter, _ = started
    text = "word " * 300
    assert len(text) > CAPABILITIES.max_caption_length
    file = OutboundFile(path=written(tmp_path, "a.txt", b"A"), name="a.txt")
    last = await adapter.send(dm(tg), OutboundMessage(text=text, media=[file], reply_to="42"))
    [upload] = tg.uploads
    assert upload.caption is None and last == str(upload.message_id)
    [sent] = tg.calls("sendMessage")
    assert sent["text"].split() == text.split() and sent["reply_parameters"]["message_id"] == 42
    assert "reply_parameters" not in tg.calls("sendDocument")[0]  # only the first message replies


async def test_files_go_in_albums_that_never_mix_photos_with_documents(
    tg: FakeTelegram, started: tuple[TelegramAdapter, Inbox], tmp_path: Path
) -> None:
    adapter, _ = started
    photos = [
        OutboundFile(path=written(tmp_path, f"p{i}.jpg", b"photo %d" % i), name=f"p{i}.jpg", kind="image")
        for i in range(11)
    ]
    video = OutboundFile(path=written(tmp_path, "v.mp4", b"video"), name="v.mp4", kind="video")
    documents = [OutboundFile(path=written(tmp_path, f"d{i}.pdf", b"doc %d" % i), name=f"d{i}.pdf") for i in range(2)]
    voice = OutboundFile(path=written(tmp_path, "hi.ogg", b"voice"), name="hi.ogg", kind="voice")
    media = [*photos, video, *documents, voice]
    last = await adapter.send(dm(tg), OutboundMessage(text="everything", media=media))

    albums = tg.calls("sendMediaGroup")
    assert [[item["type"] for item in album["media"]] for album in albums] == [
        ["photo"] * 10,
        ["photo", "video"],
        ["document", "document"],
    ]
    assert albums[0]["media"][0]["caption"] == "everything" and "caption" not in albums[1]["media"][0]
    assert [upload.method for upload in tg.uploads] == ["sendMediaGroup"] * 14 + ["sendVoice"]
    assert [upload.data for upload in tg.uploads] == [Path(file.path).read_bytes() for file in media]
    assert [upload.filename for upload in tg.uploads] == [file.name for file in media]
    assert len({upload.media_group_id for upload in tg.uploads[:10]}) == 1
    assert last == str(tg.uploads[-1].message_id)


async def test_buttons_never_ride_on_an_album(
    tg: FakeTelegram, started: tuple[TelegramAdapter, Inbox], tmp_path: Path
) -> None:
    adapter, _ = started
    media = [OutboundFile(path=written(tmp_path, f"{i}.jpg", b"x"), name=f"{i}.jpg", kind="image") for i in range(2)]
    buttons = [[Button(label="OK", value="ok")]]
    await adapter.send(dm(tg), OutboundMessage(text="pick", media=media, buttons=buttons))
    [text] = tg.calls("sendMessage")
    assert text["text"] == "pick" and text["reply_markup"]["inline_keyboard"][0][0]["text"] == "OK"
    assert "caption" not in tg.calls("sendMediaGroup")[0]["media"][0]
    with pytest.raises(TelegramSendError, match="album"):
        await adapter.send(dm(tg), OutboundMessage(text="", media=media, buttons=buttons))
    assert len(tg.calls("sendMediaGroup")) == 1


async def test_a_file_over_the_upload_limit_is_refused_before_anything_is_sent(
    tg: FakeTelegram, started: tuple[TelegramAdapter, Inbox], tmp_path: Path
) -> None:
    adapter, _ = started
    big = tmp_path / "big.bin"
    with big.open("wb") as handle:
        handle.truncate(CAPABILITIES.max_upload_bytes + 1)  # sparse: no 50 MB written
    small = OutboundFile(path=written(tmp_path, "small.txt", b"s"), name="small.txt")
    with pytest.raises(TelegramSendError, match=r"big\.bin"):
        await adapter.send(
            dm(tg), OutboundMessage(text="two", media=[small, OutboundFile(path=str(big), name="big.bin")])
        )
    assert tg.requests[-1].method != "sendDocument" and tg.uploads == [] and tg.calls("sendMessage") == []


async def test_a_rate_limited_upload_sends_the_whole_file_again(tg: FakeTelegram, tmp_path: Path) -> None:
    clock = FakeClock()
    data = os.urandom(200_000)
    file = OutboundFile(path=written(tmp_path, "r.pdf", data), name="r.pdf")
    tg.fail_next("sendDocument", 1, retry_after=2)
    async with running(tg, rate_limiter=TelegramRateLimiter(clock=clock, sleep=clock.sleep)) as (adapter, _):
        await adapter.send(dm(tg), OutboundMessage(text="report", media=[file]))
    assert clock.slept == [2.0]
    attempts = tg.calls("sendDocument")
    assert [call["document"].data for call in attempts] == [data, data]
    assert [upload.data for upload in tg.uploads] == [data]


async def test_a_caption_telegram_cannot_parse_goes_as_plain_text(
    tg: FakeTelegram, started: tuple[TelegramAdapter, Inbox], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    adapter, _ = started
    monkeypatch.setattr(telegram_sending, "markdown_to_html", lambda text: f"<b>{text}")
    file = OutboundFile(path=written(tmp_path, "x.jpg", b"jpeg"), name="x.jpg", kind="image")
    await adapter.send(dm(tg), OutboundMessage(text="**plain**", media=[file]))
    first, second = tg.calls("sendPhoto")
    assert first["parse_mode"] == "HTML" and "parse_mode" not in second
    assert [upload.caption for upload in tg.uploads] == ["**plain**"]
    assert second["photo"].data == b"jpeg"


# --- polls and topics ----------------------------------------------------------------------------------------------


async def test_a_poll_comes_after_its_text(tg: FakeTelegram, started: tuple[TelegramAdapter, Inbox]) -> None:
    adapter, _ = started
    poll = Poll(question="Lunch?", options=["Pizza", "Sushi", "Salad"])
    message_id = await adapter.send(dm(tg), OutboundMessage(text="Quick **vote**", poll=poll))
    assert tg.sent[tg.user_id] == ["Quick <b>vote</b>"]
    [sent] = tg.calls("sendPoll")
    assert sent["question"] == "Lunch?" and [option["text"] for option in sent["options"]] == poll.options
    media = tg.messages[(tg.user_id, int(message_id or 0))].media  # the id returned is the poll's
    assert media is not None and media["poll"]["question"] == "Lunch?"
    await adapter.send(dm(tg), OutboundMessage(text="", poll=poll))
    assert len(tg.calls("sendPoll")) == 2 and len(tg.calls("sendMessage")) == 1


async def test_a_poll_telegram_would_refuse_is_refused_before_sending(
    tg: FakeTelegram, started: tuple[TelegramAdapter, Inbox]
) -> None:
    adapter, _ = started
    for poll in (Poll(question="?", options=[str(i) for i in range(13)]), Poll(question="q" * 301, options=["a", "b"])):
        with pytest.raises(TelegramSendError):
            await adapter.send(dm(tg), OutboundMessage(text="vote", poll=poll))
    assert tg.calls("sendMessage") == [] and tg.calls("sendPoll") == []


async def test_a_thread_is_a_forum_topic_that_messages_then_go_to(
    tg: FakeTelegram, started: tuple[TelegramAdapter, Inbox]
) -> None:
    adapter, _ = started
    group = ChatTarget(channel="telegram", peer=Peer("group", tg.forum_chat()))
    thread = await adapter.create_thread(group, "Release planning", message_id="12")
    assert tg.topics == {(tg.group_id, int(thread)): "Release planning"}
    await adapter.send(group.model_copy(update={"thread_id": thread}), OutboundMessage(text="first post"))
    assert tg.calls("sendMessage")[-1]["message_thread_id"] == int(thread)
    in_topic = ChatTarget(channel="telegram", peer=Peer("group", f"{tg.group_id}:topic:{thread}"))
    assert await adapter.create_thread(in_topic, "x" * 200) != thread  # made in the forum itself, the name cut
    assert tg.calls("createForumTopic")[-1] == {"chat_id": tg.group_id, "name": "x" * 128}


async def test_a_thread_outside_a_forum_is_a_channel_error(
    tg: FakeTelegram, started: tuple[TelegramAdapter, Inbox]
) -> None:
    adapter, _ = started
    with pytest.raises(ChannelError, match="not a forum"):
        await adapter.create_thread(dm(tg), "Topic")


def test_the_capabilities_say_what_telegram_takes() -> None:
    assert (CAPABILITIES.files, CAPABILITIES.polls, CAPABILITIES.threads) == (True, True, True)
    assert (CAPABILITIES.max_upload_bytes, CAPABILITIES.max_caption_length) == (50 * 1024 * 1024, 1024)
