"""Anthropic Messages API, streamed: `POST {base_url}/v1/messages` with `stream: true`."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agent.messages import (
    AssistantMessage,
    ContentBlock,
    ImageBlock,
    Message,
    TextBlock,
    ToolCall,
    Usage,
    UserMessage,
)
from agent.providers.base import (
    Completed,
    ModelRequest,
    StopReason,
    StreamEvent,
    TextDelta,
    ToolCallStarted,
    ToolSpec,
)
from agent.providers.sse import SSEClient, mark_for_cache, parse_tool_arguments
from tools.schema import SchemaDialect

if TYPE_CHECKING:
    import httpx

    from agent.providers.config import ProviderConfig

API_VERSION = "2023-06-01"
_INPUT_USAGE = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
_STOP_REASONS: dict[str, StopReason] = {
    "end_turn": "end_turn",
    "stop_sequence": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
}


THINKING_BUDGETS = {"low": 1024, "medium": 4096, "high": 16384}


class AnthropicProvider:
    """An Anthropic Messages endpoint (or one that speaks its protocol)."""

    def __init__(self, name: str, config: ProviderConfig, client: httpx.AsyncClient | None = None) -> None:
        self.name = name
        self.config = config
        self._sse = SSEClient(name, client, config.timeout_seconds, [*config.keys(), *config.headers.values()])

    @property
    def url(self) -> str:
        base = self.config.base_url
        return f"{base}/messages" if base.endswith("/v1") else f"{base}/v1/messages"

    def dialect(self, model: str) -> SchemaDialect:
        return "anthropic"

    def headers(self, api_key: str | None) -> dict[str, str]:
        """The request headers: `x-api-key` when there is a key, the API version, then the configured headers."""
        headers = {"accept": "text/event-stream", "anthropic-version": API_VERSION, "content-type": "application/json"}
        if api_key:
            headers["x-api-key"] = api_key
        return headers | self.config.headers

    def request_body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body for `request`: its settings, then tools, system prompt and messages, in that order, so that
        the next turn's body starts with this one's bytes up to the end of its conversation (the cached prefix)."""
        options = self.config.model_options(request.model)
        body: dict[str, Any] = {
            "model": request.model,
            "max_tokens": options.max_tokens or request.max_tokens,
            "stream": True,
        }
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if request.thinking != "off":
            budget = THINKING_BUDGETS[request.thinking]
            body["thinking"] = {"type": "enabled", "budget_tokens": budget}
            body["max_tokens"] = max(body["max_tokens"], budget + 1024)  # the budget must fit inside max_tokens
            body.pop("temperature", None)  # extended thinking does not take a temperature
        if request.tools:
            body["tools"] = [anthropic_tool(tool) for tool in request.tools]
        if request.system:
            body["system"] = [{"type": "text", "text": request.system}]
        body["messages"] = anthropic_messages(request.messages)
        if self.config.cache == "auto":
            mark_breakpoints(body)
        return body

    async def stream(self, request: ModelRequest, *, api_key: str | None = None) -> AsyncIterator[StreamEvent]:
        """Stream one call: TextDelta/ToolCallStarted as they arrive, then one Completed; ProviderError on failure."""
        key = api_key if api_key is not None else next(iter(self.config.keys()), None)
        self._sse.add_secret(key)
        assembler = EventAssembler()
        events = self._sse.events(self.url, body=self.request_body(request), headers=self.headers(key))
        async with aclosing(events):
            async for event in events:
                data = self._sse.json_object(event.data)
                kind = str(data.get("type") or event.event)
                if kind == "error":
                    raise self._sse.stream_error(data)
                for out in assembler.feed(kind, data):
                    yield out
                if assembler.finished:
                    break
        if not assembler.finished:
            raise self._sse.ended_early()
        yield assembler.completed()

    async def aclose(self) -> None:
        """Close the HTTP client if the provider created it."""
        await self._sse.aclose()


@dataclass
class _ToolUseDraft:
    id: str
    name: str
    initial_input: dict[str, Any]
    json_parts: list[str] = field(default_factory=list)


class EventAssembler:
    """Builds the assistant message from Messages stream events and says what each event adds."""

    def __init__(self) -> None:
        self.finished = False
        self._text: list[str] = []
        self._calls: list[_ToolUseDraft] = []
        self._by_index: dict[int, _ToolUseDraft] = {}
        self._stop_reason: str | None = None
        self._inputs: dict[str, int] = {}  # the latest figure of each of _INPUT_USAGE
        self._output_tokens = 0

    def feed(self, kind: str, data: dict[str, Any]) -> list[StreamEvent]:
        """Take one event (its type and data); return the stream events it produces."""
        if kind == "message_start":
            message = data.get("message") or {}
            self._count(message.get("usage"))
        elif kind == "content_block_start":
            return self._block_start(data.get("index"), data.get("content_block") or {})
        elif kind == "content_block_delta":
            return self._block_delta(data.get("index"), data.get("delta") or {})
        elif kind == "message_delta":
            delta = data.get("delta") or {}
            if delta.get("stop_reason"):
                self._stop_reason = str(delta["stop_reason"])
            self._count(data.get("usage"))
        elif kind == "message_stop":
            self.finished = True
        return []  # ping, content_block_stop and event types added later carry nothing we use

    def completed(self) -> Completed:
        """The whole message, once message_stop has arrived."""
        calls = []
        for draft in self._calls:
            raw = "".join(draft.json_parts)
            if not raw.strip() and draft.initial_input:
                arguments, problem = draft.initial_input, None
            else:
                arguments, problem = parse_tool_arguments(raw)
            calls.append(ToolCall(id=draft.id, name=draft.name, arguments=arguments, arguments_error=problem))
        stop = "tool_use" if calls else _STOP_REASONS.get(self._stop_reason or "", "other")
        return Completed(
            message=AssistantMessage(text="".join(self._text), tool_calls=calls),
            stop_reason=stop,
            usage=self._usage(),
        )

    def _usage(self) -> Usage:
        # Input = uncached + written to cache + read from cache: the prompt's real size, for context accounting.
        return Usage(
            input_tokens=sum(self._inputs.values()),
            output_tokens=self._output_tokens,
            cache_read_tokens=self._inputs.get("cache_read_input_tokens", 0),
            cache_write_tokens=self._inputs.get("cache_creation_input_tokens", 0),
        )

    def _count(self, usage: Any) -> None:
        if not isinstance(usage, dict):
            return
        # message_delta may repeat message_start's input figures (cumulative) or leave them out: the latest wins.
        self._inputs.update({name: usage[name] for name in _INPUT_USAGE if isinstance(usage.get(name), int)})
        if isinstance(usage.get("output_tokens"), int):
            self._output_tokens = usage["output_tokens"]  # cumulative in message_delta

    def _block_start(self, index: Any, block: dict[str, Any]) -> list[StreamEvent]:
        if block.get("type") == "text" and block.get("text"):
            self._text.append(str(block["text"]))
            return [TextDelta(text=str(block["text"]))]
        if block.get("type") != "tool_use":
            return []  # thinking and server-side tool blocks are not part of the answer
        initial = block.get("input")
        draft = _ToolUseDraft(
            id=str(block.get("id") or f"toolu_{len(self._calls)}"),
            name=str(block.get("name") or ""),
            initial_input=initial if isinstance(initial, dict) else {},
        )
        self._calls.append(draft)
        if isinstance(index, int):
            self._by_index[index] = draft
        return [ToolCallStarted(id=draft.id, name=draft.name)]

    def _block_delta(self, index: Any, delta: dict[str, Any]) -> list[StreamEvent]:
        if delta.get("type") == "text_delta" and delta.get("text"):
            self._text.append(str(delta["text"]))
            return [TextDelta(text=str(delta["text"]))]
        if delta.get("type") == "input_json_delta" and isinstance(index, int) and index in self._by_index:
            self._by_index[index].json_parts.append(str(delta.get("partial_json") or ""))
        return []


def anthropic_tool(tool: ToolSpec) -> dict[str, Any]:
    """A tool as the Messages API takes it."""
    return {"name": tool.name, "description": tool.description, "input_schema": tool.parameters}


def mark_breakpoints(body: dict[str, Any]) -> None:
    """Mark two of the four cache breakpoints the API allows: the system block (else the last tool), which caches
    tools and system prompt, and the last message's last block, which caches the whole conversation."""
    prefix = body.get("system") or body.get("tools")
    if prefix:
        mark_for_cache(prefix[-1])
    if body["messages"]:
        mark_for_cache(body["messages"][-1]["content"][-1])  # turns are never empty, and carry no thinking blocks


def anthropic_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The conversation as strictly alternating user/assistant turns.

    Tool results become `tool_result` blocks in a user turn; consecutive turns of one role are merged, and in a
    user turn the tool results come first, as the API requires.
    """
    turns: list[dict[str, Any]] = []
    for message in messages:
        if isinstance(message, UserMessage):
            role, blocks = "user", _content_blocks(message.content)
        elif isinstance(message, AssistantMessage):
            role, blocks = "assistant", _assistant_blocks(message)
        else:
            result: dict[str, Any] = {"type": "tool_result", "tool_use_id": message.call_id}
            content = _content_blocks(message.content)
            if content:
                result["content"] = content
            if message.is_error:
                result["is_error"] = True
            role, blocks = "user", [result]
        if not blocks:
            continue  # the API rejects empty turns
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    for turn in turns:
        if turn["role"] == "user":
            turn["content"].sort(key=lambda block: block["type"] != "tool_result")
    return turns


def _content_blocks(blocks: Sequence[ContentBlock]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for block in blocks:
        if isinstance(block, TextBlock):
            if block.text:  # the API rejects empty text blocks
                out.append({"type": "text", "text": block.text})
        elif isinstance(block, ImageBlock):
            source = {"type": "base64", "media_type": block.mime_type, "data": block.data}
            out.append({"type": "image", "source": source})
    return out


def _assistant_blocks(message: AssistantMessage) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = [{"type": "text", "text": message.text}] if message.text else []
    blocks.extend(
        {"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments} for call in message.tool_calls
    )
    return blocks
