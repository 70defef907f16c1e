"""Providers against a real local LLM server: streaming, tool calls, usage, errors, and what is sent on the wire."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import httpx
import pytest
from fakes.llm import FakeLLM, Reply, ToolCallSpec, refusing_port
from pydantic import ValidationError

from agent.messages import AssistantMessage, ImageBlock, TextBlock, ToolCall, ToolResultMessage, Usage, UserMessage
from agent.providers.anthropic import AnthropicProvider, EventAssembler
from agent.providers.base import (
    Completed,
    ModelRequest,
    Provider,
    ProviderError,
    StreamEvent,
    TextDelta,
    ToolCallStarted,
    ToolSpec,
)
from agent.providers.builtins import build_provider
from agent.providers.config import ProviderConfig, providers_from_env, split_model
from agent.providers.openai import ChunkAssembler, OpenAIProvider
from agent.providers.sse import parse_retry_after, parse_sse
from agent.providers.transport import provider_client

KEY = "sk-live-9f8e7d6c5b4a3928170654"
KINDS = pytest.mark.parametrize("kind", ["openai", "anthropic"])


@pytest.fixture
async def llm() -> AsyncIterator[FakeLLM]:
    async with FakeLLM() as server:
        yield server


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with provider_client() as client:
        yield client


def make(llm: FakeLLM, http: httpx.AsyncClient, kind: str, **settings: Any) -> Provider:
    settings.setdefault("api_key", KEY)
    return build_provider("fake", llm.provider_config(kind, **settings), http)  # type: ignore[arg-type]


def ask(text: str = "hi", **fields: Any) -> ModelRequest:
    return ModelRequest(model=fields.pop("model", "test-model"), messages=[UserMessage.of(text)], **fields)


async def collect(provider: Provider, request: ModelRequest | None = None, **kwargs: Any) -> list[StreamEvent]:
    return [event async for event in provider.stream(request or ask(), **kwargs)]


async def failure(provider: Provider, request: ModelRequest | None = None) -> tuple[list[StreamEvent], ProviderError]:
    """The events that arrived before the stream failed, and its error."""
    events: list[StreamEvent] = []
    with pytest.raises(ProviderError) as caught:
        async for event in provider.stream(request or ask()):
            events.append(event)
    return events, caught.value


def completed(events: list[StreamEvent]) -> Completed:
    assert isinstance(events[-1], Completed), events
    assert sum(isinstance(event, Completed) for event in events) == 1
    return events[-1]


# --- streaming ----------------------------------------------------------------------------------------------------


@KINDS
async def test_text_streams_in_order_and_joins_to_the_answer(llm: FakeLLM, http: httpx.AsyncClient, kind: str) -> None:
    answer = "The quick brown fox jumps over the lazy dog."
    llm.script(Reply.text(answer))
    events = await collect(make(llm, http, kind))
    deltas = [event.text for event in events if isinstance(event, TextDelta)]
    assert len(deltas) > 5  # really streamed, not one piece
    assert "".join(deltas) == answer
    done = completed(events)
    assert done.message == AssistantMessage(text=answer)
    assert done.stop_reason == "end_turn"


@KINDS
async def test_one_connection_serves_call_after_call(llm: FakeLLM, http: httpx.AsyncClient, kind: str) -> None:
    llm.script(Reply.text("one"), Reply.text("two"), Reply.text("three"))
    provider = make(llm, http, kind)
    for _ in range(3):
        await collect(provider)
    assert len({request.peer for request in llm.requests}) == 1  # the stream is read to its end, not cut


@KINDS
async def test_a_tool_call_split_across_chunks(llm: FakeLLM, http: httpx.AsyncClient, kind: str) -> None:
    arguments = {"path": "notes/today.md", "limit": 40, "nested": {"flag": True, "list": [1, "two"]}}
    llm.script(Reply.tool_calls(ToolCallSpec("read", arguments, id="call_read")))
    events = await collect(make(llm, http, kind))
    assert events[0] == ToolCallStarted(id="call_read", name="read")
    done = completed(events)
    assert done.message.tool_calls == [ToolCall(id="call_read", name="read", arguments=arguments)]
    assert done.stop_reason == "tool_use"


@KINDS
async def test_several_calls_in_one_turn_keep_ids_names_arguments_and_order(
    llm: FakeLLM, http: httpx.AsyncClient, kind: str
) -> None:
    specs = [
        ToolCallSpec("read", {"path": "a.txt"}, id="c1"),
        ToolCallSpec("exec", {"command": "ls -la", "timeout": 5}, id="c2"),
        ToolCallSpec("web_search", {"query": "weather in Oslo"}, id="c3"),
    ]
    llm.script(Reply.tool_calls(*specs, text="Let me look."))
    events = await collect(make(llm, http, kind))
    started = [(event.id, event.name) for event in events if isinstance(event, ToolCallStarted)]
    assert started == [("c1", "read"), ("c2", "exec"), ("c3", "web_search")]
    assert isinstance(events[0], TextDelta)  # the leading text comes before the calls
    done = completed(events)
    assert done.message.text == "Let me look."
    assert [(call.id, call.name, call.arguments) for call in done.message.tool_calls] == [
        ("c1", "read", {"path": "a.txt"}),
        ("c2", "exec", {"command": "ls -la", "timeout": 5}),
        ("c3", "web_search", {"query": "weather in Oslo"}),
    ]


@KINDS
@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ('{"path": "a.txt"', "not valid JSON"),
        ("[1, 2, 3]", "an array, not a JSON object"),
        ('"just text"', "a string, not a JSON object"),
    ],
)
async def test_malformed_arguments_become_an_arguments_error(
    llm: FakeLLM, http: httpx.AsyncClient, kind: str, raw: str, expected: str
) -> None:
    llm.script(Reply.malformed_tool_call("read", raw))
    call = completed(await collect(make(llm, http, kind))).message.tool_calls[0]
    assert call.name == "read"
    assert call.arguments == {}
    assert call.arguments_error is not None
    assert expected in call.arguments_error
    assert raw in call.arguments_error  # the model sees what it sent


@KINDS
async def test_long_malformed_arguments_are_shown_truncated(llm: FakeLLM, http: httpx.AsyncClient, kind: str) -> None:
    raw = '{"text": "' + "x" * 500
    llm.script(Reply.malformed_tool_call("write", raw))
    call = completed(await collect(make(llm, http, kind))).message.tool_calls[0]
    assert call.arguments_error is not None
    assert raw[:200] in call.arguments_error
    assert raw[:201] not in call.arguments_error


@KINDS
@pytest.mark.parametrize(("cache_read", "cache_write"), [(0, 0), (1000, 200)])
async def test_usage_is_reported(
    llm: FakeLLM, http: httpx.AsyncClient, kind: str, cache_read: int, cache_write: int
) -> None:
    llm.script(Reply.text("ok", usage=(1234, 56), cache_read=cache_read, cache_write=cache_write))
    usage = completed(await collect(make(llm, http, kind))).usage
    assert usage == Usage(
        input_tokens=1234, output_tokens=56, cache_read_tokens=cache_read, cache_write_tokens=cache_write
    )  # input counts the whole prompt, though Anthropic's input_tokens leave the cached parts out


@pytest.mark.parametrize(
    "delta_usage",
    [
        {"output_tokens": 50},
        {"input_tokens": 10, "cache_creation_input_tokens": 200, "cache_read_input_tokens": 1000, "output_tokens": 50},
    ],
)
def test_anthropic_usage_repeated_in_message_delta_is_not_counted_twice(delta_usage: dict[str, int]) -> None:
    assembler = EventAssembler()
    start_usage = {"input_tokens": 10, "cache_creation_input_tokens": 200, "cache_read_input_tokens": 1000}
    assembler.feed("message_start", {"message": {"usage": start_usage | {"output_tokens": 1}}})
    assembler.feed("message_delta", {"delta": {"stop_reason": "end_turn"}, "usage": delta_usage})
    assembler.feed("message_stop", {})
    usage = assembler.completed().usage
    assert usage == Usage(input_tokens=1210, output_tokens=50, cache_read_tokens=1000, cache_write_tokens=200)


@pytest.mark.parametrize(
    ("usage", "expected"),
    [
        ({"prompt_tokens": 30, "completion_tokens": 4}, Usage(input_tokens=30, output_tokens=4)),
        (
            {"prompt_tokens": 900, "completion_tokens": 4, "prompt_tokens_details": {"cached_tokens": 768}},
            Usage(input_tokens=900, output_tokens=4, cache_read_tokens=768),
        ),
        (
            {"prompt_tokens": 900, "completion_tokens": 4, "prompt_tokens_details": {"cache_write_tokens": 850}},
            Usage(input_tokens=900, output_tokens=4, cache_write_tokens=850),
        ),
        (
            {"prompt_tokens": 9, "completion_tokens": 1, "prompt_tokens_details": None},
            Usage(input_tokens=9, output_tokens=1),
        ),
    ],
)
def test_openai_usage_with_and_without_cache_details(usage: dict[str, Any], expected: Usage) -> None:
    assembler = ChunkAssembler()
    assembler.feed({"choices": [], "usage": usage})
    assert assembler.completed().usage == expected


@KINDS
@pytest.mark.parametrize(
    ("reply", "stop_reason"),
    [
        (Reply.text("done", stop="end_turn"), "end_turn"),
        (Reply.text("cut off mid-sen", stop="max_tokens"), "max_tokens"),
        (Reply.text("no", stop="other"), "other"),
        (Reply.tool_calls(ToolCallSpec("read", {"path": "x"})), "tool_use"),
    ],
)
async def test_stop_reasons(llm: FakeLLM, http: httpx.AsyncClient, kind: str, reply: Reply, stop_reason: str) -> None:
    llm.script(reply)
    assert completed(await collect(make(llm, http, kind))).stop_reason == stop_reason


async def test_tool_fragments_without_usable_indexes_are_told_apart_by_id() -> None:
    # Gemini's OpenAI endpoint has sent every call with index 0; other servers send no index at all.
    assembler = ChunkAssembler()
    for fragment in (
        {"index": 0, "id": "a", "function": {"name": "read", "arguments": '{"path": "1"}'}},
        {"index": 0, "id": "b", "function": {"name": "read", "arguments": '{"path":'}},
        {"function": {"arguments": ' "2"}'}},
    ):
        assembler.feed({"choices": [{"delta": {"tool_calls": [fragment]}}]})
    assembler.feed({"choices": [{"delta": {}, "finish_reason": "stop"}]})
    done = assembler.completed()
    assert [(call.id, call.arguments) for call in done.message.tool_calls] == [
        ("a", {"path": "1"}),
        ("b", {"path": "2"}),
    ]
    assert done.stop_reason == "tool_use"  # calls win over a finish_reason of "stop"


# --- errors -------------------------------------------------------------------------------------------------------


@KINDS
async def test_401_is_auth_and_never_shows_the_key(llm: FakeLLM, http: httpx.AsyncClient, kind: str) -> None:
    llm.script(Reply.error(401))  # the fake echoes the key it received in its error message
    _, error = await failure(make(llm, http, kind, headers={"X-Org-Secret": "org-secret-value-42"}))
    assert (error.kind, error.status) == ("auth", 401)
    assert "401" in str(error)
    assert "***" in str(error)  # the provider's message is kept, the key taken out of it
    for text in (str(error), repr(error), *map(str, error.args)):
        assert KEY not in text
        assert "org-secret-value-42" not in text


@KINDS
async def test_a_key_passed_per_call_is_used_and_redacted(llm: FakeLLM, http: httpx.AsyncClient, kind: str) -> None:
    other_key = "sk-rotated-0000111122223333"
    llm.script(Reply.error(401))
    _, error = await failure_with_key(make(llm, http, kind), other_key)
    sent = llm.requests[0].headers
    assert other_key in (sent.get("authorization", "") + sent.get("x-api-key", ""))
    assert other_key not in str(error)


async def failure_with_key(provider: Provider, key: str) -> tuple[list[StreamEvent], ProviderError]:
    with pytest.raises(ProviderError) as caught:
        await collect(provider, api_key=key)
    return [], caught.value


@KINDS
async def test_429_is_rate_limit_with_retry_after(llm: FakeLLM, http: httpx.AsyncClient, kind: str) -> None:
    llm.script(Reply.error(429, retry_after=7))
    _, error = await failure(make(llm, http, kind))
    assert (error.kind, error.status, error.retry_after) == ("rate_limit", 429, 7.0)
    assert "429" in str(error)
    assert "rate limit" in str(error).lower()


@KINDS
async def test_retry_after_as_an_http_date(llm: FakeLLM, http: httpx.AsyncClient, kind: str) -> None:
    when = datetime.now(UTC) + timedelta(hours=1)
    llm.script(Reply.error(429, retry_after=format_datetime(when, usegmt=True)))
    _, error = await failure(make(llm, http, kind))
    assert error.retry_after is not None
    assert 3000 <= error.retry_after <= 3600  # an hour from when the server said it, less the time the call took


def test_parse_retry_after_forms() -> None:
    now = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)
    assert parse_retry_after(httpx.Headers({"retry-after": "12"}), now) == 12.0
    assert parse_retry_after(httpx.Headers({"retry-after": "Wed, 01 Jan 2025 12:00:30 GMT"}), now) == 30.0
    assert parse_retry_after(httpx.Headers({"retry-after": "Wed, 01 Jan 2025 11:00:00 GMT"}), now) == 0.0
    assert parse_retry_after(httpx.Headers({"retry-after-ms": "1500", "retry-after": "2"}), now) == 1.5
    assert parse_retry_after(httpx.Headers({"retry-after": "soon"}), now) is None
    assert parse_retry_after(httpx.Headers({}), now) is None


@KINDS
async def test_400_context_overflow(llm: FakeLLM, http: httpx.AsyncClient, kind: str) -> None:
    llm.script(Reply.context_overflow())
    _, error = await failure(make(llm, http, kind))
    assert (error.kind, error.status) == ("context_overflow", 400)
    assert ("maximum context length" if kind == "openai" else "prompt is too long") in str(error)


@KINDS
@pytest.mark.parametrize(
    ("reply", "kind_expected"),
    [
        (Reply.error(400, message="messages.0.content: field required"), "bad_request"),
        (Reply.error(404), "bad_request"),
        (Reply.error(403), "auth"),
        (Reply.error(500), "server"),
        (Reply.error(503), "server"),
        (Reply.error(529), "server"),
        (Reply.error(413, message="Too many tokens in the request; reduce your prompt."), "context_overflow"),
    ],
)
async def test_http_statuses(
    llm: FakeLLM, http: httpx.AsyncClient, kind: str, reply: Reply, kind_expected: str
) -> None:
    llm.script(reply)
    _, error = await failure(make(llm, http, kind))
    assert (error.kind, error.status) == (kind_expected, reply.status)
    assert f"HTTP {reply.status}" in str(error)


@KINDS
async def test_a_long_error_message_is_truncated(llm: FakeLLM, http: httpx.AsyncClient, kind: str) -> None:
    llm.script(Reply.error(400, message="bad " * 400))
    _, error = await failure(make(llm, http, kind))
    assert "bad bad" in str(error)
    assert len(str(error)) < 400


@KINDS
@pytest.mark.parametrize("abrupt", [True, False])
async def test_a_cut_stream_is_a_network_error(llm: FakeLLM, http: httpx.AsyncClient, kind: str, abrupt: bool) -> None:
    llm.script(Reply.cut_after_text("partial answ", abrupt=abrupt))
    events, error = await failure(make(llm, http, kind))
    assert "".join(event.text for event in events if isinstance(event, TextDelta)) == "partial answ"
    assert not any(isinstance(event, Completed) for event in events)
    assert error.kind == "network"
    assert "stream ended before the answer was complete" in str(error)


@KINDS
@pytest.mark.parametrize(
    ("error_type", "kind_expected"),
    [
        ("overloaded_error", "server"),
        ("server_error", "server"),
        ("rate_limit_error", "rate_limit"),
        ("invalid_request_error", "bad_request"),
    ],
)
async def test_an_error_event_mid_stream(
    llm: FakeLLM, http: httpx.AsyncClient, kind: str, error_type: str, kind_expected: str
) -> None:
    llm.script(Reply.stream_error(error_type, "Something went wrong upstream", after_text="Hello"))
    events, error = await failure(make(llm, http, kind))
    assert [event for event in events if isinstance(event, TextDelta)]  # what came before was delivered
    assert error.kind == kind_expected
    assert "Something went wrong upstream" in str(error)
    assert error_type in str(error)


@KINDS
async def test_an_overflow_reported_mid_stream(llm: FakeLLM, http: httpx.AsyncClient, kind: str) -> None:
    llm.script(Reply.stream_error("invalid_request_error", "prompt is too long: 300000 tokens > 200000 maximum"))
    _, error = await failure(make(llm, http, kind))
    assert error.kind == "context_overflow"


@KINDS
async def test_a_stalled_stream_times_out(llm: FakeLLM, http: httpx.AsyncClient, kind: str) -> None:
    llm.script(Reply.held("thinking"))  # never finished
    # The limit is on silence; it must not strike before the first words come (0.2 s at worst, on a busy machine).
    events, error = await failure(make(llm, http, kind, timeout_seconds=3))
    assert "".join(event.text for event in events if isinstance(event, TextDelta)) == "thinking"
    assert error.kind == "timeout"
    assert "nothing received for 3s" in str(error)


@KINDS
async def test_a_refused_connection_is_a_network_error(http: httpx.AsyncClient, kind: str) -> None:
    with refusing_port() as port:
        config = ProviderConfig.model_validate({"kind": kind, "base_url": f"http://127.0.0.1:{port}", "api_key": KEY})
        _, error = await failure(build_provider("fake", config, http))
    assert error.kind == "network"
    assert KEY not in str(error)


@KINDS
async def test_an_empty_script_answers_500_instead_of_hanging(llm: FakeLLM, http: httpx.AsyncClient, kind: str) -> None:
    _, error = await failure(make(llm, http, kind))
    assert error.kind == "server"
    assert "script ran out" in str(error)


# --- what goes on the wire ----------------------------------------------------------------------------------------

PNG = "iVBORw0KGgo="
READ_TOOL = ToolSpec(
    name="read",
    description="Read a file.",
    parameters={"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
)
CONVERSATION: list[Any] = [
    UserMessage(
        content=[TextBlock(text="What is in a.txt and this picture?"), ImageBlock(data=PNG, mime_type="image/png")]
    ),
    AssistantMessage(
        text="Reading both.",
        tool_calls=[
            ToolCall(id="c1", name="read", arguments={"path": "a.txt"}),
            ToolCall(id="c2", name="read", arguments={"path": "b.png"}),
        ],
    ),
    ToolResultMessage(call_id="c1", name="read", content=[TextBlock(text="hello from a")]),
    ToolResultMessage(call_id="c2", name="read", content=[ImageBlock(data=PNG, mime_type="image/png")], is_error=False),
    UserMessage.of("Also, be brief."),
]


def conversation_request(**fields: Any) -> ModelRequest:
    return ModelRequest(
        model="anthropic/claude-sonnet-4",
        system="You are terse.",
        messages=CONVERSATION,
        tools=[READ_TOOL],
        max_tokens=1000,
        **fields,
    )


async def test_openai_request_body_and_headers(llm: FakeLLM, http: httpx.AsyncClient) -> None:
    llm.script("ok")
    provider = make(llm, http, "openai", headers={"HTTP-Referer": "https://example.test"})
    await collect(provider, conversation_request(temperature=0.2))
    sent = llm.requests[0]
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert sent.headers["http-referer"] == "https://example.test"
    body = sent.body
    assert body["model"] == "anthropic/claude-sonnet-4"
    assert (body["stream"], body["stream_options"]) == (True, {"include_usage": True})
    assert (body["max_tokens"], body["temperature"]) == (1000, 0.2)
    assert body["tools"] == [
        {
            "type": "function",
            "function": {"name": "read", "description": "Read a file.", "parameters": READ_TOOL.parameters},
        }
    ]
    data_url = f"data:image/png;base64,{PNG}"
    marker = {"cache_control": {"type": "ephemeral"}}  # an Anthropic model behind OpenRouter caches only where marked
    assert body["messages"] == [
        {"role": "system", "content": [{"type": "text", "text": "You are terse."} | marker]},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is in a.txt and this picture?"},
                {"type": "image_url", "image_url": {"url": data_url}},
            ],
        },
        {
            "role": "assistant",
            "content": "Reading both.",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "read", "arguments": '{"path": "a.txt"}'}},
                {"id": "c2", "type": "function", "function": {"name": "read", "arguments": '{"path": "b.png"}'}},
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "hello from a"}]},
        {
            "role": "tool",
            "tool_call_id": "c2",
            "content": [{"type": "text", "text": "(1 image attached in the next message)"}],
        },
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Images returned by the tool calls above:"},
                {"type": "image_url", "image_url": {"url": data_url}},
            ],
        },
        {"role": "user", "content": [{"type": "text", "text": "Also, be brief."} | marker]},
    ]


async def test_openai_assistant_with_only_tool_calls_has_null_content(llm: FakeLLM, http: httpx.AsyncClient) -> None:
    llm.script("ok")
    call = ToolCall(id="c9", name="read", arguments={"path": "x"})
    messages: list[Any] = [
        UserMessage.of("go"),
        AssistantMessage(tool_calls=[call]),
        ToolResultMessage(call_id="c9", name="read", content=[TextBlock(text="x")]),
    ]
    await collect(make(llm, http, "openai"), ModelRequest(model="m", messages=messages))
    sent = llm.requests[0].body["messages"]
    assert sent[1]["content"] is None
    assert json.loads(sent[1]["tool_calls"][0]["function"]["arguments"]) == {"path": "x"}
    assert "tools" not in llm.requests[0].body  # no tools offered, no empty list sent


async def test_anthropic_request_body_and_headers(llm: FakeLLM, http: httpx.AsyncClient) -> None:
    llm.script("ok")
    await collect(make(llm, http, "anthropic"), conversation_request())
    sent = llm.requests[0]
    assert sent.path == "/v1/messages"
    assert sent.headers["x-api-key"] == KEY
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert sent.headers["content-type"] == "application/json"
    assert "authorization" not in sent.headers
    body = sent.body
    assert (body["model"], body["max_tokens"], body["stream"]) == ("anthropic/claude-sonnet-4", 1000, True)
    marker = {"cache_control": {"type": "ephemeral"}}
    assert body["system"] == [{"type": "text", "text": "You are terse."} | marker]
    assert body["tools"] == [{"name": "read", "description": "Read a file.", "input_schema": READ_TOOL.parameters}]
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "What is in a.txt and this picture?"}, image]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Reading both."},
                {"type": "tool_use", "id": "c1", "name": "read", "input": {"path": "a.txt"}},
                {"type": "tool_use", "id": "c2", "name": "read", "input": {"path": "b.png"}},
            ],
        },
        {
            "role": "user",  # both results and the next user text in one turn, so roles alternate
            "content": [
                {"type": "tool_result", "tool_use_id": "c1", "content": [{"type": "text", "text": "hello from a"}]},
                {"type": "tool_result", "tool_use_id": "c2", "content": [image]},
                {"type": "text", "text": "Also, be brief."} | marker,
            ],
        },
    ]


async def test_anthropic_error_results_and_tool_results_first(llm: FakeLLM, http: httpx.AsyncClient) -> None:
    llm.script("ok")
    messages: list[Any] = [
        UserMessage.of("go"),
        AssistantMessage(tool_calls=[ToolCall(id="t1", name="exec", arguments={"command": "false"})]),
        UserMessage.of("(a message that arrived during the run)"),
        ToolResultMessage(call_id="t1", name="exec", content=[TextBlock(text="exit 1")], is_error=True),
    ]
    await collect(make(llm, http, "anthropic"), ModelRequest(model="m", messages=messages))
    turns = llm.requests[0].body["messages"]
    assert [turn["role"] for turn in turns] == ["user", "assistant", "user"]
    assert turns[2]["content"][0] == {
        "type": "tool_result",
        "tool_use_id": "t1",
        "content": [{"type": "text", "text": "exit 1"}],
        "is_error": True,
    }
    assert turns[2]["content"][1]["type"] == "text"
    assert "system" not in llm.requests[0].body
    assert "tools" not in llm.requests[0].body


@KINDS
async def test_no_key_sends_no_auth_header(llm: FakeLLM, http: httpx.AsyncClient, kind: str) -> None:
    llm.script("ok")
    await collect(make(llm, http, kind, api_key=None))
    headers = llm.requests[0].headers
    assert "authorization" not in headers
    assert "x-api-key" not in headers


@KINDS
async def test_model_options_max_tokens_replace_the_request(llm: FakeLLM, http: httpx.AsyncClient, kind: str) -> None:
    llm.script("ok", "ok")
    provider = make(llm, http, kind, models={"big": {"max_tokens": "32000"}})
    await collect(provider, ask(model="big", max_tokens=4096))
    await collect(provider, ask(model="small", max_tokens=4096))
    assert [request.body["max_tokens"] for request in llm.requests] == [32000, 4096]


async def test_api_openai_com_gets_max_completion_tokens() -> None:
    config = ProviderConfig(kind="openai", base_url="https://api.openai.com/v1", api_key=KEY)
    body = OpenAIProvider("openai", config).request_body(ask(max_tokens=300))
    assert body["max_completion_tokens"] == 300
    assert "max_tokens" not in body


async def test_a_provider_without_a_client_makes_and_closes_its_own(llm: FakeLLM) -> None:
    llm.script("hello")
    provider = OpenAIProvider("own", llm.provider_config("openai"))
    try:
        assert completed(await collect(provider)).message.text == "hello"
    finally:
        await provider.aclose()


@KINDS
async def test_a_plugins_own_httpx_client_streams_the_same_answer(llm: FakeLLM, kind: str) -> None:
    llm.script("hello from httpx")
    async with httpx.AsyncClient() as own:  # not ours: the answer comes through httpx's own streaming
        assert completed(await collect(make(llm, own, kind))).message.text == "hello from httpx"
    assert len(llm.requests) == 1


# --- SSE parsing --------------------------------------------------------------------------------------------------


async def test_sse_parsing_follows_the_spec() -> None:
    async def lines() -> AsyncIterator[str]:
        for line in [
            ": keep-alive",
            "event: custom",
            "data: one",
            "data:two",
            "",
            "",
            "data: three\r",
            "",
            "data: lost",
        ]:
            yield line

    events = [(event.event, event.data) async for event in parse_sse(lines())]
    assert events == [("custom", "one\ntwo"), ("message", "three")]  # an event without its blank line is dropped


# --- config -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("openrouter/anthropic/claude-sonnet-4", ("openrouter", "anthropic/claude-sonnet-4")),
        ("openai/gpt-4o", ("openai", "gpt-4o")),
        ("ollama/llama3.1:8b", ("ollama", "llama3.1:8b")),
        (" anthropic/claude-3-5-haiku ", ("anthropic", "claude-3-5-haiku")),
    ],
)
def test_split_model(name: str, expected: tuple[str, str]) -> None:
    assert split_model(name) == expected


@pytest.mark.parametrize("name", ["gpt-4o", "/gpt-4o", "openai/", ""])
def test_split_model_rejects_names_without_a_provider(name: str) -> None:
    with pytest.raises(ValueError, match="<provider>/<model-id>"):
        split_model(name)


def test_providers_from_env() -> None:
    found = providers_from_env(
        {"OPENROUTER_API_KEY": "or-key", "OPENAI_API_KEY": "oa-key", "ANTHROPIC_API_KEY": "an-key", "HOME": "/root"}
    )
    assert {name: (config.kind, config.base_url, config.keys()) for name, config in found.items()} == {
        "openrouter": ("openai", "https://openrouter.ai/api/v1", ["or-key"]),
        "openai": ("openai", "https://api.openai.com/v1", ["oa-key"]),
        "anthropic": ("anthropic", "https://api.anthropic.com", ["an-key"]),
    }


def test_providers_from_env_skips_blank_keys_and_honours_base_urls() -> None:
    found = providers_from_env(
        {"OPENAI_API_KEY": "k", "OPENAI_BASE_URL": "http://127.0.0.1:11434/v1/", "ANTHROPIC_API_KEY": "  "}
    )
    assert list(found) == ["openai"]
    assert found["openai"].base_url == "http://127.0.0.1:11434/v1"
    assert providers_from_env({}) == {}


def test_provider_config_from_yaml_strings() -> None:
    config = ProviderConfig.model_validate(
        {
            "kind": "OpenAI",
            "base_url": "http://127.0.0.1:8080/v1/",
            "api_key": "k1",
            "api_keys": "k2, k1,k3",
            "timeout_seconds": "30",
            "models": {"llama3": {"tool_dispatch": "XML", "max_tokens": "2048"}},
        }
    )
    assert (config.kind, config.base_url, config.timeout_seconds) == ("openai", "http://127.0.0.1:8080/v1", 30.0)
    assert config.keys() == ["k1", "k2", "k3"]
    assert config.model_options("llama3").tool_dispatch == "xml"
    assert config.model_options("llama3").max_tokens == 2048
    assert config.model_options("other").tool_dispatch == "native"


def test_provider_config_keys_are_optional() -> None:
    local = ProviderConfig(kind="openai", base_url="http://127.0.0.1:11434/v1")
    assert local.keys() == []
    assert ProviderConfig(kind="openai", base_url="http://x", api_key="").keys() == []  # ${VAR:-} left empty


@pytest.mark.parametrize(
    ("fields", "where"),
    [
        ({"base_url": "api.openai.com/v1"}, "base_url"),
        ({"timeout_seconds": "0"}, "timeout_seconds"),
        ({"api_key_env": "X"}, "api_key_env"),
        ({"models": {"m": {"tool_dispatch": "json"}}}, "tool_dispatch"),
        ({"models": {"m": {"temperature": 1}}}, "temperature"),
    ],
)
def test_provider_config_rejects(fields: dict[str, Any], where: str) -> None:
    with pytest.raises(ValidationError) as caught:
        ProviderConfig.model_validate({"kind": "openai", "base_url": "https://api.openai.com/v1"} | fields)
    assert where in str(caught.value)


def test_build_provider_and_dialects() -> None:
    openai = build_provider("openrouter", ProviderConfig(kind="openai", base_url="https://openrouter.ai/api/v1"))
    anthropic = build_provider("claude", ProviderConfig(kind="anthropic", base_url="https://api.anthropic.com"))
    assert isinstance(openai, OpenAIProvider)
    assert isinstance(anthropic, AnthropicProvider)
    assert (openai.name, anthropic.name) == ("openrouter", "claude")
    assert openai.dialect("google/Gemini-2.5-Pro") == "gemini"
    assert openai.dialect("openai/gpt-4o") == "openai"
    assert anthropic.dialect("claude-sonnet-4") == "anthropic"
    assert anthropic.url == "https://api.anthropic.com/v1/messages"
    proxied = ProviderConfig(kind="anthropic", base_url="https://proxy.example/anthropic/v1")
    assert AnthropicProvider("p", proxied).url == "https://proxy.example/anthropic/v1/messages"
