"""Exec approvals through a real `bot run` on each platform (its real SDK against its fake server, the fake LLM
scripting exec calls): the card's buttons, a refusal only the clicker sees when someone who is not an approver clicks,
the command running once the owner allows it, the card edited to the outcome without buttons, a click replayed after
it deciding nothing, and a command's hidden characters shown escaped with a warning on the card and its outcome.
What is asked only on Telegram (deny, allow always, `/approve`, the agent's own buttons, the CLI, expiry, restarts,
the approvers' DMs, a command too long for one message): test_approvals_telegram*.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fakes.llm import FakeLLM, Reply, ToolCallSpec
from helpers import bot_run, eventually
from platforms import Platform, Shown

LABELS = ["Allow once", "Allow always", "Deny"]
# An RLO hiding the real file name, a BOM, a zero-width space, escape sequences that would repaint a terminal (or
# return to the start of its line) and a bell.
HOSTILE = "\ufeffrm -rf ~/\u202efdp.txt\u200b\x1b[2K\r; echo ok\x1b]0;ok\x07"
HOSTILE_SHOWN = "\\ufeffrm -rf ~/\\u202efdp.txt\\u200b\\x1b[2K\\x0d; echo ok\\x1b]0;ok\\x07"
HIDDEN = "\ufeff\u202e\u200b\x1b\r\x07"
WARNING = "⚠ This command holds invisible or control characters, shown escaped"
# the escapes the warning names, each once, in the order they first appear (code spans on every platform)
NAMED = "(\\ufeff, \\u202e, \\u200b, \\x1b, \\x0d, \\x07)"


def config(platform: Platform, tmp_path: Path, llm: FakeLLM) -> dict[str, Any]:
    # strangers may ask for commands here: an approver decides
    account = {"streaming": "off", "dm_policy": "open"}
    return platform.config(tmp_path, llm, account, tools={"non_owner": {"allow": ["*"]}})


def exec_then(llm: FakeLLM, command: str, answer: str) -> None:
    llm.script(Reply.tool_calls(ToolCallSpec("exec", {"command": command})), answer)


def tool_result(llm: FakeLLM, request: int) -> dict[str, Any]:
    """The exec result the model got in its `request`-th call (0-based)."""
    message = llm.requests[request].body["messages"][-1]
    assert message["role"] == "tool"
    result: dict[str, Any] = json.loads(message["content"])
    return result


def decided(platform: Platform, card: Shown) -> bool:
    """Whether the card was edited to show the outcome: no buttons, no request."""
    now = platform.message(card)
    return not now.buttons and "Approval required" not in now.text


async def test_only_an_approver_can_allow_and_then_the_command_runs(
    platform: Platform, tmp_path: Path, fake_llm: FakeLLM
) -> None:
    command = "touch made.txt && echo created"
    made = tmp_path / "ws" / "main" / "made.txt"
    exec_then(fake_llm, command, "Made the file.")
    async with bot_run(config(platform, tmp_path, fake_llm), tmp_path, platform.started):
        await platform.dm("make a file please")
        card = await platform.wait_message(lambda message: bool(message.buttons), "the approval request")  # the DM
        assert [button.label for button in card.buttons] == LABELS
        assert all(button.value.startswith("ap:") and len(button.value.encode()) <= 64 for button in card.buttons)
        allow_once = card.buttons[0].value
        assert allow_once.endswith(":o")
        assert "Approval required" in card.text and command in card.text
        assert platform.escaped(command) in card.sent  # the command as data in the platform's markup

        # Someone who is not an approver clicks Allow: a notice only they see, and nothing runs.
        stranger = await platform.click(card, allow_once, platform.stranger)
        assert await platform.refusal(stranger) == "You are not authorized to approve this."
        assert not made.exists() and len(fake_llm.requests) == 1

        # The owner clicks Allow once: the request was still pending (the stranger's click changed nothing), so it
        # counts; it runs, the model reads its output, the card shows that the owner allowed it.
        await platform.taken(await platform.click(card, allow_once, platform.owner))  # no notice: the click counted
        await platform.wait_said(lambda said: "Made the file." in said)
        assert made.exists()
        result = tool_result(fake_llm, 1)
        assert result["status"] == "ok" and "created" in result["output"]
        await eventually(lambda: decided(platform, card), "the card edited to the outcome")
        assert f"Allowed (once) by {platform.owner.name}" in platform.message(card).text

        if platform.stale_clicks:  # the same button again (a replay) decides nothing
            replay = await platform.click(card, allow_once, platform.owner)
            assert "no longer pending" in await platform.refusal(replay)


async def test_hidden_characters_reach_the_card_and_its_outcome_escaped_with_a_warning(
    platform: Platform, tmp_path: Path, fake_llm: FakeLLM
) -> None:
    exec_then(fake_llm, HOSTILE, "Not run.")
    async with bot_run(config(platform, tmp_path, fake_llm), tmp_path, platform.started):
        await platform.dm("tidy up")
        card = await platform.wait_message(lambda message: bool(message.buttons), "the approval request")
        for text in card.texts:  # Slack's notification text and each section of the card alike
            assert HOSTILE_SHOWN in text and WARNING in text and NAMED in text.replace("`", "")
            assert not any(char in text for char in HIDDEN)
        await platform.click(card, card.buttons[-1].value, platform.owner)  # Deny
        await platform.wait_said(lambda said: "Not run." in said)
        assert tool_result(fake_llm, 1)["status"] == "denied"
        await eventually(lambda: decided(platform, card), "the card edited to the outcome")
        outcome = platform.message(card)
        assert f"Denied by {platform.owner.name}" in outcome.text
        for text in outcome.texts:
            assert HOSTILE_SHOWN in text and WARNING in text
            assert not any(char in text for char in HIDDEN)
