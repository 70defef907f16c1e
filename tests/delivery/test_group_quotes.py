"""Group answers quote the message they answer (issue 24): through a real `bot run` on the fakes, Telegram's answer
in a group carries `reply_parameters` and Discord's in a guild channel a message reference, on the answer's first
message only (streamed or not); answers in direct chats quote nothing. Clicks and turns the bot starts itself
quote nothing either (`quoted`)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from configs import config_dict, discord, telegram
from fakes.discord import CHANNEL_ID, FakeDiscord
from fakes.llm import FakeLLM, Reply
from fakes.telegram import FakeTelegram
from helpers import bot_run

from bot.delivery.outbox import Delivery, quoted
from bot.store import SqliteStore
from channels import MemoryChannel
from channels.base import Capabilities, InboundMessage, Scheduled
from routing import Peer

OWNER = 4242
WAIT = 30.0


def telegram_config(tmp_path: Path, llm: FakeLLM, tg: FakeTelegram, streaming: str) -> dict[str, Any]:
    return config_dict(
        tmp_path,
        llm,
        telegram(tg, streaming=streaming),
        agents=[{"id": "main", "default": True}],
        owners=[f"telegram:{OWNER}"],
        session={"queue": {"mode": "followup"}},
    )


def quotes(call: dict[str, Any]) -> int | None:
    """The message id a sendMessage call quotes, None when it quotes nothing."""
    reply = call.get("reply_parameters")
    return reply.get("message_id") if isinstance(reply, dict) else None


async def test_telegram_group_answers_quote_the_message_dm_answers_do_not(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg = fake_telegram
    fake_llm.script("Hello owner.", "Team here.", "y" * 5000)
    async with bot_run(telegram_config(tmp_path, fake_llm, tg, "off"), tmp_path, "account main started"):
        await tg.private_message("hi", user_id=OWNER, name="Owner")
        await tg.wait_sent(OWNER, 1)
        asked = await tg.group_message("what's up?", mention=True)
        await tg.wait_sent(tg.group_id, 1)
        long = await tg.group_message("a long one", mention=True)
        await tg.wait_sent(tg.group_id, 3)
    sends = tg.calls("sendMessage")
    [dm] = [call for call in sends if call["chat_id"] == OWNER]
    assert quotes(dm) is None  # a direct chat: nothing to quote
    group = [call for call in sends if call["chat_id"] == tg.group_id]
    assert [quotes(call) for call in group] == [
        asked["message"]["message_id"],
        long["message"]["message_id"],  # the long answer's first chunk quotes, the second does not
        None,
    ]
    assert group[0]["reply_parameters"].get("allow_sending_without_reply") is True


async def test_a_streamed_group_answer_quotes_in_its_first_message(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg = fake_telegram
    beginning = " ".join(f"word{number}" for number in range(30))
    rest = "".join(f" word{number}" for number in range(30, 60))
    fake_llm.script(Reply.held(beginning, then=rest))
    async with bot_run(telegram_config(tmp_path, fake_llm, tg, "partial"), tmp_path, "account main started"):
        asked = await tg.group_message("tell me slowly", mention=True)
        await tg.wait_sent(tg.group_id, 1)  # the preview, shown while the model still writes
        fake_llm.release()
        await tg.wait_for(lambda: any(call["text"].endswith("word59") for call in tg.calls("editMessageText")), "edit")
    [preview] = [call for call in tg.calls("sendMessage") if call["chat_id"] == tg.group_id]
    assert quotes(preview) == asked["message"]["message_id"]


async def test_discord_guild_answers_reference_the_message_dm_answers_do_not(
    tmp_path: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord
) -> None:
    dc = fake_discord
    config = config_dict(
        tmp_path,
        fake_llm,
        discord(dc, streaming="off"),
        agents=[{"id": "main", "default": True}],
        owners=[f"discord:{dc.alice.id}"],
    )
    fake_llm.script("Hello owner.", "Guild here.")
    owner_dm = dc.dm_channel_id(dc.alice)
    async with bot_run(config, tmp_path, "channel discord account main started"):
        await dc.dm("hi", user=dc.alice)
        await dc.wait_for_posts(1, owner_dm, timeout=WAIT)
        asked = await dc.guild_message("what's up?", channel_id=CHANNEL_ID, mention=True)
        await dc.wait_for_posts(1, CHANNEL_ID, timeout=WAIT)
    [dm] = dc.posts(owner_dm)
    assert "message_reference" not in dm.body
    [answer] = dc.posts(CHANNEL_ID)
    assert str(answer.body["message_reference"]["message_id"]) == asked["id"]
    assert dc.texts(CHANNEL_ID) == ["Guild here."]


def group_message(**changes: Any) -> InboundMessage:
    fields: dict[str, Any] = {
        "channel": "memory",
        "peer": Peer("group", "-100"),
        "sender_id": "7",
        "text": "hi",
        "message_id": "41",
    }
    return InboundMessage(**{**fields, **changes})


def test_only_a_persons_message_in_a_group_is_quoted() -> None:
    assert quoted(group_message()) == "41"
    assert quoted(group_message(peer=Peer("channel", "c1"))) == "41"
    assert quoted(group_message(peer=Peer("direct", "7"))) is None
    assert quoted(group_message(message_id="click:41:ab", button=True, reply_to="41")) is None
    cron = Scheduled(job="j1", agent="main", session_key="agent:main:main", owner=True)
    assert quoted(group_message(message_id="cron:j1:1.0", scheduled=cron)) is None


async def test_replies_quote_on_the_first_chunk_unless_told_not_to(tmp_path: Path) -> None:
    chat = MemoryChannel(capabilities=Capabilities(max_text_length=10))
    async with await SqliteStore.open(tmp_path / "state") as store:
        delivery = Delivery(store, {(chat.channel, chat.account): chat}, clock=time.time)
        entries = delivery.replies(1, group_message(), "0123456789 abcdefghij")
        assert [entry.payload["reply_to"] for entry in entries] == ["41", None]
        later = delivery.replies(1, group_message(), "0123456789 abcdefghij", quote=False)
        assert [entry.payload["reply_to"] for entry in later] == [None, None]
