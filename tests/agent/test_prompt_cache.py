"""A cacheable prompt, proved on the wire against the real fake LLM server: the body's key order, cache breakpoints
where each endpoint needs them, consecutive requests of a session sharing their bytes, and cache usage read back."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator
from typing import Any, Literal, cast

import httpx
import pytest
from fakes.llm import FakeLLM, Reply, ToolCallSpec
from helpers import WAIT
from pydantic import BaseModel

from agent.loop import Dispatch, Turn, TurnResult, run_turn
from agent.messages import (
    AssistantMessage,
    ImageBlock,
    Message,
    TextBlock,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from agent.providers.base import Completed, ModelRequest, Provider, ToolSpec
from agent.providers.builtins import build_provider
from agent.providers.config import ProviderConfig
from agent.providers.openai import IMPLICIT_CACHE_HOSTS, OpenAIProvider
from agent.providers.transport import provider_client
from tools.base import RunInfo, Tool, ToolContext, ToolResult, json_result

Kind = Literal["openai", "anthropic"]
MARKER = b',"cache_control":{"type":"ephemeral"}'
EPHEMERAL = {"type": "ephemeral"}
SYSTEM = "You are a careful test agent. " * 20
RUN = RunInfo(agent="main", session_key="agent:main:console:direct:me")
READ = ToolSpec(name="read", description="Read a file.", parameters={"type": "object", "properties": {}})
WRITE = ToolSpec(name="write", description="Write a file.", parameters={"type": "object", "properties": {}})
HISTORY: list[Message] = [
    UserMessage.of("What is in a.txt?"),
    AssistantMessage(text="Reading.", tool_calls=[ToolCall(id="c1", name="read", arguments={"path": "a.txt"})]),
    ToolResultMessage(call_id="c1", name="read", content=[TextBlock(text="hello from a")]),
]


class KeyArgs(BaseModel):
    key: str


class Lookup(Tool):
    name = "lookup"
    description = "Look a key up."
    parameters = KeyArgs

    async def execute(self, call_id: str, args: Any, ctx: ToolContext) -> ToolResult:
        return json_result({"key": args.key, "value": f"value of {args.key}"})


class Add(Lookup):
    name = "add"
    description = "Add a key."


class Weather(Lookup):
    name = "weather"
    description = "The weather at a place."


UNSORTED_TOOLS = (Weather(), Lookup(), Add())


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with provider_client() as client:
        yield client


def make(llm: FakeLLM, http: httpx.AsyncClient, kind: Kind, **settings: Any) -> Provider:
    return build_provider("fake", llm.provider_config(kind, api_key="sk-cache-test", **settings), http)


async def send(provider: Provider, request: ModelRequest) -> Completed:
    events = [event async for event in provider.stream(request)]
    assert isinstance(events[-1], Completed)
    return events[-1]


def body_of(llm: FakeLLM, index: int = -1) -> dict[str, Any]:
    return cast(dict[str, Any], llm.requests[index].body)


def unmarked_head(raw: bytes) -> bytes:
    """`raw` up to its last cache marker, which must be followed by nothing but closing brackets."""
    head, marker, tail = raw.rpartition(MARKER)
    assert marker, "no cache marker"
    assert set(tail) <= set(b"}]"), tail
    return head


# --- the Anthropic Messages body ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "settings"),
    [
        ({"temperature": 0.3}, ["model", "max_tokens", "stream", "temperature"]),
        ({"thinking": "low"}, ["model", "max_tokens", "stream", "thinking"]),
    ],
)
async def test_anthropic_settings_come_before_tools_system_and_messages(
    fake_llm: FakeLLM, http: httpx.AsyncClient, fields: dict[str, Any], settings: list[str]
) -> None:
    fake_llm.script("ok")
    request = ModelRequest(model="claude-test", system=SYSTEM, messages=HISTORY, tools=[READ, WRITE], **fields)
    await send(make(fake_llm, http, "anthropic"), request)
    assert list(body_of(fake_llm)) == [*settings, "tools", "system", "messages"]


async def test_anthropic_marks_the_system_block_and_the_last_block_of_the_last_message(
    fake_llm: FakeLLM, http: httpx.AsyncClient
) -> None:
    fake_llm.script("ok")
    request = ModelRequest(model="claude-test", system=SYSTEM, messages=HISTORY, tools=[READ, WRITE])
    await send(make(fake_llm, http, "anthropic"), request)
    body = body_of(fake_llm)
    assert body["system"] == [{"type": "text", "text": SYSTEM, "cache_control": EPHEMERAL}]
    assert all("cache_control" not in tool for tool in body["tools"])  # the system block's breakpoint covers them
    last = body["messages"][-1]["content"][-1]
    assert last["type"] == "tool_result"
    assert list(last)[-1] == "cache_control"  # the marker is the block's last key
    assert last["cache_control"] == EPHEMERAL
    assert fake_llm.requests[-1].raw.count(b'"cache_control"') == 2  # the API allows four


async def test_anthropic_without_a_system_prompt_marks_the_last_tool(
    fake_llm: FakeLLM, http: httpx.AsyncClient
) -> None:
    fake_llm.script("ok", "ok")
    provider = make(fake_llm, http, "anthropic")
    await send(provider, ModelRequest(model="claude-test", messages=HISTORY, tools=[READ, WRITE]))
    await send(provider, ModelRequest(model="claude-test", messages=[UserMessage.of("hi")]))
    with_tools, bare = body_of(fake_llm, 0), body_of(fake_llm, 1)
    assert [tool.get("cache_control") for tool in with_tools["tools"]] == [None, EPHEMERAL]
    assert bare["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": EPHEMERAL}]}
    ]
    assert [request.raw.count(b'"cache_control"') for request in fake_llm.requests] == [2, 1]


async def test_anthropic_cache_off_sends_the_same_bytes_without_markers(
    fake_llm: FakeLLM, http: httpx.AsyncClient
) -> None:
    fake_llm.script("ok", "ok")
    request = ModelRequest(model="claude-test", system=SYSTEM, messages=HISTORY, tools=[READ, WRITE])
    await send(make(fake_llm, http, "anthropic"), request)
    await send(make(fake_llm, http, "anthropic", cache="OFF"), request)
    marked, unmarked = (sent.raw for sent in fake_llm.requests)
    assert b"cache_control" not in unmarked
    assert marked.replace(MARKER, b"") == unmarked


# --- OpenAI-compatible bodies -------------------------------------------------------------------------------------


async def test_openai_settings_come_before_tools_and_messages(fake_llm: FakeLLM, http: httpx.AsyncClient) -> None:
    fake_llm.script("ok")
    request = ModelRequest(
        model="gpt-test", system=SYSTEM, messages=HISTORY, tools=[READ], temperature=0.2, thinking="high"
    )
    await send(make(fake_llm, http, "openai"), request)
    body = body_of(fake_llm)
    settings = ["model", "stream", "stream_options", "max_tokens", "temperature", "reasoning_effort"]
    assert list(body) == [*settings, "tools", "messages"]
    assert body["messages"][0] == {"role": "system", "content": SYSTEM}


@pytest.mark.parametrize(
    "model", ["anthropic/claude-sonnet-4", "google/gemini-2.5-pro", "claude-3-5-haiku-latest", "Gemini-2.5-Flash"]
)
async def test_claude_and_gemini_models_get_markers_on_openai_endpoints(
    fake_llm: FakeLLM, http: httpx.AsyncClient, model: str
) -> None:
    fake_llm.script("ok")
    await send(make(fake_llm, http, "openai"), ModelRequest(model=model, system=SYSTEM, messages=HISTORY))
    messages = body_of(fake_llm)["messages"]
    assert messages[0] == {"role": "system", "content": [{"type": "text", "text": SYSTEM, "cache_control": EPHEMERAL}]}
    # every text content is a list of parts, so a marked message and the same one unmarked differ by the marker alone
    assert messages[1] == {"role": "user", "content": [{"type": "text", "text": "What is in a.txt?"}]}
    marked_text = {"type": "text", "text": "hello from a", "cache_control": EPHEMERAL}
    assert messages[-1] == {"role": "tool", "tool_call_id": "c1", "content": [marked_text]}
    assert fake_llm.requests[-1].raw.count(b'"cache_control"') == 2


async def test_the_last_text_part_carries_the_marker(fake_llm: FakeLLM, http: httpx.AsyncClient) -> None:
    fake_llm.script("ok")
    picture = ImageBlock(data="iVBORw0KGgo=", mime_type="image/png")
    message = UserMessage(content=[TextBlock(text="one"), TextBlock(text="two"), picture])
    await send(make(fake_llm, http, "openai"), ModelRequest(model="anthropic/claude-sonnet-4", messages=[message]))
    [sent] = body_of(fake_llm)["messages"]
    assert [part.get("cache_control") for part in sent["content"]] == [None, EPHEMERAL, None]  # text parts only


@pytest.mark.parametrize("model", ["gpt-4o", "openai/gpt-4.1-mini", "meta-llama/llama-3.3-70b-instruct", "qwen3:8b"])
async def test_other_models_get_no_markers(fake_llm: FakeLLM, http: httpx.AsyncClient, model: str) -> None:
    fake_llm.script("ok")
    await send(make(fake_llm, http, "openai"), ModelRequest(model=model, system=SYSTEM, messages=HISTORY))
    assert b"cache_control" not in fake_llm.requests[-1].raw
    assert body_of(fake_llm)["messages"][0] == {"role": "system", "content": SYSTEM}


async def test_cache_off_sends_no_markers_to_claude_either(fake_llm: FakeLLM, http: httpx.AsyncClient) -> None:
    fake_llm.script("ok")
    provider = make(fake_llm, http, "openai", cache="off")
    await send(provider, ModelRequest(model="anthropic/claude-sonnet-4", system=SYSTEM, messages=HISTORY))
    assert b"cache_control" not in fake_llm.requests[-1].raw


def test_googles_own_endpoint_gets_no_markers() -> None:
    google = next(host for host in IMPLICIT_CACHE_HOSTS if "google" in host)  # only the body is built: no request
    config = ProviderConfig(kind="openai", base_url=f"https://{google}/v1beta/openai")
    body = OpenAIProvider("gemini", config).request_body(
        ModelRequest(model="gemini-2.5-flash", system=SYSTEM, messages=HISTORY)
    )
    assert "cache_control" not in json.dumps(body)


def test_cache_setting_parses_like_the_other_choices() -> None:
    base = {"kind": "openai", "base_url": "http://127.0.0.1:9/v1"}
    assert ProviderConfig.model_validate(base).cache == "auto"
    assert ProviderConfig.model_validate(base | {"cache": " Off "}).cache == "off"
    with pytest.raises(ValueError, match="cache"):
        ProviderConfig.model_validate(base | {"cache": "on"})


# --- a session's requests share their bytes ----------------------------------------------------------------------


def turn(provider: Provider, model: str, dispatch: Dispatch = "native") -> Turn:
    return Turn(provider=provider, model=model, system=SYSTEM, run=RUN, tools=UNSORTED_TOOLS, dispatch=dispatch)


async def ask(this: Turn, history: list[Message], text: str) -> TurnResult:
    return await asyncio.wait_for(run_turn(this, history, UserMessage.of(text)), WAIT)


async def two_turns(llm: FakeLLM, provider: Provider, model: str) -> list[bytes]:
    """A tool round and an answer, then a second turn of the same session: three requests, each two messages
    longer than the one before. Returns their raw bodies."""
    llm.script(Reply.tool_calls(ToolCallSpec("lookup", {"key": "a"}, id="call_1")), "Found it.", "And again.")
    first = await ask(turn(provider, model), [], "Look up a.")
    await ask(turn(provider, model), first.messages, "And b?")
    bodies = [cast(dict[str, Any], sent.body) for sent in llm.requests]
    assert [len(body["messages"]) for body in bodies][1:] == [len(bodies[0]["messages"]) + 2 * n for n in (1, 2)]
    return [sent.raw for sent in llm.requests]


@pytest.mark.parametrize(("kind", "model"), [("anthropic", "claude-test"), ("openai", "anthropic/claude-sonnet-4")])
async def test_marked_requests_extend_the_last_one_up_to_its_moved_marker(
    fake_llm: FakeLLM, http: httpx.AsyncClient, kind: Kind, model: str
) -> None:
    raws = await two_turns(fake_llm, make(fake_llm, http, kind), model)
    for before, after in itertools.pairwise(raws):
        head = unmarked_head(before)
        assert after.startswith(head)
        assert after[len(head) : len(head) + 1] in (b"}", b"]")  # the marked block ends right there, unmarked


async def test_openai_requests_extend_the_last_one(fake_llm: FakeLLM, http: httpx.AsyncClient) -> None:
    raws = await two_turns(fake_llm, make(fake_llm, http, "openai"), "gpt-test")
    for before, after in itertools.pairwise(raws):
        assert before.endswith(b"]}")  # the messages array closes the body
        assert after.startswith(before[:-2] + b",{")


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_tools_arrive_sorted_by_name(fake_llm: FakeLLM, http: httpx.AsyncClient, kind: Kind) -> None:
    fake_llm.script("ok")
    await ask(turn(make(fake_llm, http, kind), "test-model"), [], "hi")
    tools = body_of(fake_llm)["tools"]
    names = [tool["name"] if kind == "anthropic" else tool["function"]["name"] for tool in tools]
    assert names == ["add", "lookup", "weather"]


async def test_xml_dispatch_lists_the_tools_sorted_by_name(fake_llm: FakeLLM, http: httpx.AsyncClient) -> None:
    fake_llm.script("ok")
    await ask(turn(make(fake_llm, http, "openai"), "local-model", dispatch="xml"), [], "hi")
    system = body_of(fake_llm)["messages"][0]["content"]
    places = [system.index(f"- {name}: ") for name in ("add", "lookup", "weather")]
    assert places == sorted(places)


# --- what the cache did, read back --------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_a_run_adds_up_its_cache_figures(fake_llm: FakeLLM, http: httpx.AsyncClient, kind: Kind) -> None:
    fake_llm.script(
        Reply.tool_calls(ToolCallSpec("lookup", {"key": "a"}), usage=(1500, 20), cache_write=1400),
        Reply.text("Found it.", usage=(1600, 5), cache_read=1400, cache_write=150),
    )
    result = await ask(turn(make(fake_llm, http, kind), "test-model"), [], "Look up a.")
    assert result.usage == Usage(input_tokens=3100, output_tokens=25, cache_read_tokens=1400, cache_write_tokens=1550)
