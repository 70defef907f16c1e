"""The message tool: its schema narrowed to each channel, its checks, its calls to the gateway, what it records."""

from __future__ import annotations

from typing import Any

import pytest

from agent.providers.base import SchemaDialect
from channels import discord, slack, telegram
from channels.base import CONSOLE, Capabilities, ChatTarget, OutboundMessage
from routing import Peer
from tools.base import RunInfo, ToolContext, ToolResult, invoke
from tools.message import MAX_SENT_PER_SESSION, MessageTool, Sent, build_schema
from tools.schema import normalize_schema, tool_schema

DIALECTS: tuple[SchemaDialect, ...] = ("openai", "anthropic", "gemini")
SESSION = "agent:main:telegram:direct:1"
HERE = ChatTarget(channel="telegram", account="default", peer=Peer("direct", "1"))
RICH_ACTIONS = ["send", "reply", "edit", "delete", "react", "thread-create"]
RICH_PROPERTIES = {"action", "text", "to", "message_id", "buttons", "emoji", "thread_id", "thread_name"}
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
        self.failure: Exception | None = None
        self._next_id = 100

    def capabilities(self, channel: str, account: str) -> Capabilities | None:
        return self.caps.get((channel, account))

    def accounts(self) -> list[tuple[str, str]]:
        return list(self.caps)

    def _maybe_fail(self) -> None:
        if self.failure is not None:
            raise self.failure

    async def send(self, target: ChatTarget, message: OutboundMessage) -> str | None:
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


def run_info(caps: Capabilities = telegram.CAPABILITIES, **changes: Any) -> RunInfo:
    fields: dict[str, Any] = {
        "agent": "main",
        "session_key": SESSION,
        "channel": "telegram",
        "capabilities": caps,
        "target": HERE,
        "reply_to": "55",
    }
    fields.update(changes)
    return RunInfo(**fields)


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
    assert schema["properties"]["action"]["enum"] == RICH_ACTIONS
    assert set(schema["properties"]) == RICH_PROPERTIES
    assert str(caps.max_text_length) in schema["properties"]["text"]["description"]
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
    edited = await call(
        tool, {"action": "edit", "message_id": "77", "text": "fixed", "buttons": [[{"label": "A", "value": "a"}]]}
    )
    deleted = await call(tool, {"action": "delete", "message_id": "78"})
    reacted = await call(tool, {"action": "react", "message_id": "79", "emoji": "👍"})
    for result, action, message_id in ((edited, "edit", "77"), (deleted, "delete", "78"), (reacted, "react", "79")):
        assert result.details == {"status": "ok", "action": action, "message_id": message_id, "to": "telegram:direct:1"}
    [(target, message_id, message)] = messenger.edited
    assert (target, message_id, message.text, message.buttons[0][0].value) == (HERE, "77", "fixed", "a")
    assert messenger.deleted == [(HERE, "78")]
    assert messenger.reacted == [(HERE, "79", "👍")]
    assert messenger.sent == []


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


async def test_telegram_cannot_poll(tool: MessageTool) -> None:
    error = error_of(await call(tool, {"action": "poll", "poll_question": "?", "poll_options": ["a", "b"]}))
    assert "send, reply, edit, delete, react, thread-create" in error


async def test_thread_create_and_poll_are_not_implemented_yet(tool: MessageTool) -> None:
    error = error_of(await call(tool, {"action": "thread-create", "thread_name": "plans"}))
    assert "not supported by this channel yet" in error
    polls = run_info(Capabilities(polls=True))
    error = error_of(await call(tool, {"action": "poll", "poll_question": "?", "poll_options": ["a", "b"]}, polls))
    assert "not supported by this channel yet" in error


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
    assert tool.sent_in(SESSION) == []
    messenger.failure = RuntimeError()
    assert "RuntimeError" in error_of(await call(tool, {"action": "send", "text": "hi"}))


async def test_deliveries_are_recorded_per_session(tool: MessageTool) -> None:
    await call(tool, {"action": "send", "text": "first"})
    await call(tool, {"action": "reply", "text": "second"})
    await call(tool, {"action": "send", "text": "elsewhere", "to": "slack:channel:C1"})
    await call(tool, {"action": "react", "message_id": "101", "emoji": "👍"})
    await call(tool, {"action": "delete", "message_id": "101"})
    slack_target = ChatTarget(channel="slack", account="default", peer=Peer("channel", "C1"))
    assert tool.sent_in(SESSION) == [
        Sent(target=HERE, message_id="101", text="first"),
        Sent(target=HERE, message_id="102", text="second"),
        Sent(target=slack_target, message_id="103", text="elsewhere"),
    ]
    await call(tool, {"action": "edit", "message_id": "102", "text": "second, corrected"})
    await call(tool, {"action": "edit", "message_id": "999", "text": "an older one"})
    assert [(sent.message_id, sent.text) for sent in tool.sent_in(SESSION)] == [
        ("101", "first"),
        ("102", "second, corrected"),
        ("103", "elsewhere"),
        ("999", "an older one"),
    ]
    other = "agent:main:slack:channel:c1"
    await call(tool, {"action": "send", "text": "other"}, run_info(session_key=other))
    assert [sent.text for sent in tool.sent_in(other)] == ["other"]
    tool.forget(SESSION)
    assert tool.sent_in(SESSION) == []
    assert len(tool.sent_in(other)) == 1
    tool.forget("never-seen")


async def test_recording_is_bounded(tool: MessageTool) -> None:
    for index in range(MAX_SENT_PER_SESSION + 10):
        await call(tool, {"action": "send", "text": f"m{index}"})
    recorded = tool.sent_in(SESSION)
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
    [sent] = tool.sent_in(SESSION)
    assert (sent.message_id, sent.text, sent.target.thread_id) == ("101", "final", None)
