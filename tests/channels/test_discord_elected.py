"""Discord's listening elected (channels.base.ElectedIngress), against FakeDiscord: deferred, the adapter logs in and
sends over REST with no gateway connection; `open_ingress` connects one shard's listener and `close_ingress` closes it
cleanly (no resume, no reconnect); two adapters on one token listen only where opened; sharded accounts get one key
(and one connection) per shard."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from typing import Any

import pytest
from fakes.discord import CHANNEL_ID, THREAD_ID, FakeDiscord
from helpers import eventually

from channels.accounts import DiscordAccount
from channels.base import ActionEvent, Attachment, ChatTarget, ElectedIngress, InboundMessage, OutboundMessage
from channels.discord import DiscordAdapter, DiscordStartError
from routing import Peer
from routing.errors import ChannelError


class Inbox:
    """What one adapter delivered."""

    def __init__(self) -> None:
        self.messages: list[InboundMessage] = []

    async def on_message(self, message: InboundMessage) -> None:
        self.messages.append(message)

    async def on_action(self, event: ActionEvent) -> None:
        return None

    def texts(self) -> list[str]:
        return [message.text for message in self.messages]

    async def wait_for(self, text: str) -> InboundMessage:
        await eventually(lambda: text in self.texts(), f"{text!r} delivered")
        return next(message for message in self.messages if message.text == text)


Start = Callable[..., Awaitable[tuple[DiscordAdapter, Inbox]]]


@pytest.fixture
async def start(fake_discord: FakeDiscord) -> AsyncIterator[Start]:
    """Starts adapters on the fake (deferred unless told), each stopped when the test ends."""
    started: list[DiscordAdapter] = []

    async def starting(
        name: str = "main",
        *,
        deferred: bool = True,
        sleep: Callable[[float], Awaitable[None]] | None = None,
        **settings: Any,
    ) -> tuple[DiscordAdapter, Inbox]:
        account = DiscordAccount.model_validate(
            {"token": fake_discord.token, **fake_discord.urls, "guild_ready_timeout": 0.05, **settings}
        )
        adapter = DiscordAdapter(name, account, **({"sleep": sleep} if sleep else {}))
        adapter.ingress_deferred = deferred
        inbox = Inbox()
        await adapter.start(inbox.on_message, inbox.on_action)
        started.append(adapter)
        return adapter, inbox

    yield starting
    for adapter in started:
        await adapter.stop()


def dm_target(dc: FakeDiscord) -> ChatTarget:
    return ChatTarget(channel="discord", account="main", peer=Peer("direct", dc.alice.id))


def token_hash(dc: FakeDiscord) -> str:
    return hashlib.sha256(dc.token.encode()).hexdigest()[:16]


async def closed(dc: FakeDiscord) -> None:
    await eventually(lambda: dc.open_connections == 0, "every gateway connection closed")


# --- deferred: REST only --------------------------------------------------------------------------------------


async def test_a_deferred_adapter_logs_in_and_sends_with_no_gateway_connection(
    fake_discord: FakeDiscord, start: Start
) -> None:
    dc = fake_discord
    adapter, inbox = await start()
    assert isinstance(adapter, ElectedIngress)
    assert adapter.ingress_keys() == [f"discord:{token_hash(dc)}:shard:0/1"]
    assert dc.token not in adapter.ingress_keys()[0]
    assert adapter.bot_username == "switchbot" and adapter.bot_user_id == dc.bot.id
    assert adapter.health.snapshot().state == "connected"

    sent = await adapter.send(dm_target(dc), OutboundMessage(text="hello over REST"))
    assert sent is not None
    await adapter.edit(dm_target(dc), sent, OutboundMessage(text="edited over REST"))
    await adapter.react(dm_target(dc), sent, "👍")
    photo = dc.attachment(b"png bytes", "cat.png", "image/png")
    async with aclosing(adapter.download(Attachment(kind="image", ref=photo["url"]))) as chunks:
        assert b"".join([chunk async for chunk in chunks]) == b"png bytes"

    assert dc.texts(dc.dm_channel_id(dc.alice)) == ["hello over REST"]
    assert dc.messages[sent]["content"] == "edited over REST"
    assert dc.reactions and dc.reactions[0][1:] == (sent, "👍")
    assert dc.connections == 0 and dc.identifies == []  # not one gateway connection
    assert inbox.messages == []
    assert adapter.health.snapshot().state == "connected"


async def test_an_undeferred_adapter_listens_from_start_and_its_key_is_always_open(
    fake_discord: FakeDiscord, start: Start
) -> None:
    dc = fake_discord
    adapter, inbox = await start(deferred=False)
    assert dc.connections == 1
    [key] = adapter.ingress_keys()
    await adapter.open_ingress(key)  # its own client holds the only shard already
    await adapter.close_ingress(key)  # and keeps it until stop()
    await dc.dm("still here?")
    await inbox.wait_for("still here?")
    assert dc.connections == 1 and dc.open_connections == 1
    assert "shard" not in dc.identifies[0]  # unsharded, as before


# --- opening and closing ---------------------------------------------------------------------------------------


async def test_open_listens_close_stops_cleanly_and_open_again_listens(fake_discord: FakeDiscord, start: Start) -> None:
    dc = fake_discord
    adapter, inbox = await start()
    [key] = adapter.ingress_keys()

    await adapter.open_ingress(key)
    await adapter.open_ingress(key)  # idempotent: one connection
    assert dc.connections == 1 and dc.open_connections == 1
    await dc.dm("first")
    first = await inbox.wait_for("first")
    assert first.sender_id == dc.alice.id and first.peer == Peer("direct", dc.alice.id)
    await dc.guild_message("in the guild", mention=True)
    assert (await inbox.wait_for("in the guild")).guild is not None

    await adapter.close_ingress(key)
    await adapter.close_ingress(key)  # idempotent
    await closed(dc)
    assert adapter.health.snapshot().state == "connected"
    await dc.dispatch("MESSAGE_CREATE", dc._message(dc.dm_channel_id(dc.alice), dc.alice, "missed"), wait=False)
    sent = await adapter.send(dm_target(dc), OutboundMessage(text="sending still works"))
    assert sent is not None and dc.texts(dc.dm_channel_id(dc.alice)) == ["sending still works"]
    assert dc.connections == 1 and dc.resumes == []  # closed for good: no reconnect, no resume

    await adapter.open_ingress(key)
    assert dc.connections == 2 and dc.open_connections == 1 and len(dc.identifies) == 2  # a new session
    await dc.dm("second")
    await inbox.wait_for("second")
    assert inbox.texts() == ["first", "in the guild", "second"]  # nothing while closed
    assert dc.resumes == []


async def test_stop_closes_an_open_listener(fake_discord: FakeDiscord, start: Start) -> None:
    dc = fake_discord
    adapter, _ = await start()
    await adapter.open_ingress(adapter.ingress_keys()[0])
    assert dc.open_connections == 1
    await adapter.stop()
    await closed(dc)
    assert adapter.health.snapshot().state == "stopped"
    assert dc.connections == 1 and dc.resumes == []


async def test_an_unknown_key_is_refused(start: Start) -> None:
    adapter, _ = await start()
    with pytest.raises(ValueError, match="no ingress key"):
        await adapter.open_ingress("discord:0000000000000000:shard:0/1")
    with pytest.raises(ValueError, match="no ingress key"):
        await adapter.close_ingress("telegram:whatever")


async def test_a_listener_that_gets_no_ready_fails_its_open_and_leaves_nothing_open(
    fake_discord: FakeDiscord, start: Start
) -> None:
    dc = fake_discord
    timeouts: list[float] = []

    async def ready_timeout(seconds: float) -> None:  # while the fake sends no READY: out once the bot identified
        timeouts.append(seconds)
        if dc.send_ready:
            await asyncio.Event().wait()  # never: what it waits for comes first
        await eventually(lambda: bool(dc.identifies), "the listener to identify")

    adapter, inbox = await start(sleep=ready_timeout, ready_timeout=7.0)
    [key] = adapter.ingress_keys()
    dc.send_ready = False
    with pytest.raises(DiscordStartError, match="no READY from the gateway within 7s"):
        await adapter.open_ingress(key)
    await closed(dc)
    assert adapter.health.snapshot().state == "connected"  # sending is still fine

    dc.send_ready = True
    await adapter.open_ingress(key)
    await dc.dm("after all")
    await inbox.wait_for("after all")
    assert timeouts == [7.0, 7.0, 7.0]  # start, the failed open, the open that worked


async def test_closing_a_listener_in_a_reconnect_storm_ends_the_storm_with_it(
    fake_discord: FakeDiscord, start: Start
) -> None:
    dc = fake_discord
    adapter, inbox = await start(storm_reconnects=1)
    [key] = adapter.ingress_keys()
    await adapter.open_ingress(key)
    dc.close_new_connections = True
    await dc.drop_connection()
    await eventually(lambda: adapter.health.state == "degraded", "the storm")
    await adapter.close_ingress(key)  # cuts the storm's wait short
    await closed(dc)
    connections = dc.connections
    assert adapter.health.state == "connected"  # the listener was what was unwell

    dc.close_new_connections = False
    await adapter.open_ingress(key)  # a fresh gate: the first connection goes at once
    assert dc.connections == connections + 1
    await dc.dm("calm again")
    await inbox.wait_for("calm again")
    assert adapter.health.state == "connected"


# --- several adapters on one token -------------------------------------------------------------------------------


async def test_of_two_adapters_on_one_token_only_the_opened_one_listens(
    fake_discord: FakeDiscord, start: Start
) -> None:
    dc = fake_discord
    first, first_inbox = await start("main")
    second, second_inbox = await start("main")
    assert first.ingress_keys() == second.ingress_keys()
    [key] = first.ingress_keys()

    await first.open_ingress(key)
    await dc.dm("to whoever listens")
    await first_inbox.wait_for("to whoever listens")
    assert dc.open_connections == 1
    await second.send(dm_target(dc), OutboundMessage(text="the other one sends"))

    await first.close_ingress(key)  # the lock lost; the other process takes over
    await closed(dc)
    await second.open_ingress(key)
    await dc.dm("after the take-over")
    await second_inbox.wait_for("after the take-over")
    await first.send(dm_target(dc), OutboundMessage(text="the first still sends"))

    assert first_inbox.texts() == ["to whoever listens"]
    assert second_inbox.texts() == ["after the take-over"]
    assert dc.texts(dc.dm_channel_id(dc.alice)) == ["the other one sends", "the first still sends"]
    assert dc.connections == 2 and dc.resumes == []


async def test_each_shard_is_a_key_and_listens_where_it_is_opened(fake_discord: FakeDiscord, start: Start) -> None:
    dc = fake_discord
    first, first_inbox = await start("main", shard_count=2)
    second, second_inbox = await start("main", shard_count=2)
    keys = first.ingress_keys()
    assert keys == second.ingress_keys() == [f"discord:{token_hash(dc)}:shard:{i}/2" for i in range(2)]

    await first.open_ingress(keys[0])
    await second.open_ingress(keys[1])
    assert sorted(identify["shard"] for identify in dc.identifies) == [[0, 2], [1, 2]]
    await dc.dm("a DM, on shard 0")
    await dc.guild_message("the guild, on shard 1", mention=True)
    await first_inbox.wait_for("a DM, on shard 0")
    message = await second_inbox.wait_for("the guild, on shard 1")
    assert message.peer == Peer("channel", CHANNEL_ID) and message.was_mentioned
    assert first_inbox.texts() == ["a DM, on shard 0"]
    assert second_inbox.texts() == ["the guild, on shard 1"]

    await second.close_ingress(keys[1])
    await first.open_ingress(keys[1])  # one process may hold both
    await dc.guild_message("the guild again", mention=True)
    await first_inbox.wait_for("the guild again")
    assert second_inbox.texts() == ["the guild, on shard 1"]


async def test_an_undeferred_sharded_adapter_connects_every_shard(fake_discord: FakeDiscord, start: Start) -> None:
    dc = fake_discord
    _, inbox = await start(deferred=False, shard_count=2)
    assert dc.connections == 2
    assert sorted(identify["shard"] for identify in dc.identifies) == [[0, 2], [1, 2]]
    await dc.dm("direct")
    await dc.guild_message("guild", mention=True)
    await inbox.wait_for("direct")
    await inbox.wait_for("guild")
    assert sorted(inbox.texts()) == ["direct", "guild"]


def test_shard_count_must_be_at_least_one(fake_discord: FakeDiscord) -> None:
    with pytest.raises(ValueError, match="shard_count"):
        DiscordAccount.model_validate({"token": "t", "shard_count": 0})


async def test_a_listener_that_discord_py_gives_up_on_leaves_the_account_stalled(
    fake_discord: FakeDiscord, start: Start
) -> None:
    dc = fake_discord
    adapter, _ = await start()
    [key] = adapter.ingress_keys()
    await adapter.open_ingress(key)
    await dc.drop_connection(code=4004)  # authentication failed: discord.py does not reconnect
    await eventually(lambda: adapter.health.state == "stalled", "the account stalled")
    assert "4004" in (adapter.health.snapshot().last_error or "")
    await closed(dc)
    await adapter.close_ingress(key)  # the gateway lets go of the lock
    assert adapter.health.state == "connected"
    assert dc.connections == 1


async def test_a_listeners_view_of_the_guild_serves_the_deferred_adapters_sends(
    fake_discord: FakeDiscord, start: Start
) -> None:
    adapter, _ = await start()
    await adapter.open_ingress(adapter.ingress_keys()[0])
    in_thread = ChatTarget(channel="discord", account="main", peer=Peer("channel", THREAD_ID))
    with pytest.raises(ChannelError, match="cannot start inside a thread"):
        await adapter.create_thread(in_thread, "nested")
    channel = ChatTarget(channel="discord", account="main", peer=Peer("channel", CHANNEL_ID))
    assert await adapter.create_thread(channel, "a new one") in fake_discord.threads
