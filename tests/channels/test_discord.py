"""The Discord adapter on the real discord.py Client against FakeDiscord (REST + gateway WebSocket on 127.0.0.1),
then end to end through a real Gateway with the fake LLM and a SQLite store. A streamed reply, on every platform:
test_streaming_every_platform.py."""

from __future__ import annotations

import json
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from pathlib import Path
from typing import Any

import aiohttp
import discord
import pytest
from fakes.discord import (
    CHANNEL_ID,
    GUILD_ID,
    OTHER_ROLE_ID,
    ROLE_ID,
    THREAD_ID,
    FakeDiscord,
)
from fakes.llm import FakeLLM
from helpers import eventually
from platforms import Inbox

from bot.app import App
from bot.config.loading import parse_config
from bot.delivery.outbox import Delivery
from bot.gateway.process import Gateway
from bot.store import SqliteStore
from channels.base import (
    Attachment,
    Button,
    ChatTarget,
    OutboundFile,
    OutboundMessage,
    Poll,
)
from channels.chunking import chunk_text
from channels.discord import (
    CAPABILITIES,
    CDN_HOSTS,
    DiscordAccount,
    DiscordAdapter,
    DiscordStartError,
    cdn_url_allowed,
)
from routing import Peer
from routing.errors import ChannelError

CDN, MEDIA = sorted(CDN_HOSTS)  # Discord's CDN hosts, as the adapter names them


def account(server: FakeDiscord, **extra: Any) -> DiscordAccount:
    # A short guild_ready_timeout only makes start() quick: the fake sends the guild before anything that needs it.
    settings = {"token": server.token, **server.urls, "guild_ready_timeout": 0.05}
    return DiscordAccount.model_validate({**settings, **extra})


@pytest.fixture
async def started(fake_discord: FakeDiscord) -> AsyncIterator[tuple[DiscordAdapter, Inbox]]:
    adapter = DiscordAdapter("default", account(fake_discord))
    inbox = Inbox()
    await adapter.start(inbox.on_message, inbox.on_action)
    try:
        yield adapter, inbox
    finally:
        await adapter.stop()


def channel_target(channel_id: str = CHANNEL_ID) -> ChatTarget:
    return ChatTarget(channel="discord", peer=Peer("channel", channel_id))


# --- connecting -------------------------------------------------------------------------------------------------


async def test_start_logs_in_identifies_with_the_intents_and_knows_its_name(
    fake_discord: FakeDiscord,
    started: tuple[DiscordAdapter, Inbox],
) -> None:
    adapter, _ = started
    assert adapter.bot_username == "switchbot"
    assert adapter.bot_user_id == fake_discord.bot.id
    assert [r.path for r in fake_discord.requests[:2]] == ["/users/@me", "/oauth2/applications/@me"]
    intents = fake_discord.identifies[0]["intents"]
    for bit in (1 << 0, 1 << 9, 1 << 12, 1 << 15):  # guilds, guild messages, DMs, message content
        assert intents & bit, bin(intents)
    assert fake_discord.identifies[0]["token"] == fake_discord.token
    assert adapter.capabilities.max_text_length == 2000
    assert adapter.capabilities.markup == "discord-markdown"
    assert adapter.capabilities.files and adapter.capabilities.polls and adapter.capabilities.threads
    assert adapter.capabilities.max_upload_bytes == 10 * 1024 * 1024  # a bot in DMs and unboosted guilds
    assert adapter.capabilities.max_caption_length == 2000


async def test_a_bad_token_fails_start_with_a_clear_error(fake_discord: FakeDiscord) -> None:
    adapter = DiscordAdapter("default", account(fake_discord, token="wrong"))
    inbox = Inbox()
    with pytest.raises(DiscordStartError, match=r"^discord/default: the token was refused \(401\): reset it"):
        await adapter.start(inbox.on_message, inbox.on_action)


async def test_no_ready_within_the_timeout_fails_start(fake_discord: FakeDiscord) -> None:
    fake_discord.send_ready = False
    waited: list[float] = []

    async def ready_timeout(seconds: float) -> None:  # runs out once the bot has identified, however long that takes
        waited.append(seconds)
        await eventually(lambda: bool(fake_discord.identifies), "the bot to identify")

    adapter = DiscordAdapter("default", account(fake_discord, ready_timeout=7.0), sleep=ready_timeout)
    inbox = Inbox()
    with pytest.raises(DiscordStartError, match="no READY from the gateway within 7s"):
        await adapter.start(inbox.on_message, inbox.on_action)
    assert waited == [7.0]
    assert fake_discord.identifies  # it got as far as identifying


async def test_an_unreachable_gateway_fails_start(fake_discord: FakeDiscord) -> None:
    nowhere = fake_discord.gateway_url.replace("/gateway", "/nowhere")  # the WebSocket handshake gets a 404
    # discord.py gives up after one reconnect delay (under 2 s): the failure, not the ready timeout, ends start().
    adapter = DiscordAdapter("default", account(fake_discord, gateway_url=nowhere, ready_timeout=60.0))
    inbox = Inbox()
    with pytest.raises(DiscordStartError, match="could not connect"):
        await adapter.start(inbox.on_message, inbox.on_action)


async def test_two_adapters_in_one_process_each_talk_to_their_own_server(
    fake_discord: FakeDiscord,
    started: tuple[DiscordAdapter, Inbox],
) -> None:
    first, first_inbox = started
    async with FakeDiscord() as other_server:
        second = DiscordAdapter("second", account(other_server))
        second_inbox = Inbox()
        await second.start(second_inbox.on_message, second_inbox.on_action)
        try:
            await first.send(channel_target(), OutboundMessage(text="to the first"))
            await second.send(channel_target(), OutboundMessage(text="to the second"))
            await other_server.dm("hello second")
            assert (await second_inbox.message()).account == "second"
        finally:
            await second.stop()
        assert other_server.texts() == ["to the second"]
    assert fake_discord.texts() == ["to the first"]
    assert first_inbox.messages == []


# --- inbound ----------------------------------------------------------------------------------------------------


async def test_a_dm_is_a_direct_peer_and_the_bots_own_messages_are_skipped(
    fake_discord: FakeDiscord,
    started: tuple[DiscordAdapter, Inbox],
) -> None:
    adapter, inbox = started
    await adapter.send(channel_target(), OutboundMessage(text="the bot speaking"))  # echoed back over the gateway
    sent = await fake_discord.dm("hello bot")
    message = await inbox.message()
    assert message.channel == "discord"
    assert message.peer == Peer("direct", fake_discord.alice.id)
    assert message.guild is None
    assert message.parent_peer is None
    assert message.sender_id == fake_discord.alice.id
    assert message.sender_name == "Alice"
    assert message.text == "hello bot"
    assert message.message_id == sent["id"]
    assert not message.sender_is_bot
    # The echo came over the gateway before the DM, and messages are handed over in arrival order: had it come
    # through, it would be the first message.
    assert inbox.messages == [message]


async def test_guild_messages_with_and_without_a_mention_and_a_reply_to_the_bot(
    fake_discord: FakeDiscord,
    started: tuple[DiscordAdapter, Inbox],
) -> None:
    adapter, inbox = started
    await fake_discord.guild_message("just chatting")
    plain = await inbox.message(1)
    assert plain.peer == Peer("channel", CHANNEL_ID)
    assert plain.guild == GUILD_ID
    assert not plain.was_mentioned and not plain.reply_to_bot

    await fake_discord.guild_message("what's up?", mention=True)
    mentioned = await inbox.message(2)
    assert mentioned.was_mentioned
    assert mentioned.text == "what's up?"  # the mention itself is not part of what was said

    bot_message = await adapter.send(channel_target(), OutboundMessage(text="I said this"))
    assert bot_message is not None
    await fake_discord.guild_message("about that", reply_to=bot_message)
    reply = await inbox.message(3)
    assert reply.reply_to == bot_message
    assert reply.reply_to_bot
    assert reply.was_mentioned

    other = await fake_discord.guild_message("not to the bot")
    await fake_discord.guild_message("replying to alice", reply_to=other["id"], user=fake_discord.bob)
    human_reply = await inbox.message(5)
    assert human_reply.reply_to == other["id"]
    assert not human_reply.reply_to_bot and not human_reply.was_mentioned


async def test_member_roles_and_bot_senders(
    fake_discord: FakeDiscord,
    started: tuple[DiscordAdapter, Inbox],
) -> None:
    _, inbox = started
    await fake_discord.guild_message("with roles", roles=(ROLE_ID, OTHER_ROLE_ID))
    assert set((await inbox.message(1)).member_roles) == {ROLE_ID, OTHER_ROLE_ID}
    await fake_discord.guild_message("from a bot", user=fake_discord.other_bot)
    from_bot = await inbox.message(2)
    assert from_bot.sender_is_bot
    assert from_bot.member_roles == ()


async def test_a_thread_message_has_the_thread_as_peer_and_its_channel_as_parent(
    fake_discord: FakeDiscord,
    started: tuple[DiscordAdapter, Inbox],
) -> None:
    adapter, inbox = started
    await fake_discord.thread_message("in the thread", mention=True)
    message = await inbox.message()
    assert message.peer == Peer("channel", THREAD_ID)
    assert message.parent_peer == Peer("channel", CHANNEL_ID)
    assert message.thread_id == THREAD_ID
    assert message.guild == GUILD_ID
    await adapter.send(message.target(), OutboundMessage(text="answer in thread", thread_id=message.thread_id))
    assert fake_discord.texts(THREAD_ID) == ["answer in thread"]


async def test_a_malformed_event_is_logged_and_skipped(
    fake_discord: FakeDiscord,
    started: tuple[DiscordAdapter, Inbox],
    caplog: pytest.LogCaptureFixture,
) -> None:
    _, inbox = started
    await fake_discord.dispatch("MESSAGE_CREATE", {"id": "1", "channel_id": "not-a-number"})
    await fake_discord.dispatch("INTERACTION_CREATE", {"type": 3})
    await fake_discord.dispatch("MESSAGE_CREATE", "not even an object")
    await fake_discord.dm("still here")
    assert (await inbox.message()).text == "still here"
    assert len(inbox.messages) == 1
    assert "skipped a malformed MESSAGE_CREATE" in caplog.text


# --- outbound ---------------------------------------------------------------------------------------------------


async def test_send_edit_delete_react_and_typing(
    fake_discord: FakeDiscord,
    started: tuple[DiscordAdapter, Inbox],
) -> None:
    adapter, _ = started
    target = channel_target()
    message_id = await adapter.send(target, OutboundMessage(text="first draft"))
    assert message_id is not None and message_id in fake_discord.messages
    await adapter.edit(target, message_id, OutboundMessage(text="final text"))
    assert fake_discord.messages[message_id]["content"] == "final text"
    await adapter.react(target, message_id, "👍")
    assert fake_discord.reactions == [(CHANNEL_ID, message_id, "👍")]
    await adapter.typing(target)
    assert fake_discord.calls("POST", f"/channels/{CHANNEL_ID}/typing")
    reply_id = await adapter.send(target, OutboundMessage(text="a reply", reply_to=message_id))
    assert reply_id is not None
    assert str(fake_discord.posts()[-1].body["message_reference"]["message_id"]) == message_id
    await adapter.delete(target, reply_id)
    assert fake_discord.deleted == [reply_id]
    for request in fake_discord.posts():
        assert request.body["allowed_mentions"]["parse"] == ["users"]  # never @everyone or a whole role


async def test_a_dm_to_a_user_not_seen_yet_opens_the_dm_channel(
    fake_discord: FakeDiscord,
    started: tuple[DiscordAdapter, Inbox],
) -> None:
    adapter, _ = started
    bob = fake_discord.bob
    await adapter.send(ChatTarget(channel="discord", peer=Peer("direct", bob.id)), OutboundMessage(text="hi bob"))
    assert fake_discord.calls("POST", "/users/@me/channels")[0].body == {"recipient_id": int(bob.id)}
    assert fake_discord.texts(fake_discord.dm_channel_id(bob)) == ["hi bob"]


async def test_text_over_2000_characters_is_refused_by_the_server(
    started: tuple[DiscordAdapter, Inbox],
) -> None:
    adapter, _ = started
    with pytest.raises(discord.HTTPException) as caught:
        await adapter.send(channel_target(), OutboundMessage(text="x" * 2001))
    assert caught.value.code == 50035


async def test_a_text_over_2000_characters_is_delivered_in_pieces_the_server_takes(
    fake_discord: FakeDiscord, started: tuple[DiscordAdapter, Inbox], tmp_path: Path
) -> None:
    adapter, _ = started
    text = "\n\n".join(f"Paragraph {i}: " + "word " * 80 for i in range(12))
    async with await SqliteStore.open(tmp_path) as store:
        delivery = Delivery(store, {(adapter.channel, adapter.account): adapter}, time.time)
        delivery.start()
        try:
            await delivery.send(channel_target(), OutboundMessage(text=text))
        finally:
            await delivery.stop()
    pieces = fake_discord.texts()
    assert len(pieces) >= 3 and all(len(piece) <= 2000 for piece in pieces)
    assert "\n\n".join(pieces) == text


async def test_a_429_is_waited_out_and_the_message_delivered_once(
    fake_discord: FakeDiscord,
    started: tuple[DiscordAdapter, Inbox],
) -> None:
    adapter, _ = started
    fake_discord.rate_limit(2, retry_after=0.1, method="POST", path_contains="/messages")
    message_id = await adapter.send(channel_target(), OutboundMessage(text="patience"))
    statuses = [request.status for request in fake_discord.calls("POST", "/messages")]
    assert statuses == [429, 429, 200]
    assert [m["id"] for m in fake_discord.messages.values()] == [message_id]


# --- buttons ----------------------------------------------------------------------------------------------------


async def test_buttons_are_sent_and_a_click_becomes_an_acknowledged_action(
    fake_discord: FakeDiscord,
    started: tuple[DiscordAdapter, Inbox],
) -> None:
    adapter, inbox = started
    buttons = [[Button(label="Allow", value="approve:42", style="success"), Button(label="Deny", value="deny:42")]]
    message_id = await adapter.send(channel_target(), OutboundMessage(text="Run `ls`?", buttons=buttons))
    assert message_id is not None
    row = fake_discord.posts()[-1].body["components"][0]
    assert row["type"] == 1
    assert [(b["type"], b["label"], b["custom_id"], b["style"]) for b in row["components"]] == [
        (2, "Allow", "approve:42", 3),
        (2, "Deny", "deny:42", 2),
    ]

    click = await fake_discord.click(message_id, "approve:42", user=fake_discord.bob)
    await eventually(lambda: len(inbox.actions) == 1, "the click")
    await eventually(lambda: len(fake_discord.interaction_callbacks) == 1, "the answer to the click")
    event = inbox.actions[0]
    assert event.value == "approve:42"
    assert event.message_id == message_id
    assert event.sender_id == fake_discord.bob.id
    assert event.peer == Peer("channel", CHANNEL_ID)
    assert fake_discord.interaction_callbacks == [(click["id"], {"type": 6})]  # deferred update

    await adapter.edit(channel_target(), message_id, OutboundMessage(text="Approved."))
    assert fake_discord.messages[message_id]["components"] == []  # an edit without buttons removes them


async def test_a_click_on_a_message_sent_before_a_restart_still_arrives(
    fake_discord: FakeDiscord,
) -> None:
    before = DiscordAdapter("default", account(fake_discord))
    await before.start(Inbox().on_message, Inbox().on_action)
    target = ChatTarget(channel="discord", peer=Peer("direct", fake_discord.alice.id))
    message_id = await before.send(target, OutboundMessage(text="ok?", buttons=[[Button(label="OK", value="ok:1")]]))
    assert message_id is not None
    await before.stop()

    after = DiscordAdapter("default", account(fake_discord))
    inbox = Inbox()
    await after.start(inbox.on_message, inbox.on_action)
    try:
        await fake_discord.click(message_id, "ok:1")
        await eventually(lambda: len(inbox.actions) == 1, "the click after the restart")
        assert inbox.actions[0].value == "ok:1"
        assert inbox.actions[0].peer == Peer("direct", fake_discord.alice.id)
        await eventually(lambda: len(fake_discord.interaction_callbacks) == 1, "the answer to the click")
    finally:
        await after.stop()


async def test_a_dropped_connection_is_resumed(
    fake_discord: FakeDiscord,
    started: tuple[DiscordAdapter, Inbox],
) -> None:
    _, inbox = started
    await fake_discord.drop_connection()
    await eventually(lambda: len(fake_discord.resumes) == 1, "a RESUME")
    assert fake_discord.resumes[0]["session_id"] == "session-1"
    await fake_discord.dm("after the resume")
    assert (await inbox.message()).text == "after the resume"


# --- files, polls and threads -----------------------------------------------------------------------------------


def some_bytes(size: int, seed: int = 15) -> bytes:
    return random.Random(seed).randbytes(size)


async def fetched(adapter: DiscordAdapter, attachment: Attachment) -> list[bytes]:
    """The chunks `download` yields, consumed the way the core does."""
    async with aclosing(adapter.download(attachment)) as chunks:
        return [chunk async for chunk in chunks]


def a_file(folder: Path, name: str, data: bytes) -> OutboundFile:
    path = folder / name
    path.write_bytes(data)
    return OutboundFile(path=str(path), name=name)


def a_large_file(folder: Path, name: str, size: int) -> OutboundFile:
    """A file of `size` bytes (sparse: nothing written but its length)."""
    path = folder / name
    with path.open("wb") as handle:
        handle.truncate(size)
    return OutboundFile(path=str(path), name=name)


async def test_attachments_of_every_kind_come_as_one_message_even_without_text(
    fake_discord: FakeDiscord,
    started: tuple[DiscordAdapter, Inbox],
) -> None:
    _, inbox = started
    files = [
        fake_discord.attachment(b"png", "cat.png", "image/png"),
        fake_discord.attachment(b"mp3", "song.mp3", "audio/mpeg"),
        fake_discord.attachment(b"mp4", "clip.mp4", "video/mp4"),
        fake_discord.attachment(b"%PDF", "report.pdf", "application/pdf"),
        fake_discord.attachment(b"???", "mystery.bin"),  # Discord sends no content type for what it cannot tell
    ]
    await fake_discord.message_with_files(files, channel_id=CHANNEL_ID)
    message = await inbox.message()
    assert message.text == ""
    assert [(a.kind, a.name, a.mime_type, a.size) for a in message.attachments] == [
        ("image", "cat.png", "image/png", 3),
        ("audio", "song.mp3", "audio/mpeg", 3),
        ("video", "clip.mp4", "video/mp4", 3),
        ("document", "report.pdf", "application/pdf", 4),
        ("document", "mystery.bin", None, 3),
    ]
    assert [a.ref for a in message.attachments] == [item["url"] for item in files]


async def test_a_voice_message_is_a_voice_note_with_its_duration(
    fake_discord: FakeDiscord,
    started: tuple[DiscordAdapter, Inbox],
) -> None:
    adapter, inbox = started
    recording = fake_discord.attachment(b"OggS voice", "voice-message.ogg", "audio/ogg", duration=3.5)
    await fake_discord.message_with_files([recording], voice=True)
    message = await inbox.message()
    assert message.peer == Peer("direct", fake_discord.alice.id)
    [voice] = message.attachments
    assert (voice.kind, voice.duration, voice.mime_type) == ("voice", 3.5, "audio/ogg")
    assert b"".join(await fetched(adapter, voice)) == b"OggS voice"


async def test_a_failed_download_is_a_channel_error_that_names_no_token(
    fake_discord: FakeDiscord,
    started: tuple[DiscordAdapter, Inbox],
) -> None:
    adapter, _ = started
    gone = Attachment(kind="image", ref=f"{fake_discord.root}/attachments/1/2/gone.png?ex=1", name="gone.png")
    with pytest.raises(ChannelError, match=r"gone\.png.*HTTP 404") as caught:
        await fetched(adapter, gone)
    assert fake_discord.token not in str(caught.value)
    assert [request.status for request in fake_discord.downloads] == [404]


async def test_a_ref_off_discords_cdn_is_never_fetched(
    fake_discord: FakeDiscord,
    started: tuple[DiscordAdapter, Inbox],
) -> None:
    adapter, _ = started
    port = int(fake_discord.root.rsplit(":", 1)[1])
    for ref in (
        "http://169.254.169.254/latest/meta-data/",
        f"https://{CDN}.evil.example/attachments/1/2/x.png",
        f"http://127.0.0.1:{port + 1}/attachments/1/2/x.png",  # the fake's host, another port
        f"https://127.0.0.1:{port}/attachments/1/2/x.png",  # the fake's host and port, another scheme
        "file:///etc/passwd",
        "/attachments/1/2/x.png",
    ):
        with pytest.raises(ChannelError, match="not on Discord's CDN"):
            await fetched(adapter, Attachment(ref=ref, name="x.png"))
    assert fake_discord.downloads == []


def test_only_discords_cdn_over_https_and_the_configured_server_are_allowed() -> None:
    # Only strings are checked here (nothing is fetched); the hosts come from the adapter's own list.
    assert cdn_url_allowed(f"https://{CDN}/attachments/1/2/a.png?ex=1&hm=2", None)
    assert cdn_url_allowed(f"https://{MEDIA}/attachments/1/2/a.png", None)
    assert not cdn_url_allowed(f"http://{CDN}/attachments/1/2/a.png", None)
    assert not cdn_url_allowed(f"https://{CDN}:8443/attachments/1/2/a.png", None)
    assert not cdn_url_allowed(f"https://someone@{CDN}/attachments/1/2/a.png", None)
    assert not cdn_url_allowed(f"{discord.http.Route.BASE}/users/@me", None)  # the API, not the CDN
    assert not cdn_url_allowed("http://127.0.0.1:8080/attachments/1/2/a.png", None)
    assert cdn_url_allowed("http://127.0.0.1:8080/attachments/1/2/a.png", "http://127.0.0.1:8080")


async def test_files_go_up_as_multipart_with_the_text_as_caption(
    fake_discord: FakeDiscord,
    started: tuple[DiscordAdapter, Inbox],
    tmp_path: Path,
) -> None:
    adapter, _ = started
    big = some_bytes(3 * 1024 * 1024 + 7)
    media = [a_file(tmp_path, "chart.png", big), a_file(tmp_path, "notes.txt", b"hello\n")]
    earlier = await adapter.send(channel_target(), OutboundMessage(text="the question"))
    assert earlier is not None
    message_id = await adapter.send(
        channel_target(), OutboundMessage(text="Here you are", media=media, reply_to=earlier)
    )
    [post] = fake_discord.posts()[1:]
    assert post.body["content"] == "Here you are"
    assert str(post.body["message_reference"]["message_id"]) == earlier
    assert [(f.field, f.filename, f.data) for f in post.files] == [
        ("files[0]", "chart.png", big),
        ("files[1]", "notes.txt", b"hello\n"),
    ]
    assert {f.content_type for f in post.files} == {"application/octet-stream"}  # discord.py sends no file types
    assert message_id is not None
    shown = fake_discord.messages[message_id]["attachments"]
    assert [(a["filename"], a["size"], a["content_type"]) for a in shown] == [
        ("chart.png", len(big), "image/png"),
        ("notes.txt", 6, "text/plain"),
    ]


async def test_more_than_ten_files_take_several_messages_with_the_caption_on_the_first(
    fake_discord: FakeDiscord,
    started: tuple[DiscordAdapter, Inbox],
    tmp_path: Path,
) -> None:
    adapter, _ = started
    media = [a_file(tmp_path, f"page-{n:02}.txt", f"page {n}".encode()) for n in range(12)]
    last = await adapter.send(channel_target(), OutboundMessage(text="All pages", media=media))
    posts = fake_discord.posts()
    assert [len(post.files) for post in posts] == [10, 2]
    assert [post.body.get("content") for post in posts] == ["All pages", None]
    assert [upload.data for upload in fake_discord.uploads()] == [f"page {n}".encode() for n in range(12)]
    assert last == list(fake_discord.messages)[-1]


async def test_a_text_longer_than_a_caption_goes_first_on_its_own(
    fake_discord: FakeDiscord,
    started: tuple[DiscordAdapter, Inbox],
    tmp_path: Path,
) -> None:
    adapter, _ = started
    # Discord's captions are as long as its messages; a smaller limit shows what happens to longer text.
    adapter.capabilities = CAPABILITIES.model_copy(update={"max_caption_length": 10})
    buttons = [[Button(label="OK", value="ok:1")]]
    text = "rather more than ten characters"
    last = await adapter.send(
        channel_target(),
        OutboundMessage(text=text, media=[a_file(tmp_path, "a.txt", b"a")], buttons=buttons),
    )
    first, second = fake_discord.posts()
    assert (first.body["content"], first.files, len(first.body["components"])) == (text, [], 1)
    assert (second.body.get("content"), [f.data for f in second.files]) == (None, [b"a"])
    assert not second.body.get("components")
    assert last == list(fake_discord.messages)[-1]


async def test_files_over_the_upload_limit_are_refused_before_anything_is_sent(
    fake_discord: FakeDiscord,
    started: tuple[DiscordAdapter, Inbox],
    tmp_path: Path,
) -> None:
    adapter, _ = started
    limit = adapter.capabilities.max_upload_bytes
    media = [a_file(tmp_path, "small.txt", b"s"), a_large_file(tmp_path, "huge.bin", limit + 1)]
    with pytest.raises(ChannelError, match=r"huge\.bin is 10485761 bytes"):
        await adapter.send(channel_target(), OutboundMessage(text="two files", media=media))
    missing = OutboundFile(path=str(tmp_path / "nowhere.txt"), name="nowhere.txt")
    with pytest.raises(ChannelError, match=r"cannot upload nowhere\.txt"):
        await adapter.send(channel_target(), OutboundMessage(text="", media=[missing]))
    assert fake_discord.posts() == []


async def test_the_fake_refuses_a_file_over_the_limit_as_discord_does(fake_discord: FakeDiscord) -> None:
    # The adapter never sends one (above); this is what it spares itself: a 413 after the whole upload.
    form = aiohttp.FormData(quote_fields=False)
    form.add_field("payload_json", json.dumps({"content": "big"}))
    form.add_field("files[0]", b"\0" * (10 * 1024 * 1024 + 1), filename="big.bin")
    headers = {"Authorization": f"Bot {fake_discord.token}"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{fake_discord.root}/api/v10/channels/{CHANNEL_ID}/messages", data=form, headers=headers
        ) as answer,
    ):
        assert (answer.status, (await answer.json())["code"]) == (413, 40005)
    assert fake_discord.messages == {}


async def test_files_that_together_pass_the_limit_go_in_separate_messages(
    fake_discord: FakeDiscord,
    started: tuple[DiscordAdapter, Inbox],
    tmp_path: Path,
) -> None:
    adapter, _ = started
    six_mib = 6 * 1024 * 1024
    media = [a_large_file(tmp_path, "one.bin", six_mib), a_large_file(tmp_path, "two.bin", six_mib)]
    await adapter.send(channel_target(), OutboundMessage(text="", media=media))
    assert [[(f.filename, len(f.data)) for f in post.files] for post in fake_discord.posts()] == [
        [("one.bin", six_mib)],
        [("two.bin", six_mib)],
    ]


async def test_a_poll_is_native_and_its_text_comes_first(
    fake_discord: FakeDiscord,
    started: tuple[DiscordAdapter, Inbox],
) -> None:
    adapter, _ = started
    poll = Poll(question="Lunch?", options=["Pizza", "Sushi", "Salad"])
    poll_id = await adapter.send(channel_target(), OutboundMessage(text="Time to choose", poll=poll))
    text_post, poll_post = fake_discord.posts()
    assert text_post.body["content"] == "Time to choose" and "poll" not in text_post.body
    sent = poll_post.body["poll"]
    assert sent["question"] == {"text": "Lunch?"}
    assert [answer["poll_media"]["text"] for answer in sent["answers"]] == ["Pizza", "Sushi", "Salad"]
    assert (sent["duration"], sent["allow_multiselect"]) == (24, False)
    assert poll_id is not None and fake_discord.messages[poll_id]["poll"]["question"] == {"text": "Lunch?"}

    await adapter.send(channel_target(), OutboundMessage(text="", poll=Poll(question="Again?", options=["y", "n"])))
    assert len(fake_discord.posts()) == 3  # no text: the poll alone
    with pytest.raises(ChannelError, match="up to 10 answers"):
        options = [f"option {n}" for n in range(11)]
        await adapter.send(channel_target(), OutboundMessage(text="", poll=Poll(question="Too many?", options=options)))
    assert len(fake_discord.posts()) == 3


async def test_a_thread_in_a_channel_is_addressed_by_its_id_as_thread_id(
    fake_discord: FakeDiscord,
    started: tuple[DiscordAdapter, Inbox],
) -> None:
    adapter, inbox = started
    thread_id = await adapter.create_thread(channel_target(), "  Release plan  ")
    [call] = fake_discord.calls("POST", f"/channels/{CHANNEL_ID}/threads")
    assert (call.body["name"], call.body["type"], call.status) == ("Release plan", 11, 201)
    assert fake_discord.threads[thread_id]["parent_id"] == CHANNEL_ID

    await adapter.send(channel_target().model_copy(update={"thread_id": thread_id}), OutboundMessage(text="step 1"))
    assert fake_discord.texts(thread_id) == ["step 1"]
    await fake_discord.guild_message("sounds good", channel_id=thread_id, mention=True)
    reply = await inbox.message()
    assert (reply.thread_id, reply.peer, reply.parent_peer) == (
        thread_id,
        Peer("channel", thread_id),
        Peer("channel", CHANNEL_ID),
    )


async def test_a_thread_from_a_message_takes_the_messages_id(
    fake_discord: FakeDiscord,
    started: tuple[DiscordAdapter, Inbox],
) -> None:
    adapter, inbox = started
    await fake_discord.guild_message("can we talk about the bug?", mention=True)
    question = await inbox.message()
    thread_id = await adapter.create_thread(question.target(), "The bug", question.message_id)
    assert thread_id == question.message_id
    assert fake_discord.calls("POST", f"/channels/{CHANNEL_ID}/messages/{question.message_id}/threads")
    await adapter.send(question.target(), OutboundMessage(text="let's", thread_id=thread_id))
    assert fake_discord.texts(thread_id) == ["let's"]


async def test_no_threads_in_direct_messages_or_inside_threads(
    fake_discord: FakeDiscord,
    started: tuple[DiscordAdapter, Inbox],
) -> None:
    adapter, _ = started
    dm = ChatTarget(channel="discord", peer=Peer("direct", fake_discord.alice.id))
    with pytest.raises(ChannelError, match="direct messages have no threads"):
        await adapter.create_thread(dm, "nope")
    in_thread = ChatTarget(channel="discord", peer=Peer("channel", THREAD_ID), thread_id=THREAD_ID)
    with pytest.raises(ChannelError, match="inside a thread"):
        await adapter.create_thread(in_thread, "nope")
    with pytest.raises(ChannelError, match="inside a thread"):  # the thread as peer alone, as discord.py knows it
        await adapter.create_thread(channel_target(THREAD_ID), "nope")
    assert fake_discord.calls("POST", "/threads") == []


# --- end to end through the gateway -----------------------------------------------------------------------------


class Served:
    """A real Gateway serving one Discord adapter (built directly; dm_policy open)."""

    def __init__(self, gateway: Gateway, store: SqliteStore, adapter: DiscordAdapter) -> None:
        self.gateway = gateway
        self.store = store
        self.adapter = adapter


@pytest.fixture
async def serve(
    fake_llm: FakeLLM,
    fake_discord: FakeDiscord,
    tmp_path: Path,
) -> AsyncIterator[Callable[..., Awaitable[Served]]]:
    running: list[Served] = []

    async def start(**extra: Any) -> Served:
        config = {
            "defaults": {"model": "fake/m", "workspace_root": str(tmp_path / "ws")},
            "providers": {"fake": {"kind": "openai", "base_url": fake_llm.openai_base_url, "timeout_seconds": 60}},
            "session": {"queue": {"mode": "followup", "debounce_ms": 10}},
            **extra,
        }
        adapter = DiscordAdapter("default", account(fake_discord, dm_policy="open", streaming="off"))
        store = await SqliteStore.open(tmp_path / "state")
        gateway = Gateway(App(parse_config(json.dumps(config)), tmp_path / "state"), store, [adapter])
        await gateway.start()
        served = Served(gateway, store, adapter)
        running.append(served)
        return served

    try:
        yield start
    finally:
        for served in running:
            await served.gateway.stop(1.0)
            await served.store.close()


async def test_end_to_end_a_long_answer_arrives_in_2000_character_chunks_in_order(
    serve: Callable[..., Awaitable[Served]],
    fake_discord: FakeDiscord,
    fake_llm: FakeLLM,
) -> None:
    paragraphs = [f"Paragraph {n}: " + ("lorem ipsum dolor sit amet " * 40).strip() for n in range(5)]
    answer = "\n\n".join(paragraphs)[:4500]
    assert len(answer) == 4500
    fake_llm.script(answer)
    await serve()
    await fake_discord.dm("tell me a lot")
    dm_channel = fake_discord.dm_channel_id(fake_discord.alice)
    expected = chunk_text(answer, 2000)
    assert len(expected) >= 3
    await fake_discord.wait_for_posts(len(expected), dm_channel)
    texts = fake_discord.texts(dm_channel)
    assert texts == expected
    assert all(len(text) <= 2000 for text in texts)
    assert all(request.status == 200 for request in fake_discord.posts())


async def test_end_to_end_a_guild_and_role_binding_routes_to_its_agent(
    serve: Callable[..., Awaitable[Served]],
    fake_discord: FakeDiscord,
    fake_llm: FakeLLM,
) -> None:
    fake_llm.script("support here", "main here")
    await serve(
        agents=[{"id": "main", "default": True}, {"id": "support", "model": "fake/support-model"}],
        bindings=[{"agent": "support", "match": {"channel": "discord", "guild": GUILD_ID, "roles": [ROLE_ID]}}],
    )
    await fake_discord.guild_message("not mentioned: ignored", roles=(ROLE_ID,))
    await fake_discord.guild_message("help please", mention=True, roles=(ROLE_ID,))
    await fake_discord.wait_for_posts(1, CHANNEL_ID)
    await fake_discord.guild_message("and me?", mention=True, roles=(OTHER_ROLE_ID,), user=fake_discord.bob)
    await fake_discord.wait_for_posts(2, CHANNEL_ID)

    assert fake_discord.texts(CHANNEL_ID) == ["support here", "main here"]
    assert [request.body["model"] for request in fake_llm.requests] == ["support-model", "m"]
