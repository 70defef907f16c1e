"""The message tool: its schema narrowed to each channel and run, its checks (where a run may act, which messages
it may edit or delete), its calls to the gateway, what it records."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fakes.web import PNG, FakeWeb
from pydantic import ValidationError

from agent.providers.base import SchemaDialect
from bot.config.settings import AgentConfig, MessageConfig
from channels import discord, slack, telegram
from channels.base import CONSOLE, Capabilities, ChatTarget, OutboundMessage, Poll
from routing import Peer
from tools.base import CrossChat, RunInfo, ToolContext, ToolResult, invoke
from tools.message import MAX_OWN_PER_SESSION, MAX_SENT_PER_SESSION, MessageTool, SentMessage, build_schema
from tools.schema import normalize_schema, tool_schema
from tools.web import WebFetch

DIALECTS: tuple[SchemaDialect, ...] = ("openai", "anthropic", "gemini")
SESSION = "agent:main:telegram:direct:1"
HERE = ChatTarget(channel="telegram", account="default", peer=Peer("direct", "1"))
GROUP = ChatTarget(channel="telegram", account="default", peer=Peer("group", "-100"))
GROUP_SESSION = "agent:main:telegram:group:-100"
ONLY_HERE = "may only act in the chat it was started from"
NOT_OURS = "works only on a message sent in this conversation"
# Telegram and Discord can do everything; Slack has no native polls.
RICH_ACTIONS = ["send", "reply", "edit", "delete", "react", "thread-create", "poll"]
RICH_PROPERTIES = {
    "action", "text", "to", "message_id", "buttons", "emoji", "thread_id", "thread_name", "media",
    "poll_question", "poll_options",
}  # fmt: skip
NO_POLLS = {"poll_question", "poll_options"}
PLAIN_PROPERTIES = {"action", "text", "to", "message_id"}
CHANNEL_CAPS = {
    "telegram": telegram.CAPABILITIES,
    "discord": discord.CAPABILITIES,
    "slack": slack.CAPABILITIES,
    "console": CONSOLE,
}


class RecordingMessenger:
    """The gateway's side of the protocol, reduced to lists of calls and increasing message ids."""

    def __init__(self, caps: dict[tuple[str, str], Capabilities] | None = None) -> None:
        self.caps = caps or {
            ("telegram", "default"): telegram.CAPABILITIES,
            ("telegram", "work"): telegram.CAPABILITIES,
            ("slack", "default"): slack.CAPABILITIES,
            ("plain", "default"): Capabilities(max_text_length=100),
        }
        self.sent: list[tuple[ChatTarget, OutboundMessage]] = []
        self.edited: list[tuple[ChatTarget, str, OutboundMessage]] = []
        self.deleted: list[tuple[ChatTarget, str]] = []
        self.reacted: list[tuple[ChatTarget, str, str]] = []
        self.threads: list[tuple[ChatTarget, str, str | None]] = []
        self.cards: set[tuple[ChatTarget, str]] = set()  # where approval requests are shown
        self.card_questions: list[tuple[ChatTarget, str]] = []
        self.failure: Exception | None = None
        self._next_id = 100

    def capabilities(self, channel: str, account: str) -> Capabilities | None:
        return self.caps.get((channel, account))

    def accounts(self) -> list[tuple[str, str]]:
        return list(self.caps)

    def _maybe_fail(self) -> None:
        if self.failure is not None:
            raise self.failure

    async def send(self, target: ChatTarget, message: OutboundMessage, *, key: str | None = None) -> str | None:
        self._maybe_fail()
        self.sent.append((target, message))
        self._next_id += 1
        return str(self._next_id)

    async def edit(self, target: ChatTarget, message_id: str, message: OutboundMessage) -> None:
        self._maybe_fail()
        self.edited.append((target, message_id, message))

    async def delete(self, target: ChatTarget, message_id: str) -> None:
        self._maybe_fail()
        self.deleted.append((target, message_id))

    async def react(self, target: ChatTarget, message_id: str, emoji: str) -> None:
        self._maybe_fail()
        self.reacted.append((target, message_id, emoji))

    async def create_thread(self, target: ChatTarget, name: str, message_id: str | None = None) -> str:
        self._maybe_fail()
        self.threads.append((target, name, message_id))
        return f"thread-{len(self.threads)}"

    async def is_approval_card(self, target: ChatTarget, message_id: str) -> bool:
        self.card_questions.append((target, message_id))
        return (target.model_copy(update={"thread_id": None}), message_id) in self.cards

    def touched(self) -> bool:
        """Whether any call reached the platform."""
        return bool(self.sent or self.edited or self.deleted or self.reacted or self.threads)


def run_info(caps: Capabilities = telegram.CAPABILITIES, **changes: Any) -> RunInfo:
    """An owner's run in their DM, unless `changes` say otherwise."""
    fields: dict[str, Any] = {
        "agent": "main",
        "session_key": SESSION,
        "channel": "telegram",
        "sender_is_owner": True,
        "capabilities": caps,
        "target": HERE,
        "reply_to": "55",
    }
    fields.update(changes)
    return RunInfo(**fields)


def stranger_run(cross_chat: CrossChat = "owners", **changes: Any) -> RunInfo:
    """A run someone who is not an owner started by mentioning the bot in their group."""
    fields: dict[str, Any] = {
        "session_key": GROUP_SESSION,
        "sender_is_owner": False,
        "sender_id": "777",
        "target": GROUP,
        "reply_to": "55",
        "cross_chat": cross_chat,
    }
    return run_info(**(fields | changes))


def console_run() -> RunInfo:
    return run_info(CONSOLE, channel="console", target=None, reply_to=None, session_key="agent:main:main")


@pytest.fixture
def messenger() -> RecordingMessenger:
    return RecordingMessenger()


@pytest.fixture
def tool(messenger: RecordingMessenger) -> MessageTool:
    return MessageTool(messenger)


async def call(tool: MessageTool, arguments: dict[str, Any], run: RunInfo | None = None) -> ToolResult:
    return await invoke(tool, "call_1", arguments, ToolContext(run or run_info()))


def error_of(result: ToolResult) -> str:
    assert result.is_error, result.text
    assert result.details["status"] == "error"
    assert result.details["tool"] == "message"
    message: str = result.details["error"]
    return message


def payload_of(result: ToolResult) -> dict[str, Any]:
    assert not result.is_error, result.text
    details: dict[str, Any] = result.details
    return details


def walk(node: Any) -> list[dict[str, Any]]:
    """Every dict in a schema tree."""
    if isinstance(node, dict):
        return [node, *(found for value in node.values() for found in walk(value))]
    if isinstance(node, list):
        return [found for value in node for found in walk(value)]
    return []


# --- the schema -------------------------------------------------------------------------------------------------


def test_metadata(tool: MessageTool) -> None:
    assert (tool.name, tool.label, tool.group) == ("message", "Message", "group:messaging")
    assert not tool.owner_only


@pytest.mark.parametrize("channel", ["telegram", "discord", "slack"])
def test_schema_of_a_rich_channel(tool: MessageTool, channel: str) -> None:
    caps = CHANNEL_CAPS[channel]
    schema = tool.json_schema(run_info(caps, channel=channel))
    assert schema["type"] == "object"
    assert schema["required"] == ["action"]
    polls = channel != "slack"
    assert schema["properties"]["action"]["enum"] == (RICH_ACTIONS if polls else RICH_ACTIONS[:-1])
    assert set(schema["properties"]) == (RICH_PROPERTIES if polls else RICH_PROPERTIES - NO_POLLS)
    assert str(caps.max_text_length) in schema["properties"]["text"]["description"]
    assert f"at most {caps.max_upload_bytes // 1_000_000} MB" in schema["properties"]["media"]["description"]
    button = schema["properties"]["buttons"]["items"]["items"]
    assert button["type"] == "object"
    assert set(button["properties"]) == {"label", "value", "style"}
    assert button["required"] == ["label", "value"]
    assert "64 bytes" in button["properties"]["value"]["description"]
    assert "person who clicked" in schema["properties"]["buttons"]["description"]


def test_schema_of_the_console(tool: MessageTool) -> None:
    schema = tool.json_schema(console_run())
    assert schema["properties"]["action"]["enum"] == ["send", "reply"]
    assert set(schema["properties"]) == PLAIN_PROPERTIES
    assert str(CONSOLE.max_text_length) in schema["properties"]["text"]["description"]
    assert tool.json_schema(None) == build_schema(Capabilities(), tool.messenger.accounts())
    assert tool.json_schema()["properties"]["action"]["enum"] == ["send", "reply"]


def test_schema_follows_each_capability(tool: MessageTool) -> None:
    def shape(**flags: Any) -> tuple[list[str], set[str]]:
        schema = tool.json_schema(run_info(Capabilities(**flags)))
        return schema["properties"]["action"]["enum"], set(schema["properties"])

    assert shape(edit=True) == (["send", "reply", "edit"], PLAIN_PROPERTIES)
    assert shape(delete=True) == (["send", "reply", "delete"], PLAIN_PROPERTIES)
    assert shape(reactions=True) == (["send", "reply", "react"], PLAIN_PROPERTIES | {"emoji"})
    assert shape(buttons=True) == (["send", "reply"], PLAIN_PROPERTIES | {"buttons"})
    assert shape(threads=True) == (["send", "reply", "thread-create"], PLAIN_PROPERTIES | {"thread_id", "thread_name"})
    assert shape(polls=True) == (["send", "reply", "poll"], PLAIN_PROPERTIES | {"poll_question", "poll_options"})


def test_every_property_is_described(tool: MessageTool) -> None:
    schema = tool.json_schema(run_info(Capabilities(buttons=True, reactions=True, threads=True, polls=True)))
    for name, prop in schema["properties"].items():
        assert len(prop.get("description", "")) > 20, name
    assert "telegram/default" in schema["properties"]["to"]["description"]


@pytest.mark.parametrize("channel", sorted(CHANNEL_CAPS))
@pytest.mark.parametrize("dialect", DIALECTS)
def test_every_schema_normalizes_for_every_provider(tool: MessageTool, channel: str, dialect: SchemaDialect) -> None:
    run = run_info(CHANNEL_CAPS[channel], channel=channel)
    raw = tool.json_schema(run)
    normalized = normalize_schema(raw, dialect)
    assert normalized == tool_schema(tool, dialect, run)
    assert normalized["type"] == "object"
    assert normalized["required"] == ["action"]
    assert set(normalized["properties"]) == set(raw["properties"])
    nodes = walk(normalized)
    assert not any("$ref" in node or "$defs" in node or "definitions" in node for node in nodes)
    assert not any("title" in node and isinstance(node["title"], str) for node in nodes)
    for prop in normalized["properties"].values():
        assert isinstance(prop["type"], str)
        assert prop["description"]
    if dialect == "gemini":
        assert not any("additionalProperties" in node or "default" in node for node in nodes)
    else:
        assert normalized == raw  # nothing for openai or anthropic to rewrite
    if "buttons" in normalized["properties"]:
        button = normalized["properties"]["buttons"]["items"]["items"]
        assert button["type"] == "object"
        assert button["required"] == ["label", "value"]


# --- sending ----------------------------------------------------------------------------------------------------


async def test_send_to_this_chat(tool: MessageTool, messenger: RecordingMessenger) -> None:
    buttons = [
        [{"label": "Yes", "value": "yes", "style": "success"}, {"label": "No", "value": "no"}],
        [{"label": "Later", "value": "later", "style": "primary"}],
    ]
    result = await call(tool, {"action": "send", "text": "Shall I?", "buttons": buttons})
    assert not result.is_error, result.text
    assert result.details == {"status": "ok", "action": "send", "message_id": "101", "to": "telegram:direct:1"}
    [(target, message)] = messenger.sent
    assert target == HERE
    assert message.text == "Shall I?"
    assert message.reply_to is None
    assert [[(b.label, b.value, b.style) for b in row] for row in message.buttons] == [
        [("Yes", "yes", "success"), ("No", "no", "secondary")],
        [("Later", "later", "primary")],
    ]


async def test_send_into_a_thread(tool: MessageTool, messenger: RecordingMessenger) -> None:
    result = await call(tool, {"action": "send", "text": "in the topic", "thread_id": "7"})
    assert result.details["thread_id"] == "7"
    [(target, message)] = messenger.sent
    assert target == HERE.model_copy(update={"thread_id": "7"})
    assert message.thread_id == "7"


async def test_reply_defaults_to_the_message_being_answered(tool: MessageTool, messenger: RecordingMessenger) -> None:
    threaded = HERE.model_copy(update={"thread_id": "9"})
    result = await call(tool, {"action": "reply", "text": "on it"}, run_info(target=threaded))
    assert result.details["action"] == "reply"
    assert result.details["message_id"] == "101"
    [(target, message)] = messenger.sent
    assert target == threaded
    assert (message.reply_to, message.thread_id, message.text) == ("55", "9", "on it")


async def test_reply_to_a_named_message(tool: MessageTool, messenger: RecordingMessenger) -> None:
    await call(tool, {"action": "reply", "text": "this one", "message_id": "42"})
    assert messenger.sent[0][1].reply_to == "42"


async def test_reply_without_a_message_to_answer(tool: MessageTool, messenger: RecordingMessenger) -> None:
    assert "message_id" in error_of(await call(tool, {"action": "reply", "text": "hm"}, run_info(reply_to=None)))
    assert messenger.sent == []


async def test_edit_delete_react(tool: MessageTool, messenger: RecordingMessenger) -> None:
    await call(tool, {"action": "send", "text": "draft"})  # 101
    await call(tool, {"action": "send", "text": "oops"})  # 102
    edited = await call(
        tool, {"action": "edit", "message_id": "101", "text": "fixed", "buttons": [[{"label": "A", "value": "a"}]]}
    )
    deleted = await call(tool, {"action": "delete", "message_id": "102"})
    reacted = await call(tool, {"action": "react", "message_id": "79", "emoji": "👍"})  # anyone's message
    for result, action, message_id in ((edited, "edit", "101"), (deleted, "delete", "102"), (reacted, "react", "79")):
        assert result.details == {"status": "ok", "action": action, "message_id": message_id, "to": "telegram:direct:1"}
    [(target, message_id, message)] = messenger.edited
    assert (target, message_id, message.text, message.buttons[0][0].value) == (HERE, "101", "fixed", "a")
    assert messenger.deleted == [(HERE, "102")]
    assert messenger.reacted == [(HERE, "79", "👍")]
    assert len(messenger.sent) == 2


# --- what is refused --------------------------------------------------------------------------------------------


async def test_react_defaults_to_the_message_being_answered(tool: MessageTool, messenger: RecordingMessenger) -> None:
    await call(tool, {"action": "react", "emoji": "👍"})
    assert messenger.reacted == [(HERE, "55", "👍")]
    error = error_of(await call(tool, {"action": "react", "emoji": "👍"}, run_info(reply_to=None)))
    assert "needs message_id" in error  # nothing being answered: it must be named


async def test_console_cannot_edit_delete_or_react(tool: MessageTool, messenger: RecordingMessenger) -> None:
    run = console_run()
    for action in ("edit", "delete", "react", "thread-create", "poll"):
        error = error_of(await call(tool, {"action": action, "message_id": "1", "text": "x", "emoji": "👍"}, run))
        assert "console" in error
        assert "send, reply" in error
    assert not (messenger.edited or messenger.deleted or messenger.reacted)


async def test_slack_cannot_poll(tool: MessageTool) -> None:
    run = run_info(slack.CAPABILITIES, channel="slack")
    error = error_of(await call(tool, {"action": "poll", "poll_question": "?", "poll_options": ["a", "b"]}, run))
    assert "send, reply, edit, delete, react, thread-create" in error


async def test_thread_create_starts_a_thread_and_says_its_id(tool: MessageTool, messenger: RecordingMessenger) -> None:
    result = payload_of(await call(tool, {"action": "thread-create", "thread_name": " plans ", "message_id": "9"}))
    assert (result["thread_id"], messenger.threads) == ("thread-1", [(HERE, "plans", "9")])
    assert "thread_name" in error_of(await call(tool, {"action": "thread-create"}))


async def test_a_poll_is_sent_with_its_options_trimmed(tool: MessageTool, messenger: RecordingMessenger) -> None:
    polls = run_info(Capabilities(polls=True))
    await call(tool, {"action": "poll", "poll_question": "Lunch?", "poll_options": [" pizza", "sushi ", ""]}, polls)
    [(_, message)] = messenger.sent
    assert message.poll == Poll(question="Lunch?", options=["pizza", "sushi"])
    one = {"action": "poll", "poll_question": "?", "poll_options": ["a"]}
    assert "2 to 10 poll_options (got 1)" in error_of(await call(tool, one, polls))


async def test_buttons_on_the_console(tool: MessageTool, messenger: RecordingMessenger) -> None:
    arguments = {
        "action": "send",
        "text": "pick",
        "buttons": [[{"label": "A", "value": "a"}]],
        "to": "telegram:direct:1",
    }
    assert "no buttons" in error_of(await call(tool, arguments, console_run()))
    assert messenger.sent == []


@pytest.mark.parametrize("value", ["ap:approve:123", "AP:deny", " ap:x"])
async def test_approval_values_are_reserved(tool: MessageTool, messenger: RecordingMessenger, value: str) -> None:
    error = error_of(
        await call(tool, {"action": "send", "text": "ok?", "buttons": [[{"label": "Approve", "value": value}]]})
    )
    assert "reserved for approvals" in error
    assert messenger.sent == []


@pytest.mark.parametrize(
    ("value", "ok"), [("a" * 64, True), ("é" * 32, True), ("a" * 65, False), ("é" * 33, False), ("", False)]
)
async def test_button_values_fit_64_bytes(
    tool: MessageTool, messenger: RecordingMessenger, value: str, ok: bool
) -> None:
    result = await call(tool, {"action": "send", "text": "pick", "buttons": [[{"label": "A", "value": value}]]})
    if ok:
        assert not result.is_error, result.text
        assert messenger.sent[0][1].buttons[0][0].value == value
    else:
        assert "bytes" in error_of(result) or "value" in error_of(result)
        assert messenger.sent == []


async def test_button_labels_and_styles_are_checked(tool: MessageTool) -> None:
    error_of(await call(tool, {"action": "send", "text": "x", "buttons": [[{"label": "", "value": "a"}]]}))
    error_of(await call(tool, {"action": "send", "text": "x", "buttons": [[{"label": "L" * 65, "value": "a"}]]}))
    error_of(
        await call(tool, {"action": "send", "text": "x", "buttons": [[{"label": "A", "value": "a", "style": "red"}]]})
    )


async def test_text_over_the_limit_is_refused_not_chunked(tool: MessageTool, messenger: RecordingMessenger) -> None:
    assert not (await call(tool, {"action": "send", "text": "x" * 4096})).is_error
    error = error_of(await call(tool, {"action": "send", "text": "x" * 4097}))
    assert "4096" in error
    error = error_of(await call(tool, {"action": "edit", "message_id": "1", "text": "x" * 4097}))
    assert "4096" in error
    assert len(messenger.sent) == 1
    assert messenger.edited == []


@pytest.mark.parametrize(
    ("arguments", "needed"),
    [
        ({"action": "send"}, "needs text"),
        ({"action": "send", "text": "   "}, "needs text"),
        ({"action": "reply"}, "needs text"),
        ({"action": "edit", "message_id": "1"}, "needs text"),
        ({"action": "edit", "text": "new"}, "needs message_id"),
        ({"action": "delete"}, "needs message_id"),
        ({"action": "react", "message_id": "1"}, "needs emoji"),
    ],
)
async def test_missing_arguments(
    tool: MessageTool, messenger: RecordingMessenger, arguments: dict[str, Any], needed: str
) -> None:
    assert needed in error_of(await call(tool, arguments))
    assert not (messenger.sent or messenger.edited or messenger.deleted or messenger.reacted)


async def test_unknown_action_is_a_validation_error(tool: MessageTool) -> None:
    assert "action" in error_of(await call(tool, {"action": "shout", "text": "hi"}))


async def test_no_chat_to_send_to(tool: MessageTool) -> None:
    error = error_of(await call(tool, {"action": "send", "text": "hi"}, console_run()))
    assert "this run has no chat to send to" in error


@pytest.mark.parametrize("to", ["discord:channel:1", "telegram/other:direct:1", "slack/work:channel:C1"])
async def test_unknown_account(tool: MessageTool, messenger: RecordingMessenger, to: str) -> None:
    error = error_of(await call(tool, {"action": "send", "text": "hi", "to": to}))
    assert "telegram/default, telegram/work, slack/default, plain/default" in error
    assert messenger.sent == []


@pytest.mark.parametrize("to", ["telegram", "telegram:direct", "telegram:direct:", "telegram:room:1", ":direct:1"])
async def test_malformed_to(tool: MessageTool, messenger: RecordingMessenger, to: str) -> None:
    error_of(await call(tool, {"action": "send", "text": "hi", "to": to}))
    assert messenger.sent == []


# --- other chats ------------------------------------------------------------------------------------------------


async def test_to_another_chat(tool: MessageTool, messenger: RecordingMessenger) -> None:
    result = await call(tool, {"action": "send", "text": "hello", "to": "Slack:channel:C0123"})
    assert result.details["to"] == "slack:channel:C0123"
    result = await call(tool, {"action": "send", "text": "hello", "to": "telegram/work:group:-100"})
    assert result.details["to"] == "telegram/work:group:-100"
    targets = [target for target, _ in messenger.sent]
    assert targets == [
        ChatTarget(channel="slack", account="default", peer=Peer("channel", "C0123")),
        ChatTarget(channel="telegram", account="work", peer=Peer("group", "-100")),
    ]
    assert all(message.reply_to is None for _, message in messenger.sent)


async def test_to_the_current_channel_keeps_the_run_account(tool: MessageTool, messenger: RecordingMessenger) -> None:
    run = run_info(target=HERE.model_copy(update={"account": "work"}))
    await call(tool, {"action": "send", "text": "hi", "to": "telegram:direct:2"}, run)
    await call(tool, {"action": "send", "text": "hi", "to": "slack:direct:U1"}, run)
    assert [(target.channel, target.account) for target, _ in messenger.sent] == [
        ("telegram", "work"),
        ("slack", "default"),
    ]


async def test_another_channel_is_checked_with_its_own_capabilities(
    tool: MessageTool, messenger: RecordingMessenger
) -> None:
    # Telegram allows 4096 characters, Slack 3000.
    assert "3000" in error_of(await call(tool, {"action": "send", "text": "x" * 3500, "to": "slack:channel:C1"}))
    plain = "plain:direct:9"
    assert "no buttons" in error_of(
        await call(tool, {"action": "send", "text": "pick", "to": plain, "buttons": [[{"label": "A", "value": "a"}]]})
    )
    assert "send, reply" in error_of(await call(tool, {"action": "edit", "text": "x", "message_id": "1", "to": plain}))
    assert "no threads" in error_of(await call(tool, {"action": "send", "text": "x", "thread_id": "3", "to": plain}))
    assert "100" in error_of(await call(tool, {"action": "send", "text": "x" * 101, "to": plain}))
    assert not (messenger.sent or messenger.edited)
    # From the console, a richer channel's abilities do not widen what the console offered...
    console = console_run()
    assert "send, reply" in error_of(
        await call(tool, {"action": "edit", "text": "x", "message_id": "1", "to": "slack:channel:C1"}, console)
    )
    # ...but its own limits apply: longer than Slack allows is refused even though the console allows a million.
    assert "3000" in error_of(
        await call(tool, {"action": "send", "text": "x" * 3001, "to": "slack:channel:C1"}, console)
    )
    result = await call(tool, {"action": "send", "text": "x" * 3000, "to": "slack:channel:C1"}, console)
    assert result.details["to"] == "slack:channel:C1"


async def test_reply_in_another_chat_needs_a_message_id(tool: MessageTool, messenger: RecordingMessenger) -> None:
    assert "message_id" in error_of(await call(tool, {"action": "reply", "text": "hi", "to": "slack:channel:C1"}))
    await call(tool, {"action": "reply", "text": "hi", "to": "slack:channel:C1", "message_id": "1.2"})
    assert messenger.sent[0][1].reply_to == "1.2"


# --- failures and recording -------------------------------------------------------------------------------------


async def test_a_platform_failure_is_an_error_result(tool: MessageTool, messenger: RecordingMessenger) -> None:
    tool.sent.remember(SESSION, HERE, "1")  # an answer the gateway delivered: this session's to edit or delete
    messenger.failure = RuntimeError("Bad Request: message to edit not found")
    for arguments in (
        {"action": "send", "text": "hi"},
        {"action": "edit", "message_id": "1", "text": "hi"},
        {"action": "delete", "message_id": "1"},
        {"action": "react", "message_id": "1", "emoji": "👍"},
    ):
        error = error_of(await call(tool, arguments))
        assert "message to edit not found" in error
        assert error.startswith(f"{arguments['action']} failed")
    assert tool.sent.sent_in(SESSION) == []
    messenger.failure = RuntimeError()
    assert "RuntimeError" in error_of(await call(tool, {"action": "send", "text": "hi"}))


async def test_deliveries_are_recorded_per_session(tool: MessageTool) -> None:
    await call(tool, {"action": "send", "text": "first"})
    await call(tool, {"action": "reply", "text": "second"})
    await call(tool, {"action": "send", "text": "elsewhere", "to": "slack:channel:C1"})
    await call(tool, {"action": "react", "message_id": "101", "emoji": "👍"})
    await call(tool, {"action": "delete", "message_id": "101"})
    slack_target = ChatTarget(channel="slack", account="default", peer=Peer("channel", "C1"))
    assert tool.sent.sent_in(SESSION) == [
        SentMessage(target=HERE, message_id="101", text="first"),
        SentMessage(target=HERE, message_id="102", text="second"),
        SentMessage(target=slack_target, message_id="103", text="elsewhere"),
    ]
    await call(tool, {"action": "edit", "message_id": "102", "text": "second, corrected"})
    tool.sent.remember(SESSION, HERE, "999")  # the bot's answer in an earlier run of the session
    await call(tool, {"action": "edit", "message_id": "999", "text": "an older one"})
    assert [(sent.message_id, sent.text) for sent in tool.sent.sent_in(SESSION)] == [
        ("101", "first"),
        ("102", "second, corrected"),
        ("103", "elsewhere"),
        ("999", "an older one"),
    ]
    other = "agent:main:slack:channel:c1"
    await call(tool, {"action": "send", "text": "other"}, run_info(session_key=other))
    assert [sent.text for sent in tool.sent.sent_in(other)] == ["other"]
    tool.sent.forget(SESSION)
    assert tool.sent.sent_in(SESSION) == []
    assert len(tool.sent.sent_in(other)) == 1
    tool.sent.forget("never-seen")


async def test_recording_is_bounded(tool: MessageTool) -> None:
    for index in range(MAX_SENT_PER_SESSION + 10):
        await call(tool, {"action": "send", "text": f"m{index}"})
    recorded = tool.sent.sent_in(SESSION)
    assert len(recorded) == MAX_SENT_PER_SESSION
    assert recorded[0].text == "m10"
    assert recorded[-1].text == f"m{MAX_SENT_PER_SESSION + 9}"


async def test_a_blank_to_means_this_chat(tool: MessageTool, messenger: RecordingMessenger) -> None:
    await call(tool, {"action": "reply", "text": "here", "to": "  "})
    [(target, message)] = messenger.sent
    assert (target, message.reply_to) == (HERE, "55")


async def test_an_edit_outside_the_thread_still_replaces_the_record(tool: MessageTool) -> None:
    await call(tool, {"action": "send", "text": "draft", "thread_id": "7"})
    await call(tool, {"action": "edit", "message_id": "101", "text": "final"})
    [sent] = tool.sent.sent_in(SESSION)
    assert (sent.message_id, sent.text, sent.target.thread_id) == ("101", "final", None)


# --- where a run may act, and which messages it may change -----------------------------------------------------


def test_a_stranger_is_offered_no_other_chat(tool: MessageTool) -> None:
    schema = tool.json_schema(stranger_run())
    assert set(schema["properties"]) == RICH_PROPERTIES - {"to", "thread_id"}
    assert "in this chat only" in schema["properties"]["action"]["description"]
    assert "telegram/default" not in str(schema)  # nor which accounts are running
    owners = tool.json_schema(run_info())
    assert set(owners["properties"]) == RICH_PROPERTIES
    assert "in this chat only" not in owners["properties"]["action"]["description"]


@pytest.mark.parametrize(
    ("cross_chat", "owner", "offered"),
    [("owners", True, True), ("owners", False, False), ("all", False, True), ("none", True, False)],
)
def test_the_schema_offers_to_where_cross_chat_allows(
    tool: MessageTool, cross_chat: CrossChat, owner: bool, offered: bool
) -> None:
    run = run_info(sender_is_owner=owner, cross_chat=cross_chat)
    assert run.acts_anywhere == offered
    assert ("to" in tool.json_schema(run)["properties"]) == offered


def test_the_schema_says_edit_and_delete_are_for_this_conversations_messages(tool: MessageTool) -> None:
    for run in (run_info(), stranger_run()):
        properties = tool.json_schema(run)["properties"]
        assert "sent in this conversation" in properties["message_id"]["description"]
        assert "approval request" in properties["message_id"]["description"]
        assert "'delete' a message sent in this conversation" in properties["action"]["description"]
    assert "sent in this conversation" in MessageTool.description


@pytest.mark.parametrize(
    "arguments",
    [
        pytest.param({"action": "send", "text": "hi", "to": "telegram:direct:1"}, id="another peer"),
        pytest.param({"action": "send", "text": "hi", "to": "telegram/work:group:-100"}, id="another account"),
        pytest.param({"action": "send", "text": "hi", "to": "slack:channel:C1"}, id="another channel"),
        pytest.param({"action": "send", "text": "hi", "thread_id": "7"}, id="another thread"),
        pytest.param({"action": "send", "text": "hi", "to": "discord:channel:1"}, id="an account not running"),
        pytest.param(
            {"action": "reply", "text": "hi", "to": "telegram:direct:1", "message_id": "3"},
            id="reply in the owner's DM",
        ),
        pytest.param(
            {"action": "edit", "text": "hacked", "to": "telegram:direct:1", "message_id": "3"},
            id="edit a guessed id in the owner's DM",
        ),
        pytest.param({"action": "delete", "to": "telegram:direct:1", "message_id": "2"}, id="delete in the owner's DM"),
        pytest.param(
            {"action": "react", "emoji": "👎", "to": "telegram:direct:1", "message_id": "2"},
            id="react in the owner's DM",
        ),
        pytest.param(
            {"action": "thread-create", "thread_name": "x", "to": "telegram:group:-200"}, id="thread elsewhere"
        ),
    ],
)
async def test_a_strangers_run_acts_only_in_its_own_chat(
    tool: MessageTool, messenger: RecordingMessenger, arguments: dict[str, Any]
) -> None:
    error = error_of(await call(tool, arguments, stranger_run()))
    assert ONLY_HERE in error and "telegram:group:-100" in error
    assert "telegram/default" not in error  # the running accounts are not listed to it
    assert not messenger.touched() and messenger.card_questions == []


async def test_a_run_in_a_thread_stays_in_that_thread(tool: MessageTool, messenger: RecordingMessenger) -> None:
    run = stranger_run(target=GROUP.model_copy(update={"thread_id": "9"}))
    assert ONLY_HERE in error_of(await call(tool, {"action": "send", "text": "x", "thread_id": "8"}, run))
    assert ONLY_HERE in error_of(await call(tool, {"action": "send", "text": "x", "to": "telegram:group:-100"}, run))
    assert not messenger.touched()
    assert not (await call(tool, {"action": "send", "text": "x", "thread_id": "9"}, run)).is_error
    assert not (await call(tool, {"action": "send", "text": "x"}, run)).is_error
    assert [target.thread_id for target, _ in messenger.sent] == ["9", "9"]


async def test_a_stranger_may_name_its_own_chat_and_react_to_anyone_there(
    tool: MessageTool, messenger: RecordingMessenger
) -> None:
    run = stranger_run()
    assert not (await call(tool, {"action": "send", "text": "here", "to": "telegram:group:-100"}, run)).is_error
    assert not (await call(tool, {"action": "react", "emoji": "👍"}, run)).is_error  # the message being answered
    assert not (await call(tool, {"action": "react", "emoji": "👍", "message_id": "54"}, run)).is_error
    assert [target for target, _ in messenger.sent] == [GROUP]
    assert messenger.reacted == [(GROUP, "55", "👍"), (GROUP, "54", "👍")]


@pytest.mark.parametrize(
    ("action", "message_id"),
    [
        pytest.param("edit", "3", id="edit a guessed id"),
        pytest.param("delete", "3", id="delete a guessed id"),
        pytest.param("delete", "55", id="delete the person's own message"),
        pytest.param("edit", "40", id="edit the bot's answer in another session"),
        pytest.param("delete", "40", id="delete the bot's answer in another session"),
    ],
)
async def test_a_run_changes_only_messages_its_session_sent(
    tool: MessageTool, messenger: RecordingMessenger, action: str, message_id: str
) -> None:
    tool.sent.remember("agent:main:telegram:group:-100:thread:2", GROUP, "40")  # another session's answer in this chat
    for run in (stranger_run(), stranger_run(sender_is_owner=True)):  # owner or not
        error = error_of(await call(tool, {"action": action, "message_id": message_id, "text": "changed"}, run))
        assert NOT_OURS in error and f"message {message_id} in telegram:group:-100" in error
    assert not messenger.touched()


async def test_an_owners_run_cannot_touch_a_message_in_another_chat_it_did_not_send(
    tool: MessageTool, messenger: RecordingMessenger
) -> None:
    for arguments in (
        {"action": "edit", "text": "x", "to": "telegram:group:-100", "message_id": "5"},
        {"action": "delete", "to": "slack:channel:C1", "message_id": "1.2"},
    ):
        assert NOT_OURS in error_of(await call(tool, arguments))
    assert not messenger.touched()


async def test_no_run_changes_an_approval_card(tool: MessageTool, messenger: RecordingMessenger) -> None:
    messenger.cards = {(HERE, "9"), (GROUP, "60")}
    tool.sent.remember(SESSION, HERE, "9")  # even one the session's record would claim
    tool.sent.remember(GROUP_SESSION, GROUP, "60")
    attempts = [
        (stranger_run(), {"action": "delete", "message_id": "60"}),
        (stranger_run(), {"action": "edit", "message_id": "60", "text": "approved!"}),
        (stranger_run(cross_chat="all"), {"action": "delete", "to": "telegram:direct:1", "message_id": "9"}),
        (run_info(), {"action": "delete", "message_id": "9"}),
        (run_info(), {"action": "edit", "message_id": "9", "text": "approved!"}),
        (run_info(), {"action": "delete", "to": "telegram:group:-100", "message_id": "60"}),
    ]
    for run, arguments in attempts:
        assert "approval request" in error_of(await call(tool, arguments, run))
    assert not messenger.touched()
    assert len(messenger.card_questions) == len(attempts)


async def test_a_stranger_edits_and_deletes_what_its_session_sent(
    tool: MessageTool, messenger: RecordingMessenger
) -> None:
    run = stranger_run()
    sent = await call(tool, {"action": "send", "text": "draft"}, run)
    message_id = sent.details["message_id"]
    assert not (await call(tool, {"action": "edit", "message_id": message_id, "text": "final"}, run)).is_error
    tool.sent.remember(GROUP_SESSION, GROUP, "40")  # the bot's earlier answer to this session, sent by the gateway
    tool.sent.forget(GROUP_SESSION)  # a new run of the session: what it may change is kept
    assert not (await call(tool, {"action": "edit", "message_id": "40", "text": "corrected"}, run)).is_error
    assert not (await call(tool, {"action": "delete", "message_id": message_id}, run)).is_error
    assert NOT_OURS in error_of(await call(tool, {"action": "delete", "message_id": message_id}, run))  # gone
    assert [(target, mid, message.text) for target, mid, message in messenger.edited] == [
        (GROUP, message_id, "final"),
        (GROUP, "40", "corrected"),
    ]
    assert messenger.deleted == [(GROUP, message_id)]


async def test_what_a_session_may_change_is_its_own(tool: MessageTool) -> None:
    await call(tool, {"action": "send", "text": "mine"}, stranger_run())
    assert tool.sent.sent_by(GROUP_SESSION, GROUP, "101")
    assert tool.sent.sent_by(GROUP_SESSION, GROUP.model_copy(update={"thread_id": "4"}), "101")  # same message
    assert not tool.sent.sent_by(SESSION, GROUP, "101")
    assert not tool.sent.sent_by(GROUP_SESSION, HERE, "101")  # the same id in another chat is another message


async def test_an_owners_run_sends_elsewhere_by_default(tool: MessageTool, messenger: RecordingMessenger) -> None:
    result = await call(tool, {"action": "send", "text": "hi", "to": "telegram:group:-100"}, run_info())
    assert result.details["to"] == "telegram:group:-100"
    message_id = result.details["message_id"]
    edit = {"action": "edit", "text": "hi again", "to": "telegram:group:-100", "message_id": message_id}
    assert not (await call(tool, edit, run_info())).is_error  # and may edit what it sent there
    assert [target for target, _ in messenger.sent] == [GROUP]


async def test_cross_chat_all_lets_anyone_send_elsewhere(tool: MessageTool, messenger: RecordingMessenger) -> None:
    result = await call(tool, {"action": "send", "text": "hi", "to": "telegram:direct:1"}, stranger_run("all"))
    assert result.details["to"] == "telegram:direct:1"
    assert [target for target, _ in messenger.sent] == [HERE]


async def test_cross_chat_none_keeps_even_an_owner_in_the_chat(
    tool: MessageTool, messenger: RecordingMessenger
) -> None:
    run = run_info(cross_chat="none")
    assert ONLY_HERE in error_of(await call(tool, {"action": "send", "text": "hi", "to": "slack:channel:C1"}, run))
    assert not messenger.touched()
    assert not (await call(tool, {"action": "send", "text": "hi"}, run)).is_error


async def test_a_run_without_a_chat_that_may_not_leave_it_acts_nowhere(
    tool: MessageTool, messenger: RecordingMessenger
) -> None:
    run = run_info(CONSOLE, channel="console", target=None, sender_is_owner=False)
    error = error_of(await call(tool, {"action": "send", "text": "hi", "to": "telegram:direct:1"}, run))
    assert ONLY_HERE in error
    assert not messenger.touched()


async def test_what_a_session_may_change_is_bounded(tool: MessageTool) -> None:
    for index in range(MAX_OWN_PER_SESSION + 5):
        tool.sent.remember(SESSION, HERE, str(index))
    assert not tool.sent.sent_by(SESSION, HERE, "4")
    assert tool.sent.sent_by(SESSION, HERE, "5")
    assert tool.sent.sent_by(SESSION, HERE, str(MAX_OWN_PER_SESSION + 4))


def test_cross_chat_is_configured_per_agent() -> None:
    assert AgentConfig(id="main").message.cross_chat == "owners"
    assert AgentConfig.model_validate({"id": "main", "message": {"cross_chat": "none"}}).message.cross_chat == "none"
    assert MessageConfig.model_validate({"cross_chat": "all"}).cross_chat == "all"
    with pytest.raises(ValidationError):
        MessageConfig.model_validate({"cross_chat": "everyone"})
    with pytest.raises(ValidationError):
        MessageConfig.model_validate({"cross_chat": "all", "to": "x"})


# --- files -----------------------------------------------------------------------------------------------------------

UPLOADS = Capabilities(files=True, max_upload_bytes=10_000)


async def test_files_from_the_workspace_are_sent_with_the_text_as_caption(
    tool: MessageTool, messenger: RecordingMessenger, tmp_path: Path
) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "chart.png").write_bytes(PNG)
    (tmp_path / "note.ogg").write_bytes(b"OggS")
    run = run_info(UPLOADS, workspace=str(tmp_path))
    result = payload_of(
        await call(tool, {"action": "send", "text": "Both.", "media": ["out/chart.png", "note.ogg"]}, run)
    )
    [(_, message)] = messenger.sent
    assert [(file.name, file.kind, file.mime_type) for file in message.media] == [
        ("chart.png", "image", "image/png"),
        ("note.ogg", "voice", "audio/ogg"),
    ]
    assert message.text == "Both." and result["files"] == ["chart.png", "note.ogg"]


async def test_a_file_from_a_url_is_downloaded_into_the_workspace_first(
    messenger: RecordingMessenger, tmp_path: Path
) -> None:
    async with FakeWeb() as site:
        tool = MessageTool(messenger, fetcher=WebFetch(allow_loopback_first_hop=True))
        run = run_info(UPLOADS, workspace=str(tmp_path))
        await call(tool, {"action": "send", "media": [site.url("/image")]}, run)
        refused = error_of(await call(tool, {"action": "send", "media": [site.url("/redirect-private")]}, run))
    [(_, message)] = messenger.sent
    [file] = message.media
    assert Path(file.path) == tmp_path / "downloads" / "image" and Path(file.path).read_bytes() == PNG
    assert "refused" in refused and "10.0.0.1" in refused


async def test_without_a_fetcher_or_uploads_no_file_goes_out(tool: MessageTool, messenger: RecordingMessenger) -> None:
    run = run_info(UPLOADS, workspace="/nonexistent")
    by_url = {"action": "send", "media": ["http://127.0.0.1:9/a"]}  # refused before any connection
    assert "cannot be fetched here" in error_of(await call(tool, by_url, run))
    no_files = run_info(Capabilities(), workspace="/nonexistent")
    assert "cannot take files" in error_of(await call(tool, {"action": "send", "media": ["a.png"]}, no_files))
    assert not messenger.touched()
