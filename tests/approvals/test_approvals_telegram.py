"""Exec approvals through a real `bot run` on Telegram (python-telegram-bot against the fake Bot API, the fake LLM
scripting exec calls): deny, allow always, `/approve` as the text fallback, the agent's own buttons, the CLI, an answer
the message tool sent already, a command too long for one message. The buttons and who may press them, and hidden
characters, on every platform: test_approvals_every_platform.py. Expiry, restarts and asking in the approvers' DMs:
test_approvals_telegram_where_and_when.py."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from configs import config_dict, telegram
from fakes.llm import FakeLLM, Reply, ToolCallSpec
from fakes.telegram import FakeTelegram
from helpers import asked, bot_run, eventually

OWNER = 4242
STRANGER = 555
STARTED = "channel telegram account main started"


def config(tmp_path: Path, llm: FakeLLM, tg: FakeTelegram, **approvals: Any) -> dict[str, Any]:
    account: dict[str, Any] = {
        "streaming": "off",
        "dm_policy": "open",
        "group_policy": "open",
        "require_mention": False,
    }
    return config_dict(
        tmp_path, llm, telegram(tg, **account),
        owners=[f"telegram:{OWNER}"],
        tools={"non_owner": {"allow": ["*"]}},  # strangers may ask for commands here: an approver decides
        approvals=approvals,
    )  # fmt: skip


@pytest.fixture
async def bot(tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram) -> AsyncIterator[Path]:
    async with bot_run(config(tmp_path, fake_llm, fake_telegram), tmp_path, STARTED) as path:
        yield path


def exec_call(command: str) -> Reply:
    return Reply.tool_calls(ToolCallSpec("exec", {"command": command}))


def approval_messages(tg: FakeTelegram, chat: int) -> list[dict[str, Any]]:
    return [call for call in tg.calls("sendMessage") if call["chat_id"] == chat and "reply_markup" in call]


def keyboard(call: dict[str, Any]) -> list[tuple[str, str]]:
    markup = call["reply_markup"]
    markup = json.loads(markup) if isinstance(markup, str) else markup
    return [(button["text"], button["callback_data"]) for row in markup["inline_keyboard"] for button in row]


def tool_result(llm: FakeLLM, request: int) -> dict[str, Any]:
    """The exec result the model got in its `request`-th call (0-based)."""
    message = llm.requests[request].body["messages"][-1]
    assert message["role"] == "tool"
    result: dict[str, Any] = json.loads(message["content"])
    return result


async def ask_for(tg: FakeTelegram, text: str, count: int, chat: int = OWNER) -> list[tuple[str, str]]:
    """Send `text`, wait for the `count`-th approval message in the chat; its buttons."""
    await tg.private_message(text, user_id=chat, name="Owner")
    await eventually(lambda: len(approval_messages(tg, chat)) >= count, f"approval message {count}")
    return keyboard(approval_messages(tg, chat)[count - 1])


def message_id_of(tg: FakeTelegram, data: str, chat: int = OWNER) -> int:
    for (chat_id, message_id), stored in tg.messages.items():
        if chat_id == chat and stored.reply_markup and data in json.dumps(stored.reply_markup):
            return message_id
    raise AssertionError(f"no message with the button {data}")


def card_of(tg: FakeTelegram, buttons: list[tuple[str, str]], chat: int = OWNER) -> int:
    """The message showing the approval request behind `buttons`, found by the request's id, which the message
    keeps when it is edited to show the outcome (an expiry may have taken the buttons away already)."""
    approval_id = buttons[0][1].split(":")[1]
    for (chat_id, message_id), stored in tg.messages.items():
        if chat_id == chat and approval_id in stored.visible:
            return message_id
    raise AssertionError(f"no message shows approval request {approval_id}")


async def click_answer(tg: FakeTelegram, update: dict[str, Any]) -> dict[str, Any]:
    """Wait for the answer to a click (answerCallbackQuery), which comes once the click was judged."""
    query_id = update["callback_query"]["id"]
    await eventually(lambda: query_id in tg.answered, f"the answer to click {query_id}")
    [answer] = [call for call in tg.calls("answerCallbackQuery") if call["callback_query_id"] == query_id]
    return answer


def edited_to(tg: FakeTelegram, message_id: int, chat: int = OWNER) -> Callable[[], bool]:
    def check() -> bool:
        stored = tg.messages[(chat, message_id)]
        return not stored.reply_markup and "Approval required" not in stored.visible

    return check


async def test_deny_runs_nothing_and_the_model_hears_it(
    bot: Path, tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg = fake_telegram
    fake_llm.script(exec_call("touch denied.txt"), "Understood, I did not run it.")
    buttons = await ask_for(tg, "try this", 1)
    await tg.callback_query(buttons[-1][1], message_id=card_of(tg, buttons), chat_id=OWNER, user_id=OWNER)
    await eventually(lambda: "Understood, I did not run it." in tg.sent.get(OWNER, []), "the final answer")
    assert not (tmp_path / "ws" / "main" / "denied.txt").exists()
    assert tool_result(fake_llm, 1)["status"] == "denied"


async def test_allow_always_lets_that_exact_command_run_unasked(
    bot: Path, tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg = fake_telegram
    fake_llm.script(
        exec_call("touch always.txt"), "First.",
        exec_call("touch always.txt"), "Second, unasked.",
        exec_call("touch other.txt"), "Third.",
    )  # fmt: skip
    buttons = await ask_for(tg, "one", 1)
    await tg.callback_query(buttons[1][1], message_id=card_of(tg, buttons), chat_id=OWNER, user_id=OWNER)
    await eventually(lambda: "First." in tg.sent.get(OWNER, []), "the first answer")
    await tg.private_message("two", user_id=OWNER, name="Owner")
    await eventually(lambda: "Second, unasked." in tg.sent.get(OWNER, []), "the second answer")
    assert len(approval_messages(tg, OWNER)) == 1  # not asked again
    assert tool_result(fake_llm, 3)["status"] == "ok"
    other = await ask_for(tg, "three", 2)  # a different command still asks
    await tg.callback_query(other[-1][1], message_id=card_of(tg, other), chat_id=OWNER, user_id=OWNER)  # Deny
    await eventually(lambda: "Third." in tg.sent.get(OWNER, []), "the third answer")
    assert tool_result(fake_llm, 5)["status"] == "denied"
    assert not (tmp_path / "ws" / "main" / "other.txt").exists()


async def test_approve_command_is_the_text_fallback(
    bot: Path, tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg = fake_telegram
    fake_llm.script(exec_call("touch by-text.txt"), "Done by text.")
    buttons = await ask_for(tg, "go", 1)
    approval_id = buttons[0][1].split(":")[1]
    # A stranger learns nothing: a real request's id and a made-up one get the same answer.
    await tg.private_message(f"/approve {approval_id[:6]} allow-once", user_id=STRANGER, name="Stranger")
    await tg.private_message("/approve 0000ff allow-once", user_id=STRANGER, name="Stranger")
    await eventually(lambda: len(tg.sent.get(STRANGER, [])) == 2, "the stranger's answers")
    assert tg.sent[STRANGER] == ["This approval request is unknown or no longer pending."] * 2
    await tg.private_message(f"/approve {approval_id[:6]} once", user_id=OWNER, name="Owner")
    await eventually(lambda: "Done by text." in tg.sent.get(OWNER, []), "the final answer")
    assert (tmp_path / "ws" / "main" / "by-text.txt").exists()


async def test_a_button_the_agent_sent_comes_back_to_the_session(
    bot: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg = fake_telegram
    send = {"action": "send", "text": "Pick one", "buttons": [[{"label": "Tea", "value": "tea please"}]]}
    fake_llm.script(Reply.tool_calls(ToolCallSpec("message", send)), "Asked.", "Tea it is.", "Later.")
    await tg.private_message("offer me a drink", user_id=OWNER, name="Owner")
    await eventually(lambda: "Asked." in tg.sent.get(OWNER, []), "the first answer")
    assert tg.sent[OWNER][0] == "Pick one"
    click = await tg.callback_query(
        "tea please", message_id=message_id_of(tg, "tea please"), chat_id=OWNER, user_id=OWNER
    )
    await eventually(lambda: "Tea it is." in tg.sent.get(OWNER, []), "the answer to the click")
    again = await tg.redeliver(click)  # the same click delivered again: not a second message
    await tg.acknowledged(again)
    # One chat's answers go out in order: an answer to the repeated click would come before this one's.
    await tg.private_message("and later?", user_id=OWNER, name="Owner")
    await eventually(lambda: "Later." in tg.sent.get(OWNER, []), "the answer to a later message")
    assert len(fake_llm.requests) == 4 and tg.sent[OWNER] == ["Pick one", "Asked.", "Tea it is.", "Later."]
    tea = fake_llm.requests[2].body["messages"]
    assert tea[-1]["role"] == "user" and "tea please" in json.dumps(tea[-1])
    assert tea[0]["role"] == "system" and len(tea) > 3  # the same session: the earlier turn is in it


async def test_a_button_whose_value_looks_like_a_command_is_data(
    bot: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg = fake_telegram
    values = ["/new", "/approve 0123abcd allow-always", "/stop"]
    send = {
        "action": "send",
        "text": "Pick one",
        "buttons": [[{"label": f"B{n}", "value": v} for n, v in enumerate(values)]],
    }
    fake_llm.script(Reply.tool_calls(ToolCallSpec("message", send)), "Asked.", "Noted 0.", "Noted 1.", "Noted 2.")
    await tg.private_message("offer me choices", user_id=OWNER, name="Owner")
    await eventually(lambda: "Asked." in tg.sent.get(OWNER, []), "the first answer")
    for number, value in enumerate(values):
        await tg.callback_query(value, message_id=message_id_of(tg, value), chat_id=OWNER, user_id=OWNER)
        await eventually(lambda n=number: f"Noted {n}." in tg.sent.get(OWNER, []), f"the answer to click {number}")
    # Each click reached the model as the button's value, marked as such, in the same session: no command ran.
    assert asked(fake_llm)[-3:] == [f"[tapped the button with the value: {value}]" for value in values]
    assert len(fake_llm.requests[-1].body["messages"]) > 6  # /new would have started an empty session


async def run_cli(*args: str) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await process.communicate()
    return process.returncode or 0, out.decode()


async def test_the_cli_lists_and_decides_what_waits(
    bot: Path, tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg = fake_telegram
    fake_llm.script(exec_call("touch by-cli.txt"), "Done from the CLI.")
    buttons = await ask_for(tg, "please", 1)
    approval_id = buttons[0][1].split(":")[1]
    code, out = await run_cli("approvals", "list", "--config", str(bot))
    assert code == 0 and approval_id in out and "touch by-cli.txt" in out
    code, out = await run_cli("approvals", "approve", approval_id[:5], "--config", str(bot))
    assert code == 0, out
    await eventually(lambda: "Done from the CLI." in tg.sent.get(OWNER, []), "the final answer")
    assert (tmp_path / "ws" / "main" / "by-cli.txt").exists()
    code, out = await run_cli("approvals", "deny", approval_id, "--config", str(bot))
    assert code == 1 and "No pending approval request" in out  # decided already


async def test_an_answer_already_sent_with_the_message_tool_is_not_sent_again(
    bot: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg = fake_telegram
    send = {"action": "send", "text": "The answer is 42."}
    fake_llm.script(Reply.tool_calls(ToolCallSpec("message", send)), "The answer is 42.", "Next.")
    await tg.private_message("what is it?", user_id=OWNER, name="Owner")
    await eventually(lambda: "The answer is 42." in tg.sent.get(OWNER, []), "the answer")
    await tg.private_message("and now?", user_id=OWNER, name="Owner")
    await eventually(lambda: "Next." in tg.sent.get(OWNER, []), "the next answer")
    assert tg.sent[OWNER] == ["The answer is 42.", "Next."]  # once, not twice


async def test_a_command_too_long_for_one_message_is_refused_and_one_that_fits_exactly_is_shown_and_runs(
    bot: Path, tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg = fake_telegram
    fake_llm.script(exec_call("true " + "x" * 4995), "Too long to ask.")
    await tg.private_message("a long one", user_id=OWNER, name="Owner")
    await eventually(lambda: "Too long to ask." in tg.sent.get(OWNER, []), "the final answer")
    assert approval_messages(tg, OWNER) == [] and not any("Approval required" in text for text in tg.sent[OWNER])
    result = tool_result(fake_llm, 1)
    found = re.search(r"\((\d+) characters as shown; telegram shows at most (\d+) ", result["reason"])
    assert result["status"] == "denied" and "too long to show an approver whole" in result["reason"]
    assert found is not None and int(found.group(1)) == 5000 and "split it into shorter" in result["reason"]
    code, out = await run_cli("approvals", "list", "--all", "--config", str(bot))
    assert code == 0 and out.strip() == "No pending approval requests."  # nothing was stored

    room = int(found.group(2))  # the most a card in this chat holds: a command of exactly that fills 4096
    fits = "true " + "x" * (room - 5)
    fake_llm.script(exec_call(fits), "Ran the long one.")
    buttons = await ask_for(tg, "an exact one", 1)
    [card] = [call for call in tg.calls("sendMessage") if "Approval required" in call["text"]]
    assert "reply_markup" in card and fits in card["text"]  # one message: the whole command and its buttons
    await tg.callback_query(buttons[0][1], message_id=card_of(tg, buttons), chat_id=OWNER, user_id=OWNER)
    await eventually(lambda: "Ran the long one." in tg.sent.get(OWNER, []), "the second answer")
    assert tool_result(fake_llm, 3)["status"] == "ok"
