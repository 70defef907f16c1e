"""The Telegram adapter on the real python-telegram-bot against a fake Bot API server on 127.0.0.1, alone and end to
end through a real Gateway (fake LLM, SQLite store in a temporary directory). A streamed reply, on every platform:
test_streaming_every_platform.py."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

import httpx
import pytest
from fakes.llm import FakeLLM, Reply
from fakes.telegram import FakeTelegram, parse_html
from helpers import WAIT, FakeClock, asked, eventually
from telegram_adapter import Inbox, dm, running, settings

import channels.telegram.sending as telegram_sending  # where send() looks markdown_to_html up
from bot.app import App
from bot.config.loading import parse_config
from bot.delivery.outbox import Delivery
from bot.gateway.process import Gateway
from bot.store import SqliteStore
from channels.base import Button, ChatTarget, InboundMessage, OutboundMessage
from channels.markup_telegram import markdown_to_html
from channels.telegram import (
    TelegramAdapter,
    TelegramRateLimiter,
    TelegramSendError,
    chat_and_thread,
)
from routing import Peer


@pytest.fixture
async def tg() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as server:
        yield server


@pytest.fixture
async def started(tg: FakeTelegram) -> AsyncIterator[tuple[TelegramAdapter, Inbox]]:
    async with running(tg, commands=[("status", "agent, model, session")]) as started:
        yield started


@contextlib.asynccontextmanager
async def started_with(tg: FakeTelegram, limiter: TelegramRateLimiter) -> AsyncIterator[TelegramAdapter]:
    """An adapter whose rate limiter the test made (on a fake clock)."""
    async with running(tg, rate_limiter=limiter) as (adapter, _):
        yield adapter


class LimiterOnAFakeClock(TelegramRateLimiter):
    """The rate limiter on a fake clock, noting the time (by that clock) at which it let each sendMessage go."""

    def __init__(self, overall_per_second: int = 30) -> None:
        self.fake_clock = FakeClock()
        super().__init__(overall_per_second, clock=self.fake_clock, sleep=self.fake_clock.sleep)
        self.sends: list[float] = []

    async def process_request(
        self,
        callback: Callable[..., Coroutine[Any, Any, bool | dict[str, Any] | list[dict[str, Any]]]],
        args: Any,
        kwargs: dict[str, Any],
        endpoint: str,
        data: dict[str, Any],
        rate_limit_args: None,
    ) -> bool | dict[str, Any] | list[dict[str, Any]]:
        async def let_go(*call_args: Any, **call_kwargs: Any) -> bool | dict[str, Any] | list[dict[str, Any]]:
            if endpoint == "sendMessage":
                self.sends.append(self.fake_clock())
            return await callback(*call_args, **call_kwargs)

        return await super().process_request(let_go, args, kwargs, endpoint, data, rate_limit_args)


# --- receiving ----------------------------------------------------------------------------------------------------


async def test_a_dm_arrives_with_peer_sender_text_and_id(
    tg: FakeTelegram, started: tuple[TelegramAdapter, Inbox]
) -> None:
    adapter, inbox = started
    update = await tg.private_message("hello there", name="Ann")
    message = await inbox.message()
    assert message.channel == "telegram" and message.account == "default"
    assert message.peer == Peer("direct", "1001") and message.parent_peer is None
    assert (message.sender_id, message.sender_name, message.sender_is_bot) == ("1001", "Ann", False)
    assert message.text == "hello there"
    assert message.message_id == str(update["message"]["message_id"])
    assert adapter.bot_username == tg.username
    methods = [call.method for call in tg.requests]
    assert methods[:3] == ["getMe", "setMyCommands", "deleteWebhook"]
    assert tg.calls("setMyCommands")[0]["commands"] == [{"command": "status", "description": "agent, model, session"}]


async def test_group_mentions_and_replies_to_the_bot(tg: FakeTelegram, started: tuple[TelegramAdapter, Inbox]) -> None:
    adapter, inbox = started
    group = ChatTarget(channel="telegram", peer=Peer("group", tg.group_id))
    bot_message = await adapter.send(group, OutboundMessage(text="I am here"))
    assert bot_message is not None

    await tg.group_message("just chatting")
    await tg.group_message("what do you think?", mention=True)
    await tg.group_message("and this?", reply_to_bot=int(bot_message))
    await tg.group_message(f"cc @{tg.username.upper()} please")  # no entity, different case
    await inbox.wait(lambda: len(inbox.messages) == 4, "the four group messages")
    plain, mentioned, replied, named = inbox.messages

    assert plain.peer == Peer("group", str(tg.group_id)) and plain.parent_peer is None
    assert plain.was_mentioned is False and plain.reply_to_bot is False
    assert mentioned.was_mentioned is True and mentioned.text.startswith(f"@{tg.username}")
    assert replied.reply_to_bot is True and replied.was_mentioned is True and replied.reply_to == bot_message
    assert named.was_mentioned is True


@pytest.mark.parametrize(
    ("text", "addressed"),
    [
        ("@{name}net can you hear me?", False),  # another bot whose name starts with ours
        ("@{name}_2 hello", False),
        ("write to me@{name} please", False),  # part of an address, not a mention
        ("@@{name}", False),
        ("hey @{name}, a question", True),
        ("(@{name}) and you?", True),
        ("@{upper}", True),
    ],
)
async def test_a_mention_without_an_entity_is_the_whole_handle(
    tg: FakeTelegram, started: tuple[TelegramAdapter, Inbox], text: str, addressed: bool
) -> None:
    _, inbox = started
    await tg.group_message(text.format(name=tg.username, upper=tg.username.upper()))
    message = await inbox.message()
    assert message.was_mentioned is addressed


@pytest.mark.parametrize("handle", ["@{name}net", "@{name}"])
async def test_a_mention_entity_counts_only_for_our_own_handle(
    tg: FakeTelegram, started: tuple[TelegramAdapter, Inbox], handle: str
) -> None:
    _, inbox = started
    text = handle.format(name=tg.username) + " hi"
    await tg.group_message(text, entities=[{"type": "mention", "offset": 0, "length": len(text) - 3}])
    message = await inbox.message()
    assert message.was_mentioned is (handle == "@{name}")


async def test_sender_is_bot_comes_from_the_sender(tg: FakeTelegram, started: tuple[TelegramAdapter, Inbox]) -> None:
    _, inbox = started
    await tg.private_message("beep", user_id=4004, name="Robo", is_bot=True)
    assert (await inbox.message()).sender_is_bot is True


async def test_a_forum_topic_message_and_the_reply_into_its_thread(
    tg: FakeTelegram, started: tuple[TelegramAdapter, Inbox]
) -> None:
    adapter, inbox = started
    await tg.topic_message("inside the topic", thread_id=77)
    message = await inbox.message()
    assert message.peer == Peer("group", f"{tg.group_id}:topic:77")
    assert message.parent_peer == Peer("group", str(tg.group_id))
    assert message.thread_id == "77"
    # Telegram makes every topic message a reply to the topic's first message; that is not a reply to the bot.
    assert message.reply_to is None and message.reply_to_bot is False and message.was_mentioned is False

    await adapter.send(message.target(), OutboundMessage(text="answer", thread_id=message.thread_id))
    await adapter.typing(message.target())
    send = tg.calls("sendMessage")[-1]
    assert (send["chat_id"], send["message_thread_id"]) == (tg.group_id, 77)
    action = tg.calls("sendChatAction")[-1]
    assert (action["chat_id"], action["message_thread_id"], action["action"]) == (tg.group_id, 77, "typing")
    assert chat_and_thread(message.target()) == (tg.group_id, 77)


async def test_an_addressed_command_passes_through_as_is(
    tg: FakeTelegram, started: tuple[TelegramAdapter, Inbox]
) -> None:
    _, inbox = started
    await tg.group_message(f"/status@{tg.username}")
    message = await inbox.message()
    assert message.text == f"/status@{tg.username}"
    assert message.was_mentioned is True


async def test_malformed_updates_are_skipped_and_the_next_one_arrives(
    tg: FakeTelegram, started: tuple[TelegramAdapter, Inbox]
) -> None:
    _, inbox = started
    await tg.raw_update({"update_id": tg.next_update_id(), "message": {"message_id": "x", "text": "no chat"}})
    await tg.raw_update({"update_id": tg.next_update_id(), "message": "not an object"})
    await tg.raw_update({"update_id": tg.next_update_id(), "poll_answer": {"poll_id": "1"}})  # a type not handled
    await tg.raw_update({"message": {"text": "no update id"}})
    await tg.raw_update({"update_id": tg.next_update_id(), "callback_query": {"id": "q", "data": "x"}})  # no from
    good = await tg.private_message("still here")
    message = await inbox.message()
    assert message.text == "still here"
    await tg.acknowledged(good)
    assert len(inbox.messages) == 1 and inbox.actions == []


async def test_an_update_is_acknowledged_only_after_on_message_returned(
    tg: FakeTelegram, started: tuple[TelegramAdapter, Inbox]
) -> None:
    adapter, inbox = started
    inbox.hold = asyncio.Event()
    update = await tg.private_message("hold me")
    await eventually(inbox.entered.is_set, "on_message to be called")
    # While on_message runs, the offset the adapter's next getUpdates would confirm has not passed the update
    # (a poller that confirms early moves it when it fetches the batch), and no getUpdates has confirmed it.
    assert adapter._offset <= update["update_id"]
    assert max(tg.offsets) <= update["update_id"]
    assert inbox.messages == []
    inbox.hold.set()
    await tg.acknowledged(update)
    assert [message.text for message in inbox.messages] == ["hold me"]


async def test_a_button_click_becomes_an_action_and_is_answered(
    tg: FakeTelegram, started: tuple[TelegramAdapter, Inbox]
) -> None:
    adapter, inbox = started
    buttons = [[Button(label="Allow", value="approve:1"), Button(label="Deny", value="deny:1")]]
    message_id = await adapter.send(dm(tg), OutboundMessage(text="Run `ls`?", buttons=buttons))
    assert message_id is not None
    markup = tg.calls("sendMessage")[-1]["reply_markup"]
    assert markup == {
        "inline_keyboard": [
            [{"text": "Allow", "callback_data": "approve:1"}, {"text": "Deny", "callback_data": "deny:1"}]
        ]
    }

    update = await tg.callback_query("approve:1", message_id=int(message_id))
    await inbox.wait(lambda: len(inbox.actions) == 1, "the click")
    action = inbox.actions[0]
    assert action.value == "approve:1" and action.message_id == message_id
    assert action.peer == Peer("direct", str(tg.user_id)) and action.sender_id == str(tg.user_id)
    await tg.wait_for(lambda: update["callback_query"]["id"] in tg.answered)


async def test_a_button_value_over_64_bytes_is_refused_before_sending(
    tg: FakeTelegram, started: tuple[TelegramAdapter, Inbox]
) -> None:
    adapter, _ = started
    with pytest.raises(TelegramSendError, match="64 bytes"):
        await adapter.send(dm(tg), OutboundMessage(text="x", buttons=[[Button(label="L", value="é" * 33)]]))
    assert tg.calls("sendMessage") == []


async def test_service_messages_are_skipped(tg: FakeTelegram, started: tuple[TelegramAdapter, Inbox]) -> None:
    _, inbox = started
    joined: dict[str, Any] = {"new_chat_members": [{"id": 9, "is_bot": False, "first_name": "New"}]}
    await tg.group_message("", **joined)
    await tg.group_message("after the join")
    assert (await inbox.message()).text == "after the join"
    assert len(inbox.messages) == 1


async def test_an_update_the_gateway_could_not_record_is_delivered_again(tg: FakeTelegram) -> None:
    async with running(tg) as (_, inbox):
        inbox.failures = 1
        update = await tg.private_message("try again")
        assert (await inbox.message()).text == "try again"
        await tg.acknowledged(update)
        assert len(inbox.messages) == 1


async def test_chats_in_one_batch_are_recorded_side_by_side_each_in_order(tg: FakeTelegram) -> None:
    for number in range(3):
        await tg.private_message(f"ann {number}", user_id=1001)
        await tg.private_message(f"bo {number}", user_id=1002)
    bo_seen = asyncio.Event()
    seen: list[str] = []

    async def record(message: InboundMessage) -> None:
        seen.append(message.text)
        if message.sender_id == "1001":
            await bo_seen.wait()  # one after the other, Ann's first message would wait for Bo forever
        else:
            bo_seen.set()

    adapter = TelegramAdapter("default", settings(tg))
    await adapter.start(record, Inbox().on_action)
    try:
        await tg.wait_for(lambda: len(seen) == 6, "all six messages")
        assert [text for text in seen if text.startswith("ann")] == ["ann 0", "ann 1", "ann 2"]
        assert [text for text in seen if text.startswith("bo")] == ["bo 0", "bo 1", "bo 2"]
    finally:
        await adapter.stop()


async def test_a_failure_in_one_chat_holds_back_that_chat_only_and_is_delivered_again(tg: FakeTelegram) -> None:
    ann_first = await tg.private_message("ann 0", user_id=1001)
    await tg.private_message("bo 0", user_id=1002)
    await tg.private_message("ann 1", user_id=1001)
    inbox = Inbox()
    failures = 1

    async def flaky(message: InboundMessage) -> None:
        nonlocal failures
        if message.text == "ann 0" and failures:
            failures -= 1
            raise RuntimeError("database is locked")
        await inbox.on_message(message)

    adapter = TelegramAdapter("default", settings(tg))
    await adapter.start(flaky, inbox.on_action)
    try:
        await inbox.wait(
            lambda: {"ann 0", "ann 1", "bo 0"} <= {message.text for message in inbox.messages}, "all three messages"
        )
        ann = [message.text for message in inbox.messages if message.sender_id == "1001"]
        assert ann == ["ann 0", "ann 1"]  # "ann 1" waited for the retry of "ann 0"
        await tg.acknowledged(ann_first)
        # Bo's message was confirmed with the retry, so it may come twice: the gateway's journal drops the copy.
        assert {message.text for message in inbox.messages if message.sender_id == "1002"} == {"bo 0"}
    finally:
        await adapter.stop()


# --- sending ------------------------------------------------------------------------------------------------------


async def test_send_renders_markdown_as_telegram_html(tg: FakeTelegram, started: tuple[TelegramAdapter, Inbox]) -> None:
    adapter, _ = started
    message_id = await adapter.send(dm(tg), OutboundMessage(text="**bold** <tag> & `a<b`\n```python\nx = 1 < 2\n```"))
    assert message_id is not None
    call = tg.calls("sendMessage")[-1]
    assert call["parse_mode"] == "HTML"
    assert call["text"] == (
        "<b>bold</b> &lt;tag&gt; &amp; <code>a&lt;b</code>\n"
        '<pre><code class="language-python">x = 1 &lt; 2</code></pre>'
    )
    assert tg.messages[(tg.user_id, int(message_id))].visible == "bold <tag> & a<b\nx = 1 < 2"


async def test_an_entity_error_falls_back_to_plain_text(
    tg: FakeTelegram, started: tuple[TelegramAdapter, Inbox], monkeypatch: pytest.MonkeyPatch
) -> None:
    adapter, _ = started
    monkeypatch.setattr(telegram_sending, "markdown_to_html", lambda text: f"<b>{text}")  # HTML Telegram refuses
    message_id = await adapter.send(dm(tg), OutboundMessage(text="**still** delivered"))
    assert message_id is not None
    first, second = tg.calls("sendMessage")
    assert first["parse_mode"] == "HTML"
    assert "parse_mode" not in second and second["text"] == "**still** delivered"
    assert tg.sent[tg.user_id] == ["**still** delivered"]


async def test_edit_delete_react_and_typing(tg: FakeTelegram, started: tuple[TelegramAdapter, Inbox]) -> None:
    adapter, _ = started
    message_id = await adapter.send(dm(tg), OutboundMessage(text="draft"))
    assert message_id is not None
    await adapter.edit(dm(tg), message_id, OutboundMessage(text="**final**"))
    stored = tg.messages[(tg.user_id, int(message_id))]
    assert (stored.text, stored.visible) == ("<b>final</b>", "final")
    await adapter.edit(dm(tg), message_id, OutboundMessage(text="**final**"))  # not modified: no error
    assert len(tg.calls("editMessageText")) == 2

    await adapter.react(dm(tg), message_id, "👍")
    assert tg.calls("setMessageReaction")[-1]["reaction"] == [{"type": "emoji", "emoji": "👍"}]
    await adapter.typing(dm(tg))
    assert tg.calls("sendChatAction")[-1] == {"chat_id": tg.user_id, "action": "typing"}
    await adapter.delete(dm(tg), message_id)
    assert (tg.user_id, int(message_id)) not in tg.messages


async def test_a_429_is_waited_out_and_the_message_delivered_once(tg: FakeTelegram) -> None:
    clock = FakeClock()
    tg.fail_next("sendMessage", 1, retry_after=3)
    async with started_with(tg, TelegramRateLimiter(clock=clock, sleep=clock.sleep)) as adapter:
        assert await adapter.send(dm(tg), OutboundMessage(text="patience")) is not None
    assert clock.slept == [3.0]  # it waited as told, on the limiter's clock
    assert len(tg.calls("sendMessage")) == 2
    assert tg.sent[tg.user_id] == ["patience"]


def at_most_30_a_second(sends: list[float]) -> bool:
    """Telegram allows 30 messages a second: any 31 sends in a row span a second or more."""
    return all(later - earlier >= 1.0 for earlier, later in zip(sends, sends[30:], strict=False))


async def burst(tg: FakeTelegram, limiter: LimiterOnAFakeClock) -> list[float]:
    """40 messages sent at once; when (by the limiter's clock) each was let go."""
    async with started_with(tg, limiter) as adapter:
        await asyncio.gather(*(adapter.send(dm(tg), OutboundMessage(text=f"n{i}")) for i in range(40)))
    assert sorted(tg.sent[tg.user_id]) == sorted(f"n{i}" for i in range(40))
    assert len(limiter.sends) == 40
    return limiter.sends


async def test_a_burst_stays_within_telegrams_overall_rate(tg: FakeTelegram) -> None:
    assert at_most_30_a_second(await burst(tg, LimiterOnAFakeClock()))


async def test_the_rate_check_catches_a_limiter_that_lets_31_through_in_a_second(tg: FakeTelegram) -> None:
    assert not at_most_30_a_second(await burst(tg, LimiterOnAFakeClock(overall_per_second=31)))


async def test_a_text_over_the_limit_is_delivered_in_pieces_with_the_buttons_on_the_last(
    tg: FakeTelegram, started: tuple[TelegramAdapter, Inbox], tmp_path: Path
) -> None:
    adapter, _ = started
    text = "\n\n".join(f"Paragraph {i}: " + "word " * 180 for i in range(12))
    buttons = [[Button(label="OK", value="ok")]]
    async with await SqliteStore.open(tmp_path) as store:
        delivery = Delivery(store, {(adapter.channel, adapter.account): adapter}, time.time)
        delivery.start()
        try:
            last = await delivery.send(dm(tg), OutboundMessage(text=text, buttons=buttons))
        finally:
            await delivery.stop()
    pieces = tg.sent[tg.user_id]
    assert len(pieces) >= 3 and all(len(parse_html(piece)) <= 4096 for piece in pieces)
    marked = [message_id for (chat, message_id), message in tg.messages.items() if message.reply_markup]
    assert marked == [int(last or 0)]


async def test_markdown_to_html_keeps_tags_balanced() -> None:
    assert markdown_to_html("*a **b* c**") == "<i>a b c</i>"  # CommonMark: italic in italic, shown once
    assert markdown_to_html("snake_case_name and 2 * 3 * 4") == "snake_case_name and 2 * 3 * 4"
    assert markdown_to_html("# Title\n- one\n> quoted") == "<b>Title</b>\n• one\n<blockquote>quoted</blockquote>"
    assert markdown_to_html('[docs](https://x.org/?a=1&b="2")') == (
        '<a href="https://x.org/?a=1&amp;b=%222%22">docs</a>'  # the URL normalized, as markdown-it does
    )
    assert markdown_to_html("```\nstill streaming <") == "<pre>still streaming &lt;</pre>"


# --- webhook ------------------------------------------------------------------------------------------------------


async def test_webhook_mode_checks_the_secret_and_answers_after_on_message(tg: FakeTelegram) -> None:
    adapter = TelegramAdapter(
        "hook",
        settings(tg, mode="webhook", webhook_url="https://example.invalid/tg", webhook_secret="s3cret", webhook_port=0),
    )
    inbox = Inbox()
    await adapter.start(inbox.on_message, inbox.on_action)
    try:
        assert tg.calls("setWebhook")[-1]["secret_token"] == "s3cret"
        url = f"http://127.0.0.1:{adapter.webhook_port}/"
        update = {
            "update_id": 9,
            "message": {
                "message_id": 5,
                "date": 0,
                "chat": {"id": 42, "type": "private"},
                "from": {"id": 42, "is_bot": False, "first_name": "W"},
                "text": "via webhook",
            },
        }
        async with httpx.AsyncClient(timeout=WAIT) as client:
            refused = await client.post(url, json=update, headers={"X-Telegram-Bot-Api-Secret-Token": "wrong"})
            assert refused.status_code == 403 and inbox.messages == []
            ok = await client.post(url, json=update, headers={"X-Telegram-Bot-Api-Secret-Token": "s3cret"})
            assert ok.status_code == 200
            assert [message.text for message in inbox.messages] == ["via webhook"]  # recorded before the answer
    finally:
        await adapter.stop()


# --- end to end through the gateway -------------------------------------------------------------------------------


class Running:
    def __init__(self, gateway: Gateway, store: SqliteStore, adapter: TelegramAdapter) -> None:
        self.gateway, self.store, self.adapter = gateway, store, adapter


@pytest.fixture
async def gateway(
    fake_llm: FakeLLM, tg: FakeTelegram, tmp_path: Path
) -> AsyncIterator[Callable[[], Awaitable[Running]]]:
    running: list[Running] = []

    async def start() -> Running:
        config = parse_config(
            json.dumps(
                {
                    "defaults": {"model": "fake/m", "workspace_root": str(tmp_path / "ws")},
                    "providers": {
                        "fake": {"kind": "openai", "base_url": fake_llm.openai_base_url, "timeout_seconds": 60}
                    },
                    "session": {"queue": {"mode": "followup", "debounce_ms": 50}},
                }
            )
        )
        adapter = TelegramAdapter("default", settings(tg))
        store = await SqliteStore.open(tmp_path / "state")
        gateway = Gateway(App(config, tmp_path / "state"), store, [adapter])
        await gateway.start()
        running.append(Running(gateway, store, adapter))
        return running[-1]

    try:
        yield start
    finally:
        for entry in running:
            await entry.gateway.stop(0.5)
            await entry.store.close()


async def test_end_to_end_a_long_answer_arrives_in_chunks(
    tg: FakeTelegram, fake_llm: FakeLLM, gateway: Callable[[], Awaitable[Running]]
) -> None:
    answer = "\n\n".join(f"Part {i}. " + "lorem ipsum " * 80 for i in range(10))
    assert len(answer) > 9_000
    fake_llm.script(Reply.text(answer))
    await gateway()
    await tg.private_message("tell me everything")
    pieces = await tg.wait_texts(tg.user_id, lambda texts: " ".join(texts).split() == answer.split())
    assert len(pieces) >= 3
    assert all(len(piece) <= 4096 for piece in pieces)


async def test_end_to_end_a_duplicate_delivery_gets_one_reply(
    tg: FakeTelegram, fake_llm: FakeLLM, gateway: Callable[[], Awaitable[Running]]
) -> None:
    fake_llm.script("Only once.", "Later.")
    await gateway()
    first = await tg.private_message("hello")
    second = await tg.redeliver(first)
    await tg.acknowledged(second)
    # One chat's answers go out in order: an answer to the copy would come before the answer to a later message.
    await tg.private_message("and later?")
    await tg.wait_texts(tg.user_id, lambda texts: texts[-1:] == ["Later."])
    assert tg.chat_texts(tg.user_id) == ["Only once.", "Later."]
    assert asked(fake_llm) == ["hello", "and later?"]


async def test_the_limiter_forgets_groups_quiet_for_a_minute() -> None:
    clock = FakeClock()
    limiter = TelegramRateLimiter(clock=clock, sleep=clock.sleep)

    async def sent() -> bool:
        return True

    async def send_to(chat: str) -> None:
        await limiter.process_request(sent, (), {}, "sendMessage", {"chat_id": chat}, None)

    for number in range(100):
        await send_to(f"-100{number}")
    assert len(limiter.groups) == 100
    clock.advance(59)
    await send_to("-1000")  # written to again: stays
    clock.advance(2)
    await send_to("-2000")  # a new group: the ones quiet for a minute are forgotten
    assert set(limiter.groups) == {"-1000", "-2000"}
    assert len(limiter.groups["-1000"].times) == 1  # the kept group keeps its count: its last minute's send
