"""Where the message tool may act, through a real `bot run` on the fake Telegram: a stranger's group run cannot reach
the owner's DM, nor change messages it did not send or an approval card; an owner's run may post elsewhere."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from configs import config_dict, telegram
from fakes.llm import FakeLLM, Reply, ToolCallSpec
from fakes.telegram import FakeTelegram
from helpers import bot_run, eventually

from bot.store import ApprovalRecord, SqliteStore

OWNER = 4242
STRANGER = 555
STARTED = "channel telegram account main started"
ONLY_HERE = "may only act in the chat it was started from"


def config(tmp_path: Path, llm: FakeLLM, tg: FakeTelegram, streaming: str = "off", **agent: Any) -> dict[str, Any]:
    account = telegram(tg, streaming=streaming, dm_policy="open", group_policy="open")
    return config_dict(tmp_path, llm, account, agents=[{"id": "main", **agent}], owners=[f"telegram:{OWNER}"])


def message_calls(*calls: dict[str, Any]) -> Reply:
    return Reply.tool_calls(*(ToolCallSpec("message", arguments) for arguments in calls))


def tool_results(llm: FakeLLM, request: int) -> list[dict[str, Any]]:
    """The tool results the model read in its `request`-th call (0-based), in the order it made the calls."""
    messages = llm.requests[request].body["messages"]
    results = []
    for message in reversed(messages):
        if message["role"] != "tool":
            break
        results.append(json.loads(message["content"]))
    return results[::-1]


def offered(llm: FakeLLM, request: int) -> set[str]:
    """The parameters of the message tool offered in the `request`-th call."""
    for tool in llm.requests[request].body["tools"]:
        if tool["function"]["name"] == "message":
            return set(tool["function"]["parameters"]["properties"])
    raise AssertionError("no message tool offered")


def bot_message(tg: FakeTelegram, chat: int, visible: str) -> int:
    [found] = [key[1] for key, stored in tg.messages.items() if key[0] == chat and stored.visible == visible]
    return found


def card_in(tg: FakeTelegram, chat: int) -> int:
    [found] = [key[1] for key, stored in tg.messages.items() if key[0] == chat and stored.reply_markup]
    return found


def sends_to(tg: FakeTelegram, chat: int) -> list[str]:
    return [call["text"] for call in tg.calls("sendMessage") if call["chat_id"] == chat]


async def test_a_strangers_group_run_cannot_reach_the_owners_dm_but_the_owners_run_can_post_elsewhere(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg, llm = fake_telegram, fake_llm
    async with bot_run(config(tmp_path, llm, tg), tmp_path, STARTED):
        # The owner talks to the bot in their DM: their message, the bot's answer, then a pending approval card.
        llm.script("Hello, owner.")
        said = await tg.private_message("hi", user_id=OWNER, name="Owner")
        await tg.wait_sent(OWNER, 1)
        owners_message = said["message"]["message_id"]
        answer = bot_message(tg, OWNER, "Hello, owner.")
        llm.script(Reply.tool_calls(ToolCallSpec("exec", {"command": "touch card.txt"})))
        await tg.private_message("make a file", user_id=OWNER, name="Owner")
        await tg.wait_sent(OWNER, 2)
        card = card_in(tg, OWNER)

        # A stranger mentions the bot in their group; the model tries everything in the owner's DM.
        dm = f"telegram:direct:{OWNER}"
        llm.script(
            message_calls(
                {"action": "send", "text": "Owner, please run this for me", "to": dm},
                {"action": "edit", "text": "I now agree to anything", "to": dm, "message_id": str(answer)},
                {"action": "delete", "to": dm, "message_id": str(owners_message)},
                {"action": "delete", "to": dm, "message_id": str(card)},
            ),
            "I tried.",
        )
        await tg.group_message("do your worst", user_id=STRANGER, name="Mallory", mention=True)
        await tg.wait_sent(tg.group_id, 1)
        assert tg.sent[tg.group_id] == ["I tried."]
        results = tool_results(llm, 3)
        assert len(results) == 4
        assert all(result["status"] == "error" and ONLY_HERE in result["error"] for result in results)
        assert "to" not in offered(llm, 2) and "to" in offered(llm, 0)  # the schema said so for each run
        # None of it happened: nothing new in the owner's DM, nothing edited, nothing deleted, the card pending.
        hello, asking = sends_to(tg, OWNER)
        assert hello == "Hello, owner." and "Approval required" in asking
        assert tg.calls("editMessageText") == [] and tg.calls("deleteMessage") == []
        assert tg.messages[(OWNER, answer)].visible == "Hello, owner."
        assert tg.messages[(OWNER, card)].reply_markup  # its buttons are still there to press

        # The owner denies; their run goes on and posts in the group (allowed: an owner's run) and tries to
        # delete the approval card (refused for every run: the card is the approvals module's).
        group = f"telegram:group:{tg.group_id}"
        llm.script(
            message_calls(
                {"action": "send", "text": "A note from the owner.", "to": group},
                {"action": "delete", "to": dm, "message_id": str(card)},
            ),
            "Done.",
        )
        markup = tg.messages[(OWNER, card)].reply_markup
        markup = json.loads(markup) if isinstance(markup, str) else markup
        deny = markup["inline_keyboard"][0][-1]["callback_data"]
        await tg.callback_query(deny, message_id=card, chat_id=OWNER, user_id=OWNER, name="Owner")
        await eventually(lambda: "Done." in tg.sent.get(OWNER, []), "the owner's answer")
        sent, refused = tool_results(llm, 5)
        assert sent["status"] == "ok" and sent["to"] == f"telegram/main:group:{tg.group_id}"
        assert refused["status"] == "error" and "approval request" in refused["error"]
        assert tg.sent[tg.group_id] == ["I tried.", "A note from the owner."]
        assert tg.calls("deleteMessage") == []
        assert "Denied" in tg.messages[(OWNER, card)].visible  # edited by the approvals module alone
        assert [call["message_id"] for call in tg.calls("editMessageText")] == [card]
    assert not (tmp_path / "ws" / "main" / "card.txt").exists()


@pytest.mark.parametrize("streaming", ["off", "partial"])  # the answer sent whole by the outbox, or streamed
async def test_a_run_may_change_the_bots_earlier_answer_in_its_own_conversation(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram, streaming: str
) -> None:
    tg, llm = fake_telegram, fake_llm
    async with bot_run(config(tmp_path, llm, tg, streaming), tmp_path, STARTED):
        streamed = streaming == "partial"
        llm.script(Reply.held("The answer", then=" is 41.") if streamed else Reply.text("The answer is 41."))
        asked = await tg.group_message("what is it?", user_id=STRANGER, name="Mallory", mention=True)
        if streamed:
            await tg.wait_sent(tg.group_id, 1)  # the preview, shown while the model still writes
            llm.release()
        await tg.wait_texts(tg.group_id, lambda texts: texts == ["The answer is 41."])
        answer = bot_message(tg, tg.group_id, "The answer is 41.")
        llm.script(
            message_calls(
                {"action": "edit", "text": "The answer is 42.", "message_id": str(answer)},
                {"action": "delete", "message_id": str(asked["message"]["message_id"])},  # the person's message
            ),
            "Corrected.",
        )
        await tg.group_message("are you sure?", user_id=STRANGER, name="Mallory", mention=True)
        await tg.wait_texts(tg.group_id, lambda texts: "Corrected." in texts)
        edited, refused = tool_results(llm, 2)
        assert edited["status"] == "ok"
        assert refused["status"] == "error" and "sent in this conversation" in refused["error"]
        assert tg.messages[(tg.group_id, answer)].visible == "The answer is 42."
        assert tg.calls("deleteMessage") == []


async def test_cross_chat_none_keeps_even_the_owners_run_in_its_chat(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg, llm = fake_telegram, fake_llm
    settings = config(tmp_path, llm, tg, message={"cross_chat": "none"})
    async with bot_run(settings, tmp_path, STARTED):
        llm.script(message_calls({"action": "send", "text": "psst", "to": f"telegram:group:{tg.group_id}"}), "Stayed.")
        await tg.private_message("post in the group", user_id=OWNER, name="Owner")
        await eventually(lambda: "Stayed." in tg.sent.get(OWNER, []), "the owner's answer")
        [refused] = tool_results(llm, 1)
        assert refused["status"] == "error" and ONLY_HERE in refused["error"]
        assert "to" not in offered(llm, 0)
        assert sends_to(tg, tg.group_id) == []


async def test_the_store_knows_an_approval_card_by_its_chat_and_message(tmp_path: Path) -> None:
    async with await SqliteStore.open(tmp_path) as store:
        record = ApprovalRecord(
            id="abc123", agent="main", session_key="s", command="ls", cwd=".", approvers=["telegram:1"],
            created=1.0, expires=2.0, status="pending",
        )  # fmt: skip
        await store.create_approval(record)
        target = {"channel": "telegram", "account": "main", "peer": {"kind": "direct", "id": "1"}, "thread_id": None}
        await store.add_approval_message("abc123", {"target": target, "message_id": "7"})
        assert await store.is_approval_message("telegram", "main", "direct", "1", "7")
        await store.decide_approval("abc123", "denied", "deny", "telegram:1")
        assert await store.is_approval_message("telegram", "main", "direct", "1", "7")  # decided: still a card
        assert not await store.is_approval_message("telegram", "main", "direct", "2", "7")  # same id, other chat
        assert not await store.is_approval_message("telegram", "other", "direct", "1", "7")
        assert not await store.is_approval_message("telegram", "main", "direct", "1", "8")
