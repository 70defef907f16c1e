"""The test helpers Switchboard ships for people who write their own tools and agents: `MemoryChannel`
(channels/memory.py) and `ScriptedProvider` (agent/providers/scripted.py). The first test is the example of
docs/guides/testing.md, word for word; the others pin down each helper's own behaviour."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import ClassVar

import pytest
from pydantic import BaseModel

from agent import ToolResultMessage, UserMessage
from agent.providers import (
    Completed,
    ModelRequest,
    ProviderError,
    Scripted,
    ScriptedProvider,
    TextDelta,
    ToolCallStarted,
)
from bot import App, ConfigError, Plugins, parse_config
from channels import (
    ActionEvent,
    Capabilities,
    ChannelAdapter,
    ChannelError,
    ChatTarget,
    InboundMessage,
    MemoryChannel,
    OutboundMessage,
)
from routing import Peer
from tools import Tool, ToolContext, ToolResult, json_result

# --- the docs' example (docs/guides/testing.md) ---------------------------------------------------------------------


class ShoutArguments(BaseModel):
    text: str


class Shout(Tool):
    name: ClassVar[str] = "shout"
    description: ClassVar[str] = "Repeat a text in capitals."
    parameters: ClassVar[type[BaseModel]] = ShoutArguments

    async def execute(self, call_id: str, args: ShoutArguments, ctx: ToolContext) -> ToolResult:
        return json_result({"shouted": args.text.upper()})


CONFIG = """
defaults: {model: fake/any, workspace_root: "${WORKSPACES}"}
providers: {fake: {kind: scripted}}
"""


async def test_the_agent_shouts(tmp_path: Path) -> None:
    model = ScriptedProvider(Scripted.tool_call("shout", {"text": "hello"}), Scripted.text("Shouted: HELLO"))
    plugins = Plugins(providers={"scripted": model.plugin()})
    config = parse_config(CONFIG, environ={"WORKSPACES": str(tmp_path / "ws")}, plugins=plugins)
    chat = MemoryChannel()
    app = App(config, tmp_path / "state", plugins=plugins, tools=[Shout()], adapters=[chat])
    async with app.running():
        await chat.say("please shout hello", sender="alice")
        [reply] = await chat.replies()
    assert reply.text == "Shouted: HELLO"
    assert "shout" in [tool.name for tool in model.requests[0].tools]
    [(tool, result)] = model.tool_results()
    assert tool == "shout" and json.loads(result) == {"shouted": "HELLO"}


def test_the_docs_show_the_example_above_as_it_is_here() -> None:
    guide = Path(__file__).resolve().parent.parent.parent / "docs" / "guides" / "testing.md"
    block = guide.read_text(encoding="utf-8").split("```python\n", 1)[1].split("```", 1)[0]
    imports, code = block.split("\n\n\n", 1)
    exec(imports, {})  # what the example imports is there under those names
    assert code in Path(__file__).read_text(encoding="utf-8")


# --- the two together, a little further ------------------------------------------------------------------------------


def app_for(tmp_path: Path, model: ScriptedProvider, chat: MemoryChannel, extra: str = "") -> App:
    plugins = Plugins(providers={"scripted": model.plugin()})
    config = parse_config(CONFIG + extra, environ={"WORKSPACES": str(tmp_path / "ws")}, plugins=plugins)
    return App(config, tmp_path / "state", plugins=plugins, tools=[Shout()], adapters=[chat])


async def test_the_model_sees_the_message_and_a_system_prompt_and_the_reply_goes_to_the_sender(tmp_path: Path) -> None:
    model = ScriptedProvider(Scripted.text("hi alice"), Scripted.text("hi bob"))
    chat = MemoryChannel()
    async with app_for(tmp_path, model, chat).running():
        said = await chat.say("hello", sender="alice")
        [first] = await chat.replies()
        await chat.say("hello too", sender="bob")
        [second] = await chat.replies()
    assert (first.text, first.target.peer, first.message.reply_to) == ("hi alice", Peer("direct", "alice"), None)
    assert (second.text, second.target.peer) == ("hi bob", Peer("direct", "bob"))
    assert chat.sent == [first, second] and chat.showing == {s.message_id: s.message for s in (first, second)}
    assert said.peer == Peer("direct", "alice") and said.sender_id == "alice"
    assert model.requests[0].system.strip() != ""
    last = model.requests[0].messages[-1]
    assert isinstance(last, UserMessage) and "hello" in last.content[0].model_dump()["text"]
    assert model.remaining == 0


async def test_a_group_message_without_a_mention_is_not_answered(tmp_path: Path) -> None:
    model = ScriptedProvider(Scripted.text("answered"))
    chat = MemoryChannel()
    room = Peer("group", "room")
    async with app_for(tmp_path, model, chat).running():
        await chat.say("chatter among people", sender="alice", peer=room)
        await chat.say("@bot a question", sender="bob", peer=room, mentioned=True)
        [reply] = await chat.replies()
    assert reply.text == "answered" and reply.target.peer == room
    assert len(model.requests) == 1 and chat.sent == [reply]  # the first message started no run


async def test_when_the_script_runs_out_the_person_gets_the_apology_and_the_log_says_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    model = ScriptedProvider()
    chat = MemoryChannel()
    async with app_for(tmp_path, model, chat).running():
        await chat.say("anyone there?", sender="alice")
        [reply] = await chat.replies()
    assert reply.text.startswith("Sorry")
    assert "the script has no answer left for request 1" in caplog.text


# --- ScriptedProvider ------------------------------------------------------------------------------------------------


def request(text: str = "hi") -> ModelRequest:
    return ModelRequest(model="any", messages=[UserMessage.of(text)])


async def events(model: ScriptedProvider, asked: ModelRequest | None = None) -> list[object]:
    return [event async for event in model.stream(asked or request())]


async def test_a_text_answer_streams_as_one_delta_then_completes_the_turn() -> None:
    model = ScriptedProvider(Scripted.text("hello"))
    found = await events(model)
    assert [type(event) for event in found] == [TextDelta, Completed]
    done = found[-1]
    assert isinstance(done, Completed)
    assert (done.message.text, done.message.tool_calls, done.stop_reason) == ("hello", [], "end_turn")


async def test_tool_calls_get_ids_in_order_and_stop_for_tool_use() -> None:
    model = ScriptedProvider(
        Scripted.tool_call("shout", {"text": "a"}, text="Let me shout."),
        Scripted.tool_calls(("shout", {"text": "b"}), ("session_status", {})),
        Scripted.tool_call("shout", {"text": "c"}, id="mine"),
    )
    first, second, third = [await events(model) for _ in range(3)]
    assert [type(event) for event in first] == [TextDelta, ToolCallStarted, Completed]
    assert [(e.id, e.name) for e in second if isinstance(e, ToolCallStarted)] == [
        ("call_2", "shout"), ("call_3", "session_status")
    ]  # fmt: skip
    completed = [e for e in (*first, *second, *third) if isinstance(e, Completed)]
    assert [c.stop_reason for c in completed] == ["tool_use"] * 3
    calls = [(call.id, call.name, call.arguments) for c in completed for call in c.message.tool_calls]
    assert calls == [
        ("call_1", "shout", {"text": "a"}),
        ("call_2", "shout", {"text": "b"}),
        ("call_3", "session_status", {}),
        ("mine", "shout", {"text": "c"}),
    ]


async def test_every_request_is_recorded_and_a_function_in_the_script_answers_from_it() -> None:
    model = ScriptedProvider(lambda asked: Scripted.text(f"you said {len(asked.messages)} thing(s)"))
    asked = request("echo")
    [_, done] = await events(model, asked)
    assert isinstance(done, Completed) and done.message.text == "you said 1 thing(s)"
    assert model.requests == [asked]


async def test_past_the_end_of_the_script_it_fails_clearly_or_repeats_its_default() -> None:
    strict = ScriptedProvider(Scripted.text("one"))
    await events(strict)
    with pytest.raises(ProviderError) as failed:
        await events(strict)
    assert failed.value.kind == "bad_request"
    assert str(failed.value) == "scripted provider 'scripted': the script has no answer left for request 2"

    lenient = ScriptedProvider(default=Scripted.text("again"))
    lenient.script(Scripted.text("first"))
    texts = [e.message.text for _ in range(3) for e in await events(lenient) if isinstance(e, Completed)]
    assert texts == ["first", "again", "again"] and lenient.remaining == 0
    assert lenient.calls == len(lenient.requests) == 3


async def test_without_recording_it_only_counts_the_requests() -> None:
    model = ScriptedProvider(default=Scripted.text("ok"), record=False)
    for _ in range(3):
        await events(model)
    assert (model.calls, model.requests) == (3, [])


async def test_a_scripted_failure_is_raised_as_a_fresh_provider_error_each_time() -> None:
    model = ScriptedProvider(default=Scripted.failure("rate_limit", "slow down", status=429, retry_after=2))
    errors = []
    for _ in range(2):
        with pytest.raises(ProviderError) as failed:
            await events(model)
        errors.append(failed.value)
    assert [(e.kind, str(e), e.status, e.retry_after) for e in errors] == [("rate_limit", "slow down", 429, 2)] * 2
    assert errors[0] is not errors[1]


def test_kind_scripted_is_a_provider_kind_only_where_the_plugin_is_given() -> None:
    plugins = Plugins(providers={"scripted": ScriptedProvider().plugin()})
    config = parse_config(CONFIG, environ={"WORKSPACES": "/nowhere"}, plugins=plugins)
    assert config.providers is not None and config.providers["fake"].base_url == "http://scripted.invalid"

    with pytest.raises(ConfigError) as wrong:
        parse_config(CONFIG.replace("kind: scripted", "kind: scripted, bse_url: x"), environ={}, plugins=plugins)
    assert "providers.fake.bse_url: unknown key; did you mean 'base_url'?" in str(wrong.value)

    with pytest.raises(ConfigError) as unknown:
        parse_config(CONFIG, environ={"WORKSPACES": "/nowhere"})
    assert "providers.fake.kind: unknown provider kind 'scripted'" in str(unknown.value)


# --- MemoryChannel ---------------------------------------------------------------------------------------------------


class Gateway:
    """What a channel reports to: every message and click it delivered, in order."""

    def __init__(self) -> None:
        self.messages: list[InboundMessage] = []
        self.actions: list[ActionEvent] = []

    async def on_message(self, message: InboundMessage) -> None:
        self.messages.append(message)

    async def on_action(self, event: ActionEvent) -> str | None:
        self.actions.append(event)
        return f"noted {event.value}"


async def started(chat: MemoryChannel) -> Gateway:
    gateway = Gateway()
    await chat.start(gateway.on_message, gateway.on_action)
    return gateway


def target(peer: str = "alice") -> ChatTarget:
    return ChatTarget(channel="memory", peer=Peer("direct", peer))


def test_it_is_a_channel_adapter_open_to_direct_messages_by_default() -> None:
    chat: ChannelAdapter = MemoryChannel()
    assert (chat.channel, chat.account, chat.bot_username) == ("memory", "default", None)
    assert chat.capabilities == Capabilities()
    assert chat.settings.dm_policy == "open"
    custom = MemoryChannel("bench", "second", capabilities=Capabilities(edit=True), bot_username="mybot")
    assert (custom.channel, custom.account, custom.capabilities.edit, custom.bot_username) == (
        "bench", "second", True, "mybot"
    )  # fmt: skip


async def test_say_delivers_as_the_sender_with_a_new_id_each_time() -> None:
    chat = MemoryChannel()
    gateway = await started(chat)
    first = await chat.say("hi", sender="alice", sender_name="Alice")
    second = await chat.say("in the room", sender="bob", peer=Peer("group", "room"), mentioned=True, guild="g1")
    again = await chat.say("hi", sender="alice", message_id=first.message_id)
    assert gateway.messages == [first, second, again]
    assert (first.peer, first.sender_id, first.sender_name, first.text) == (
        Peer("direct", "alice"),
        "alice",
        "Alice",
        "hi",
    )
    assert (second.peer, second.was_mentioned, second.guild) == (Peer("group", "room"), True, "g1")
    assert first.message_id != second.message_id and again.message_id == first.message_id
    assert MemoryChannel()._new_id("in") != chat._new_id("in")  # two channels never share an id


async def test_click_reports_the_tap_and_returns_the_notice() -> None:
    chat = MemoryChannel()
    gateway = await started(chat)
    assert await chat.click("out-1", "yes", sender="alice") == "noted yes"
    [event] = gateway.actions
    assert (event.message_id, event.value, event.sender_id, event.peer) == (
        "out-1",
        "yes",
        "alice",
        Peer("direct", "alice"),
    )


async def test_say_and_click_need_a_running_channel() -> None:
    chat = MemoryChannel()
    with pytest.raises(RuntimeError, match="not running"):
        await chat.say("hi")
    await started(chat)
    await chat.stop()
    with pytest.raises(RuntimeError, match="not running"):
        await chat.click("out-1", "yes")


async def test_replies_waits_for_messages_not_yet_returned() -> None:
    chat = MemoryChannel()
    waiting = asyncio.create_task(chat.replies(2))
    one = await chat.send(target(), OutboundMessage(text="one"))
    two = await chat.send(target("bob"), OutboundMessage(text="two"))
    got = await waiting
    assert [(sent.text, sent.message_id, sent.target.peer.id) for sent in got] == [
        ("one", one, "alice"),
        ("two", two, "bob"),
    ]
    assert got[0].at <= got[1].at
    await chat.send(target(), OutboundMessage(text="three"))
    assert [sent.text for sent in await chat.replies()] == ["three"]
    assert [sent.text for sent in chat.sent] == ["one", "two", "three"]


async def test_replies_names_what_came_when_too_little_did() -> None:
    chat = MemoryChannel()
    await chat.send(target(), OutboundMessage(text="only this"))
    with pytest.raises(TimeoutError, match=r"expected 2 message\(s\) from the bot within 0.01 s; got \['only this'\]"):
        await chat.replies(2, timeout=0.01)  # nothing else can come: nothing else is running


async def test_edits_deletes_reactions_and_typing_are_recorded() -> None:
    chat = MemoryChannel(capabilities=Capabilities(edit=True, delete=True, reactions=True))
    first = await chat.send(target(), OutboundMessage(text="draft"))
    second = await chat.send(target(), OutboundMessage(text="to remove"))
    assert first is not None and second is not None
    await chat.edit(target(), first, OutboundMessage(text="final"))
    await chat.delete(target(), second)
    await chat.react(target(), "in-1", "👍")
    await chat.typing(target())
    assert chat.edits == [(target(), first, OutboundMessage(text="final"))]
    assert chat.deleted == [(target(), second)]
    assert chat.reactions == [(target(), "in-1", "👍")]
    assert chat.typing_in == [target()]
    assert chat.showing == {first: OutboundMessage(text="final")}
    assert [sent.text for sent in chat.sent] == ["draft", "to remove"]  # as sent, before the edit


async def test_what_the_channel_cannot_do_or_a_message_it_never_sent_is_refused() -> None:
    plain = MemoryChannel()
    sent = await plain.send(target(), OutboundMessage(text="x"))
    assert sent is not None
    for refused in (
        plain.edit(target(), sent, OutboundMessage(text="y")),
        plain.delete(target(), sent),
        plain.react(target(), sent, "👍"),
    ):
        with pytest.raises(ChannelError, match="its capabilities"):
            await refused
    able = MemoryChannel(capabilities=Capabilities(edit=True, delete=True))
    with pytest.raises(ChannelError, match="no such message"):
        await able.edit(target(), "out-nope", OutboundMessage(text="y"))
    with pytest.raises(ChannelError, match="no such message"):
        await able.delete(target(), "out-nope")


def test_a_tool_result_message_is_what_tool_results_reads() -> None:
    model = ScriptedProvider()
    model.requests.append(
        ModelRequest(
            model="any",
            messages=[
                UserMessage.of("hi"),
                ToolResultMessage(call_id="call_1", name="shout", content=json_result({"a": 1}).content),
            ],
        )
    )
    assert model.tool_results() == [("shout", json.dumps({"a": 1}, indent=2))]
    assert model.tool_results(0) == model.tool_results()
