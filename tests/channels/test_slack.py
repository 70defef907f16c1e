"""The Slack adapter on the real slack-bolt AsyncApp and slack_sdk clients against FakeSlack (Web API + Socket Mode
on 127.0.0.1), then end to end through a real Gateway with the fake LLM and a SQLite state directory. A reply to a DM
(streamed, in mrkdwn, into the DM's channel), on every platform: test_streaming_every_platform.py."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from fakes.llm import FakeLLM
from fakes.slack import (
    BOT_ID,
    BOT_NAME,
    BOT_USER_ID,
    SIGNING_SECRET,
    TEAM_ID,
    USER_ID,
    FakeSlack,
    dm_channel,
    post_action,
    post_event,
)
from helpers import FakeClock, asked, eventually
from slack_sdk.errors import SlackApiError

from bot.app import App
from bot.config.loading import parse_config
from bot.config.settings import Config
from bot.gateway.process import Gateway
from bot.store import SqliteStore
from channels.base import ActionEvent, Button, ChatTarget, InboundMessage, OutboundMessage
from channels.markup_slack import markdown_to_mrkdwn
from channels.slack import CAPABILITIES, SlackAccount, SlackAdapter, build_blocks, inbound as slack_inbound
from routing import Peer


class Inbox:
    """What the adapter hands over; `hold` keeps on_message from returning until the test releases it."""

    def __init__(self) -> None:
        self.messages: list[InboundMessage] = []
        self.actions: list[ActionEvent] = []
        self.hold: asyncio.Event | None = None
        self.fail = 0  # raise in on_message this many times

    async def on_message(self, message: InboundMessage) -> None:
        if self.fail:
            self.fail -= 1
            raise RuntimeError("the journal is unavailable")
        self.messages.append(message)
        if self.hold is not None:
            await self.hold.wait()

    async def on_action(self, event: ActionEvent) -> None:
        self.actions.append(event)

    async def wait_messages(self, count: int) -> list[InboundMessage]:
        await eventually(lambda: len(self.messages) >= count, f"{count} messages")
        return self.messages


def account(slack: FakeSlack, **extra: Any) -> SlackAccount:
    settings = {"bot_token": slack.bot_token, "app_token": slack.app_token, "api_base_url": slack.url}
    return SlackAccount.model_validate(settings | extra)


@pytest.fixture
async def started(fake_slack: FakeSlack) -> AsyncIterator[tuple[SlackAdapter, Inbox]]:
    # The default keep-alive (a ping every 10 s, a stall only after 90 s of silence): a busy machine does not look
    # like a dead connection, so nothing reconnects unless a test makes it.
    adapter = SlackAdapter("default", account(fake_slack))
    inbox = Inbox()
    await adapter.start(inbox.on_message, inbox.on_action)
    await fake_slack.wait_connected()
    try:
        yield adapter, inbox
    finally:
        await adapter.stop()


# --- settings and identity ----------------------------------------------------------------------------------------


def test_account_settings_need_the_token_of_their_mode() -> None:
    with pytest.raises(ValueError, match="app_token"):
        SlackAccount.model_validate({"bot_token": "xoxb-1"})
    with pytest.raises(ValueError, match="signing_secret"):
        SlackAccount.model_validate({"bot_token": "xoxb-1", "mode": "http"})
    settings = SlackAccount.model_validate({"bot_token": "xoxb-1", "app_token": "xapp-1", "dm_policy": "open"})
    assert settings.mode == "socket" and settings.dm_policy == "open"
    assert "xoxb-1" not in repr(settings)  # secrets never show in logs


async def test_start_reads_the_bot_identity_and_opens_socket_mode(
    started: tuple[SlackAdapter, Inbox], fake_slack: FakeSlack
) -> None:
    adapter, _ = started
    assert adapter.capabilities == CAPABILITIES
    assert (CAPABILITIES.max_text_length, CAPABILITIES.markup, CAPABILITIES.threads) == (3000, "slack-mrkdwn", True)
    assert (adapter.bot_username, adapter.bot_user_id, adapter.bot_id, adapter.team_id) == (
        BOT_NAME,
        BOT_USER_ID,
        BOT_ID,
        TEAM_ID,
    )
    auth = fake_slack.calls_to("auth.test")[0]
    assert auth.headers["authorization"] == f"Bearer {fake_slack.bot_token}"
    opened = fake_slack.calls_to("apps.connections.open")
    assert opened and opened[0].ok and opened[0].headers["authorization"] == f"Bearer {fake_slack.app_token}"
    assert fake_slack.connections == 1


# --- inbound ------------------------------------------------------------------------------------------------------


async def test_a_dm_is_handed_over_before_the_envelope_is_acked(
    started: tuple[SlackAdapter, Inbox], fake_slack: FakeSlack, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(slack_inbound, "ACK_BUDGET_SECONDS", 3600.0)  # the ack waits for the hand-over alone
    _, inbox = started
    inbox.hold = asyncio.Event()
    ts = fake_slack.new_ts()
    envelope = await fake_slack.dm("hi &amp; hello &lt;there&gt;", ts=ts)
    (message,) = await inbox.wait_messages(1)
    # The bot's own message is acked at once, on the same socket: an ack of the DM sent before the hand-over
    # would have arrived before this one.
    (own,) = await fake_slack.channel_message("said by the bot", user=BOT_USER_ID, bot_id=BOT_ID)
    await fake_slack.wait_for_ack(own)
    assert not fake_slack.acked(envelope)  # the gateway has not recorded it yet
    inbox.hold.set()
    assert await fake_slack.wait_for_ack(envelope) == {"envelope_id": envelope}

    assert message.channel == "slack" and message.account == "default"
    assert message.peer == Peer("direct", USER_ID)
    assert message.sender_id == USER_ID  # upper case, as Slack writes it
    assert message.team == TEAM_ID
    assert message.message_id == ts
    assert message.text == "hi & hello <there>"
    assert message.thread_id is None and not message.sender_is_bot
    assert message.routing_input().team == TEAM_ID


async def test_a_slow_hand_over_is_acked_within_slacks_deadline(
    started: tuple[SlackAdapter, Inbox], fake_slack: FakeSlack, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(slack_inbound, "ACK_BUDGET_SECONDS", 0.2)  # Slack's 3 s, shortened for the test
    _, inbox = started
    inbox.hold = asyncio.Event()
    envelope = await fake_slack.dm("slow journal")
    await fake_slack.wait_for_ack(envelope)  # while the hand-over is still held: only the budget can have sent it
    assert [message.text for message in inbox.messages] == ["slow journal"]
    inbox.hold.set()


async def test_socket_mode_reconnects_when_slack_asks(
    started: tuple[SlackAdapter, Inbox], fake_slack: FakeSlack
) -> None:
    _, inbox = started
    await fake_slack.send_frame({"type": "disconnect", "reason": "refresh_requested", "debug_info": {"host": "x"}})
    await eventually(lambda: fake_slack.connections == 2, "a second connection")
    await eventually(lambda: len(fake_slack.calls_to("apps.connections.open")) == 2, "a fresh socket URL")
    envelope = await fake_slack.dm("after the refresh")
    await fake_slack.wait_for_ack(envelope)
    assert [message.text for message in await inbox.wait_messages(1)] == ["after the refresh"]


async def test_a_channel_message_without_a_mention(started: tuple[SlackAdapter, Inbox], fake_slack: FakeSlack) -> None:
    _, inbox = started
    (envelope,) = await fake_slack.channel_message("just chatting", channel="C0RANDOM")
    await fake_slack.wait_for_ack(envelope)
    (message,) = await inbox.wait_messages(1)
    assert message.peer == Peer("channel", "C0RANDOM")
    assert not message.was_mentioned
    assert message.text == "just chatting"


async def test_a_mention_delivered_twice_is_handed_over_once(
    started: tuple[SlackAdapter, Inbox], fake_slack: FakeSlack
) -> None:
    _, inbox = started
    envelopes = await fake_slack.channel_message("/status please", mention=True)
    assert len(envelopes) == 2  # the message event and the app_mention event, same ts
    for envelope in envelopes:
        await fake_slack.wait_for_ack(envelope)  # each is acked after its hand-over (or after being dropped)
    (message,) = inbox.messages
    assert message.was_mentioned
    assert message.text == "/status please"  # the leading mention is how the bot was addressed, not the text
    assert message.peer == Peer("channel", "C0GENERAL")

    # The app_mention alone (no message.channels subscription) counts as a mention too.
    ts = fake_slack.new_ts()
    event = {"type": "app_mention", "user": USER_ID, "text": f"hey <@{BOT_USER_ID}>", "ts": ts, "channel": "C0GENERAL"}
    await fake_slack.wait_for_ack(await fake_slack.event(event))
    second = (await inbox.wait_messages(2))[1]
    assert second.was_mentioned and second.message_id == ts and second.text == f"hey @{BOT_NAME}"


async def test_a_thread_reply_keeps_its_thread_and_the_answer_goes_into_it(
    started: tuple[SlackAdapter, Inbox], fake_slack: FakeSlack
) -> None:
    adapter, inbox = started
    root = fake_slack.new_ts()
    await fake_slack.thread_reply("in the thread", thread_ts=root, mention=True, parent_user_id=BOT_USER_ID)
    (message,) = await inbox.wait_messages(1)
    assert message.thread_id == root and message.reply_to == root
    assert message.reply_to_bot  # the thread was started by the bot
    assert message.routing_input().thread == root

    sent = await adapter.send(message.target(), OutboundMessage(text="answer", thread_id=message.thread_id))
    (posted,) = fake_slack.posted
    assert posted["thread_ts"] == root and posted["channel"] == "C0GENERAL"
    assert sent is not None and fake_slack.messages[("C0GENERAL", sent)]["thread_ts"] == root


async def test_bot_messages_are_flagged_and_our_own_are_ignored(
    started: tuple[SlackAdapter, Inbox], fake_slack: FakeSlack
) -> None:
    _, inbox = started
    own = await fake_slack.channel_message("I said this", user=BOT_USER_ID, bot_id=BOT_ID)
    other = await fake_slack.channel_message("beep", user="U0OTHERBOT", bot_id="B0OTHER", subtype="bot_message")
    edited = await fake_slack.channel_message("x", subtype="message_changed")
    for envelope in [*own, *other, *edited]:
        await fake_slack.wait_for_ack(envelope)
    (message,) = inbox.messages
    assert message.sender_is_bot and message.sender_id == "U0OTHERBOT"


async def test_malformed_envelopes_are_acked_and_skipped(
    started: tuple[SlackAdapter, Inbox], fake_slack: FakeSlack
) -> None:
    _, inbox = started
    bad = [
        await fake_slack.send_envelope("events_api", fake_slack.event_body({"type": "message", "text": "no channel"})),
        await fake_slack.send_envelope("events_api", "not an object"),
        await fake_slack.send_envelope("events_api", {"type": "event_callback", "event": "garbage"}),
        await fake_slack.send_envelope("mystery", {"x": 1}),
        await fake_slack.send_envelope("interactive", {"type": "block_actions", "actions": [{"value": "v"}]}),
    ]
    await fake_slack.send_frame("this is not json")
    for envelope in bad:
        await fake_slack.wait_for_ack(envelope)
    good = await fake_slack.dm("still here")
    await fake_slack.wait_for_ack(good)
    assert [message.text for message in inbox.messages] == ["still here"]
    assert inbox.actions == []


async def test_a_failed_hand_over_is_not_acked_so_slack_redelivers_it(
    started: tuple[SlackAdapter, Inbox], fake_slack: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    _, inbox = started
    inbox.fail = 1
    ts = fake_slack.new_ts()
    first = await fake_slack.dm("important", ts=ts)
    await eventually(lambda: f"envelope {first} not acked" in caplog.text, "the adapter to leave it unacked")
    second = await fake_slack.dm("important", ts=ts)  # Slack's retry of the same event
    await fake_slack.wait_for_ack(second)
    assert not fake_slack.acked(first)  # an ack of it would have come before the second's, on the same socket
    assert [message.message_id for message in inbox.messages] == [ts]


# --- outbound -----------------------------------------------------------------------------------------------------


async def test_markdown_is_sent_as_mrkdwn(started: tuple[SlackAdapter, Inbox], fake_slack: FakeSlack) -> None:
    adapter, _ = started
    target = ChatTarget(channel="slack", peer=Peer("channel", "C0GENERAL"))
    await adapter.send(target, OutboundMessage(text="**Done**: see [the docs](https://x.test/?a=1&b=2) if a < b"))
    (posted,) = fake_slack.posted
    assert posted["text"] == "*Done*: see <https://x.test/?a=1&amp;b=2|the docs> if a &lt; b"
    assert "blocks" not in posted


def test_markdown_to_mrkdwn() -> None:
    assert markdown_to_mrkdwn("**bold**, *it*, ***both***, ~~gone~~") == "*bold*, _it_, *_both_*, ~gone~"
    assert markdown_to_mrkdwn("# Plan\n- one\n- two") == "*Plan*\n• one\n• two"
    assert markdown_to_mrkdwn("> quoted & <b>") == "> quoted &amp; &lt;b&gt;"
    assert markdown_to_mrkdwn("<@U123> <!channel>") == "&lt;@U123&gt; &lt;!channel&gt;"  # no pings from a model
    code = "```python\nif a < b and '**x**':\n    pass\n```\nthen `x<y>` **ok**"
    assert markdown_to_mrkdwn(code) == "```\nif a &lt; b and '**x**':\n    pass\n```\nthen `x&lt;y&gt;` *ok*"
    assert markdown_to_mrkdwn("```\nstill streaming **x**") == "```\nstill streaming **x**\n```"
    assert markdown_to_mrkdwn("snake_case and 2*3*4") == "snake_case and 2*3*4"
    assert markdown_to_mrkdwn("<https://a.test/x|y>") == "<https://a.test/x%7Cy>"


async def test_buttons_become_block_kit_and_a_click_becomes_an_action_event(
    started: tuple[SlackAdapter, Inbox], fake_slack: FakeSlack
) -> None:
    adapter, inbox = started
    target = ChatTarget(channel="slack", peer=Peer("channel", "C0OPS"))
    buttons = [[Button(label="Allow", value="approve:1", style="success"), Button(label="Deny", value="deny:1")]]
    ts = await adapter.send(target, OutboundMessage(text="Run `rm -rf build`?", buttons=buttons))
    assert ts is not None
    (posted,) = fake_slack.posted
    assert posted["text"] == "Run `rm -rf build`?"  # the notification fallback
    section, actions = posted["blocks"]
    assert section == {"type": "section", "text": {"type": "mrkdwn", "text": "Run `rm -rf build`?"}}
    assert actions["type"] == "actions"
    assert [element["value"] for element in actions["elements"]] == ["approve:1", "deny:1"]
    assert actions["elements"][0]["style"] == "primary" and "style" not in actions["elements"][1]
    assert actions["elements"][0]["text"] == {"type": "plain_text", "text": "Allow", "emoji": True}
    assert len({element["action_id"] for element in actions["elements"]}) == 2

    envelope = await fake_slack.click(message_ts=ts, value="approve:1", channel="C0OPS")
    await fake_slack.wait_for_ack(envelope)
    await eventually(lambda: len(inbox.actions) == 1, "the click")
    (click,) = inbox.actions
    assert click == ActionEvent(
        channel="slack",
        account="default",
        peer=Peer("channel", "C0OPS"),
        sender_id=USER_ID,
        sender_name="ann",
        message_id=ts,
        value="approve:1",
        click_id=click.click_id,
    )
    assert click.click_id  # Slack's action_ts: the same on a redelivery

    # Editing to plain text takes the buttons away.
    await adapter.edit(target, ts, OutboundMessage(text="Allowed by *ann*"))
    assert fake_slack.messages[("C0OPS", ts)]["blocks"] == []
    assert fake_slack.messages[("C0OPS", ts)]["text"] == "Allowed by _ann_"


def test_blocks_never_exceed_fifty() -> None:
    rows = [[Button(label=f"b{r}.{c}", value=f"{r}.{c}") for c in range(3)] for r in range(60)]
    blocks = build_blocks("x" * 7000, rows)
    assert len(blocks) <= 50
    assert [block["type"] for block in blocks[:3]] == ["section"] * 3
    values = [element["value"] for block in blocks[3:] for element in block["elements"]]
    assert len(values) == 180 and all(len(block["elements"]) <= 25 for block in blocks[3:])
    assert all(len(block["text"]["text"]) <= 3000 for block in blocks[:3])


async def test_dm_send_edit_delete_react(started: tuple[SlackAdapter, Inbox], fake_slack: FakeSlack) -> None:
    adapter, _ = started
    target = ChatTarget(channel="slack", peer=Peer("direct", USER_ID))
    ts = await adapter.send(target, OutboundMessage(text="draft"))
    assert ts is not None
    channel = dm_channel(USER_ID)
    assert fake_slack.messages[(channel, ts)]["text"] == "draft"
    await adapter.edit(target, ts, OutboundMessage(text="final"))
    assert fake_slack.messages[(channel, ts)]["text"] == "final"
    await adapter.react(target, ts, "👍")
    assert fake_slack.reactions == [(channel, ts, "thumbsup")]
    await adapter.delete(target, ts)
    assert (channel, ts) not in fake_slack.messages
    await adapter.typing(target)  # a no-op on Slack
    assert {call.method for call in fake_slack.calls} <= {
        "auth.test",
        "apps.connections.open",
        "chat.postMessage",
        "chat.update",
        "reactions.add",
        "chat.delete",
    }

    # A fresh adapter that never saw this DM finds its channel for an edit.
    other = SlackAdapter("second", account(fake_slack))
    other.client = adapter.client
    await other.edit(target, (await adapter.send(target, OutboundMessage(text="x"))) or "", OutboundMessage(text="y"))
    assert fake_slack.calls_to("conversations.open")


async def test_a_rate_limit_is_waited_out_and_the_message_sent_once(fake_slack: FakeSlack) -> None:
    clock = FakeClock()
    adapter = SlackAdapter("default", account(fake_slack), sleep=clock.sleep)
    inbox = Inbox()
    await adapter.start(inbox.on_message, inbox.on_action)
    try:
        fake_slack.rate_limit(2, retry_after=30, method="chat.postMessage")
        target = ChatTarget(channel="slack", peer=Peer("channel", "C0GENERAL"))
        ts = await adapter.send(target, OutboundMessage(text="after the wait"))
    finally:
        await adapter.stop()
    statuses = [call.status for call in fake_slack.calls if call.method == "chat.postMessage"]
    assert statuses == [429, 429, 200]
    assert len(clock.slept) == 2 and all(30 <= seconds < 31 for seconds in clock.slept)  # Retry-After, then retry
    assert [body["text"] for body in fake_slack.posted] == ["after the wait"]
    assert ts is not None


async def test_a_too_long_message_is_an_error(started: tuple[SlackAdapter, Inbox], fake_slack: FakeSlack) -> None:
    adapter, _ = started
    target = ChatTarget(channel="slack", peer=Peer("channel", "C0GENERAL"))
    with pytest.raises(SlackApiError) as caught:
        await adapter.send(target, OutboundMessage(text="x" * 40_001))
    assert caught.value.response["error"] == "msg_too_long"


# --- HTTP Events mode ---------------------------------------------------------------------------------------------


async def test_http_mode_verifies_signatures_and_delivers(fake_slack: FakeSlack) -> None:
    settings = account(fake_slack, mode="http", signing_secret=SIGNING_SECRET, http_port=0, app_token=None)
    adapter = SlackAdapter("web", settings)
    inbox = Inbox()
    await adapter.start(inbox.on_message, inbox.on_action)
    try:
        url = f"http://127.0.0.1:{adapter.http_port}/slack/events"
        status, body = await post_event(url, {"type": "url_verification", "challenge": "abc123", "token": "t"})
        assert status == 200 and json.loads(body)["challenge"] == "abc123"

        event = {"type": "message", "channel_type": "im", "user": USER_ID, "text": "over http", "ts": "1.000001"}
        event["channel"] = dm_channel(USER_ID)
        payload = fake_slack.event_body(event)
        status, _ = await post_event(url, payload, secret="wrong-secret")
        assert status == 401
        status, _ = await post_event(url, payload, timestamp=1_000_000)  # a replay from long ago
        assert status == 401
        assert inbox.messages == []
        status, _ = await post_event(url, payload)
        assert status == 200
        (message,) = inbox.messages  # handed over before the answer
        assert message.peer == Peer("direct", USER_ID) and message.text == "over http"

        click = {
            "type": "block_actions",
            "user": {"id": USER_ID, "username": "ann"},
            "channel": {"id": "C0OPS"},
            "container": {"type": "message", "message_ts": "2.000001", "channel_id": "C0OPS"},
            "message": {"ts": "2.000001"},
            "actions": [{"type": "button", "action_id": "sb:0:0", "block_id": "b", "value": "ok", "action_ts": "3"}],
        }
        status, _ = await post_action(url, click)
        assert status == 200
        assert [action.value for action in inbox.actions] == ["ok"]
    finally:
        await adapter.stop()


# --- end to end through the gateway --------------------------------------------------------------------------------


def make_config(llm: FakeLLM, tmp_path: Path, **extra: Any) -> Config:
    config = {
        "defaults": {"model": "fake/m", "workspace_root": str(tmp_path / "ws")},
        "providers": {"fake": {"kind": "openai", "base_url": llm.openai_base_url, "timeout_seconds": 60}},
        "session": {"queue": {"mode": "followup", "debounce_ms": 20}},
        **extra,
    }
    return parse_config(json.dumps(config))


def sessions(state_dir: Path) -> dict[str, str]:
    with sqlite3.connect(state_dir / "state.db") as connection:
        return dict(connection.execute("SELECT session_key, agent FROM sessions").fetchall())


@pytest.fixture
async def serve(
    fake_slack: FakeSlack, fake_llm: FakeLLM, tmp_path: Path
) -> AsyncIterator[Callable[..., Awaitable[Gateway]]]:
    running: list[tuple[Gateway, SqliteStore]] = []

    async def start(**extra: Any) -> Gateway:
        adapter = SlackAdapter("default", account(fake_slack, dm_policy="open"))
        store = await SqliteStore.open(tmp_path / "state")
        gateway = Gateway(App(make_config(fake_llm, tmp_path, **extra), tmp_path / "state"), store, [adapter])
        running.append((gateway, store))
        await gateway.start()
        await fake_slack.wait_connected()
        return gateway

    try:
        yield start
    finally:
        for gateway, store in running:
            await gateway.stop(0.5)
            await store.close()


async def test_end_to_end_a_thread_reply_stays_in_the_thread_and_a_double_delivery_runs_once(
    serve: Callable[..., Awaitable[Gateway]], fake_slack: FakeSlack, fake_llm: FakeLLM
) -> None:
    fake_llm.script("in thread", "must not be used")
    gateway = await serve()
    root = fake_slack.new_ts()
    envelopes = await fake_slack.thread_reply("what now?", thread_ts=root, mention=True, channel="C0DEV")
    for envelope in envelopes:
        await fake_slack.wait_for_ack(envelope)  # both judged: a second delivery let through would be queued now
    await fake_slack.wait_for_calls("chat.postMessage", 1)
    await eventually(gateway.idle, "the gateway to have nothing running, queued or left to send")
    (posted,) = fake_slack.posted
    assert (posted["channel"], posted["thread_ts"], posted["text"]) == ("C0DEV", root, "in thread")
    assert asked(fake_llm) == [f'"{USER_ID}": what now?']


async def test_end_to_end_a_team_binding_routes_to_its_agent(
    serve: Callable[..., Awaitable[Gateway]], fake_slack: FakeSlack, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    fake_llm.script("from the team agent")
    await serve(
        agents=[{"id": "main", "default": True}, {"id": "acme"}],
        bindings=[
            {"agent": "main", "match": {"channel": "slack", "team": "T0OTHER"}},
            {"agent": "acme", "match": {"channel": "slack", "team": TEAM_ID}},
        ],
    )
    await fake_slack.dm("who answers?")
    await fake_slack.wait_for_calls("chat.postMessage", 1)
    assert [body["text"] for body in fake_slack.posted] == ["from the team agent"]
    assert list(sessions(tmp_path / "state").values()) == ["acme"]
