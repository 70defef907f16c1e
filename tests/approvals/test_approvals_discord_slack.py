"""Exec approvals through a real `bot run` on Discord (discord.py against the fake Discord) and on Slack (slack-bolt
in Socket Mode against the fake Slack): the buttons, a refusal only the clicker sees, the command running once an
approver allows it, and the request's message edited to show the outcome without buttons."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fakes.discord import FakeDiscord
from fakes.llm import FakeLLM, Reply, ToolCallSpec
from fakes.slack import FakeSlack, dm_channel
from helpers import bot_run, eventually

SLACK_OWNER = "U0OWNER01"
SLACK_STRANGER = "U0STRANGE1"


def base(tmp_path: Path, llm: FakeLLM, owner: str) -> dict[str, Any]:
    return {
        "defaults": {"model": "fake/m", "workspace_root": str(tmp_path / "ws")},
        "providers": {"fake": {"kind": "openai", "base_url": llm.openai_base_url}},
        "owners": [owner],
        "tools": {"non_owner": {"allow": ["*"]}},  # strangers may ask for commands here: an approver decides
    }


def discord_config(tmp_path: Path, llm: FakeLLM, dc: FakeDiscord) -> dict[str, Any]:
    config = base(tmp_path, llm, f"discord:{dc.alice.id}")
    config["channels"] = {"discord": {"accounts": {"main": {
        "token": dc.token, "api_base_url": dc.root, "gateway_url": dc.gateway_url,
        # A short guild_ready_timeout only makes start quick: the fake sends the guild before anything needs it.
        "guild_ready_timeout": 0.05, "streaming": "off", "dm_policy": "open",
    }}}}  # fmt: skip
    return config


def slack_config(tmp_path: Path, llm: FakeLLM, slack: FakeSlack) -> dict[str, Any]:
    config = base(tmp_path, llm, f"slack:{SLACK_OWNER}")
    config["channels"] = {"slack": {"accounts": {"main": {
        "bot_token": slack.bot_token, "app_token": slack.app_token, "api_base_url": slack.url,
        "streaming": "off", "dm_policy": "open",
    }}}}  # fmt: skip
    return config


def exec_then(llm: FakeLLM, command: str, answer: str) -> None:
    llm.script(Reply.tool_calls(ToolCallSpec("exec", {"command": command})), answer)


def last_tool_result(llm: FakeLLM) -> dict[str, Any]:
    message = llm.requests[-1].body["messages"][-1]
    assert message["role"] == "tool"
    result: dict[str, Any] = json.loads(message["content"])
    return result


async def test_discord_approval_buttons_refuse_a_stranger_and_run_for_the_owner(
    tmp_path: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord
) -> None:
    dc = fake_discord
    config = discord_config(tmp_path, fake_llm, dc)
    made = tmp_path / "ws" / "main" / "made-on-discord.txt"
    exec_then(fake_llm, "touch made-on-discord.txt", "Done on Discord.")
    async with bot_run(config, tmp_path, "channel discord account main started"):
        await dc.dm("make the file")
        dm = dc.dm_channel_id(dc.alice)

        def request_message() -> dict[str, Any] | None:
            return next((m for m in dc.messages.values() if "Approval required" in (m.get("content") or "")), None)

        await eventually(lambda: request_message() is not None, "the approval message")
        card = request_message()
        assert card is not None and card["channel_id"] == dm
        buttons = [item for row in card["components"] for item in row["components"]]
        assert [button["label"] for button in buttons] == ["Allow once", "Allow always", "Deny"]
        allow_once = buttons[0]["custom_id"]
        assert allow_once.startswith("ap:") and allow_once.endswith(":o")

        await dc.click(card["id"], allow_once, user=dc.bob)  # not an approver
        await eventually(lambda: len(dc.interaction_callbacks) >= 1, "the answer to bob's click")
        _, refusal = dc.interaction_callbacks[0]
        assert refusal["type"] == 4 and refusal["data"]["flags"] == 64  # a message only bob sees
        assert refusal["data"]["content"] == "You are not authorized to approve this."
        assert not made.exists() and len(fake_llm.requests) == 1

        # Alice's click must still find the request pending: had bob's counted, hers would be refused as too late.
        await dc.click(card["id"], allow_once, user=dc.alice)
        await eventually(lambda: len(dc.interaction_callbacks) >= 2, "the answer to alice's click")
        assert dc.interaction_callbacks[1][1] == {"type": 6}  # taken: no notice for her
        await eventually(lambda: "Done on Discord." in dc.texts(dm), "the final answer")
        assert made.exists() and last_tool_result(fake_llm)["status"] == "ok"
        await eventually(lambda: not dc.messages[card["id"]].get("components"), "the buttons removed")
        assert "Allowed (once) by Alice" in dc.messages[card["id"]]["content"]


async def test_slack_approval_buttons_refuse_a_stranger_and_run_for_the_owner(
    tmp_path: Path, fake_llm: FakeLLM, fake_slack: FakeSlack
) -> None:
    slack = fake_slack
    config = slack_config(tmp_path, fake_llm, slack)
    made = tmp_path / "ws" / "main" / "made-on-slack.txt"
    exec_then(fake_llm, "touch made-on-slack.txt", "Done on Slack.")
    async with bot_run(config, tmp_path, "channel slack account main started"):
        await slack.dm("make the file", user=SLACK_OWNER)
        where = dm_channel(SLACK_OWNER)

        def request_message() -> dict[str, Any] | None:
            return next((body for body in slack.posted if "Approval required" in json.dumps(body)), None)

        await eventually(lambda: request_message() is not None, "the approval message")
        card = request_message()
        assert card is not None
        buttons = [element for block in card["blocks"] if block["type"] == "actions" for element in block["elements"]]
        assert [button["text"]["text"] for button in buttons] == ["Allow once", "Allow always", "Deny"]
        allow_once = buttons[0]["value"]
        card_ts = next(
            ts for (channel, ts), message in slack.messages.items() if channel == where and message.get("blocks")
        )

        await slack.click(message_ts=card_ts, value=allow_once, channel=where, user=SLACK_STRANGER, name="stranger")
        await slack.wait_for_calls("chat.postEphemeral", 1)
        ephemeral = slack.calls_to("chat.postEphemeral")[0].body
        assert ephemeral["user"] == SLACK_STRANGER and ephemeral["text"] == "You are not authorized to approve this."
        assert not made.exists() and len(fake_llm.requests) == 1

        # The owner's click must still find the request pending: had the stranger's counted, the card would say so.
        await slack.click(message_ts=card_ts, value=allow_once, channel=where, user=SLACK_OWNER, name="owner")
        await eventually(lambda: any(body.get("text") == "Done on Slack." for body in slack.posted), "the answer")
        assert made.exists() and last_tool_result(fake_llm)["status"] == "ok"

        def outcome_shown() -> bool:
            message = json.dumps(slack.messages[(where, card_ts)])
            return "Allowed (once) by owner" in message and '"actions"' not in message

        await eventually(outcome_shown, "the request's message updated without buttons")


# An RLO hiding the real file name, a BOM, a zero-width space and an escape sequence that would repaint a terminal.
HOSTILE = "\ufeffrm -rf ~/\u202efdp.txt\u200b\x1b]0;ok\x07"
HOSTILE_SHOWN = "\\ufeffrm -rf ~/\\u202efdp.txt\\u200b\\x1b]0;ok\\x07"
HIDDEN = "\ufeff\u202e\u200b\x1b\x07"
WARNING = "This command holds invisible or control characters, shown escaped"


async def test_discord_shows_hidden_characters_escaped_on_the_card_and_its_outcome(
    tmp_path: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord
) -> None:
    dc = fake_discord
    exec_then(fake_llm, HOSTILE, "Not run on Discord.")
    async with bot_run(discord_config(tmp_path, fake_llm, dc), tmp_path, "channel discord account main started"):
        await dc.dm("tidy up")
        dm = dc.dm_channel_id(dc.alice)

        def card() -> dict[str, Any] | None:
            return next((m for m in dc.messages.values() if HOSTILE_SHOWN in (m.get("content") or "")), None)

        await eventually(lambda: card() is not None, "the approval message")
        shown = card()
        assert shown is not None and WARNING in shown["content"]
        assert not any(char in shown["content"] for char in HIDDEN)
        deny = [item for row in shown["components"] for item in row["components"]][-1]["custom_id"]
        await dc.click(shown["id"], deny, user=dc.alice)
        await eventually(lambda: "Not run on Discord." in dc.texts(dm), "the final answer")
        assert last_tool_result(fake_llm)["status"] == "denied"
        await eventually(lambda: not dc.messages[shown["id"]].get("components"), "the buttons removed")
        outcome = dc.messages[shown["id"]]["content"]
        assert "Denied by Alice" in outcome and HOSTILE_SHOWN in outcome and WARNING in outcome


async def test_slack_shows_hidden_characters_escaped_on_the_card_and_its_outcome(
    tmp_path: Path, fake_llm: FakeLLM, fake_slack: FakeSlack
) -> None:
    slack = fake_slack
    exec_then(fake_llm, HOSTILE, "Not run on Slack.")
    async with bot_run(slack_config(tmp_path, fake_llm, slack), tmp_path, "channel slack account main started"):
        await slack.dm("tidy up", user=SLACK_OWNER)
        where = dm_channel(SLACK_OWNER)

        def card() -> dict[str, Any] | None:
            return next((body for body in slack.posted if "Approval required" in json.dumps(body)), None)

        await eventually(lambda: card() is not None, "the approval message")
        posted = card()
        assert posted is not None
        texts = [posted["text"]] + [block["text"]["text"] for block in posted["blocks"] if block["type"] == "section"]
        assert all(HOSTILE_SHOWN in text and WARNING in text for text in texts)
        assert not any(char in text for text in texts for char in HIDDEN)
        deny = [e for block in posted["blocks"] if block["type"] == "actions" for e in block["elements"]][-1]["value"]
        card_ts = next(
            ts for (channel, ts), message in slack.messages.items() if channel == where and message.get("blocks")
        )
        await slack.click(message_ts=card_ts, value=deny, channel=where, user=SLACK_OWNER, name="owner")
        await eventually(lambda: any(body.get("text") == "Not run on Slack." for body in slack.posted), "the answer")
        assert last_tool_result(fake_llm)["status"] == "denied"

        def outcome_shown() -> bool:
            message = json.dumps(slack.messages[(where, card_ts)])
            return "Denied by owner" in message and '"actions"' not in message

        await eventually(outcome_shown, "the request's message updated without buttons")
        assert HOSTILE_SHOWN in slack.messages[(where, card_ts)]["text"]
