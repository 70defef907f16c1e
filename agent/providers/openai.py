"""OpenAI-compatible Chat Completions, streamed: OpenAI, OpenRouter, Gemini's OpenAI endpoint, Ollama, llama.cpp."""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from agent.messages import (
    AssistantMessage,
    ContentBlock,
    ImageBlock,
    Message,
    TextBlock,
    ToolCall,
    ToolResultMessage,
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

_STOP_REASONS: dict[str, StopReason] = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
}
# api.openai.com rejects `max_tokens` for its reasoning models; most compatible servers only know `max_tokens`.
_MAX_COMPLETION_TOKENS_HOSTS = frozenset({"api.openai.com"})
# Endpoints that cache a repeated prefix by themselves and document no `cache_control` in content parts.
IMPLICIT_CACHE_HOSTS = frozenset({"api.openai.com", "generativelanguage.googleapis.com"})


class OpenAIProvider:
    """A Chat Completions endpoint (`POST {base_url}/chat/completions`, `stream: true`)."""

    def __init__(self, name: str, config: ProviderConfig, client: httpx.AsyncClient | None = None) -> None:
        self.name = name
        self.config = config
        self._sse = SSEClient(name, client, config.timeout_seconds, [*config.keys(), *config.headers.values()])
        host = urlsplit(config.base_url).hostname or ""
        self._max_tokens_field = "max_completion_tokens" if host in _MAX_COMPLETION_TOKENS_HOSTS else "max_tokens"
        self._may_mark = config.cache == "auto" and host not in IMPLICIT_CACHE_HOSTS

    @property
    def url(self) -> str:
        return f"{self.config.base_url}/chat/completions"

    def dialect(self, model: str) -> SchemaDialect:
        """Gemini models (also behind OpenRouter) need the Gemini schema subset; the rest take OpenAI's."""
        return "gemini" if "gemini" in model.lower() else "openai"

    def headers(self, api_key: str | None) -> dict[str, str]:
        """The request headers: bearer auth when there is a key, then the configured headers."""
        headers = {"accept": "text/event-stream"}
        if api_key:
            headers["authorization"] = f"Bearer {api_key}"
        return headers | self.config.headers

    def request_body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body for `request`: its settings, then tools and messages (the system prompt first), in that
        order, so that the next turn's body starts with this one's bytes up to the end of its conversation."""
        options = self.config.model_options(request.model)
        body: dict[str, Any] = {
            "model": request.model,
            "stream": True,
            "stream_options": {"include_usage": True},
            self._max_tokens_field: options.max_tokens or request.max_tokens,
        }
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if request.thinking != "off":
            body["reasoning_effort"] = request.thinking
        if request.tools:
            body["tools"] = [openai_tool(tool) for tool in request.tools]
        body["messages"] = openai_messages(request.system, request.messages)
        if self._may_mark and needs_cache_markers(request.model):
            mark_breakpoints(body["messages"])
        return body

    async def stream(self, request: ModelRequest, *, api_key: str | None = None) -> AsyncIterator[StreamEvent]:
        """Stream one call: TextDelta/ToolCallStarted as they arrive, then one Completed; ProviderError on failure."""
        key = api_key if api_key is not None else next(iter(self.config.keys()), None)
        self._sse.add_secret(key)
        assembler = ChunkAssembler()
        finished = False
        events = self._sse.events(self.url, body=self.request_body(request), headers=self.headers(key))
        async with aclosing(events):
            async for event in events:
                if event.data.strip() == "[DONE]":
                    finished = True
                    break
                chunk = self._sse.json_object(event.data)
                if chunk.get("error"):
                    raise self._sse.stream_error(chunk)
                for out in assembler.feed(chunk):
                    yield out
        if not finished:
            raise self._sse.ended_early()
        yield assembler.completed()

    async def aclose(self) -> None:
        """Close the HTTP client if the provider created it."""
        await self._sse.aclose()


@dataclass
class _CallDraft:
    id: str = ""
    name: str = ""
    argument_parts: list[str] = field(default_factory=list)


class ChunkAssembler:
    """Builds the assistant message from streamed chunks and says what each chunk adds."""

    def __init__(self) -> None:
        self._text: list[str] = []
        self._calls: list[_CallDraft] = []
        self._by_index: dict[int, _CallDraft] = {}
        self._finish_reason: str | None = None
        self._usage = Usage()

    def feed(self, chunk: dict[str, Any]) -> list[StreamEvent]:
        """Take one chunk; return the events it produces."""
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self._usage = openai_usage(usage)
        events: list[StreamEvent] = []
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict):
                continue
            delta = choice.get("delta") or {}
            content = delta.get("content")
            if isinstance(content, str) and content:
                self._text.append(content)
                events.append(TextDelta(text=content))
            for fragment in delta.get("tool_calls") or []:
                if isinstance(fragment, dict):
                    events.extend(self._tool_fragment(fragment))
            if choice.get("finish_reason"):
                self._finish_reason = str(choice["finish_reason"])
        return events

    def completed(self) -> Completed:
        """The whole message, once the stream has ended."""
        calls = []
        for draft in self._calls:
            if not draft.name:
                continue  # fragments that never named a tool cannot be called
            arguments, problem = parse_tool_arguments("".join(draft.argument_parts))
            calls.append(ToolCall(id=draft.id, name=draft.name, arguments=arguments, arguments_error=problem))
        stop = "tool_use" if calls else _STOP_REASONS.get(self._finish_reason or "", "other")
        message = AssistantMessage(text="".join(self._text), tool_calls=calls)
        return Completed(message=message, stop_reason=stop, usage=self._usage)

    def _tool_fragment(self, fragment: dict[str, Any]) -> list[StreamEvent]:
        index = fragment.get("index")
        call_id = fragment.get("id") or ""
        # Some servers leave out the index: then a fragment continues the last call unless its id is new.
        last = self._calls[-1] if self._calls else None
        draft = self._by_index.get(index) if isinstance(index, int) else last
        # Some servers give every call index 0; a different id still means a different call.
        if draft is None or (call_id and draft.id and call_id != draft.id):
            draft = _CallDraft()
            self._calls.append(draft)
            if isinstance(index, int):
                self._by_index[index] = draft
        if call_id and not draft.id:
            draft.id = str(call_id)
        function = fragment.get("function") or {}
        events: list[StreamEvent] = []
        name = function.get("name")
        if isinstance(name, str) and name and not draft.name:
            draft.name = name
            draft.id = draft.id or f"call_{secrets.token_hex(6)}"
            events.append(ToolCallStarted(id=draft.id, name=name))
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            draft.argument_parts.append(arguments)
        elif isinstance(arguments, dict):  # a few servers send the object itself
            draft.argument_parts.append(json.dumps(arguments))
        return events


def openai_usage(usage: dict[str, Any]) -> Usage:
    """A `usage` object as Usage: `prompt_tokens` is the whole prompt, `prompt_tokens_details.cached_tokens` the
    part read from the cache and (OpenRouter) `prompt_tokens_details.cache_write_tokens` the part written to it."""
    details = usage.get("prompt_tokens_details")
    details = details if isinstance(details, dict) else {}
    return Usage(
        input_tokens=int(usage.get("prompt_tokens") or 0),
        output_tokens=int(usage.get("completion_tokens") or 0),
        cache_read_tokens=int(details.get("cached_tokens") or 0),
        cache_write_tokens=int(details.get("cache_write_tokens") or 0),
    )


def needs_cache_markers(model: str) -> bool:
    """Whether `model` caches only up to `cache_control` markers: Anthropic's and Google's Gemini models behind an
    OpenAI-compatible router such as OpenRouter (ids `anthropic/...`, or naming `claude` or `gemini`, which covers
    `google/gemini-...`). OpenAI's and most other models cache a repeated prefix by themselves."""
    lowered = model.lower()
    return lowered.startswith("anthropic/") or "claude" in lowered or "gemini" in lowered


def mark_breakpoints(messages: list[dict[str, Any]]) -> None:
    """Mark the system message (caching tools and system prompt) and the last message (caching the conversation)
    on their last text part. Every text content of a system, user or tool message becomes a list of parts, so a
    message marked in one request and unmarked in the next differs by its marker alone."""
    for message in messages:
        content = message.get("content")
        if message["role"] != "assistant" and isinstance(content, str) and content:  # "" is no valid part
            message["content"] = [{"type": "text", "text": content}]
    if messages and messages[0]["role"] == "system":
        _mark_last_text(messages[0])
    if messages:
        _mark_last_text(messages[-1])


def _mark_last_text(message: dict[str, Any]) -> None:
    content = message.get("content")
    texts = [part for part in content if part.get("type") == "text"] if isinstance(content, list) else []
    if texts:  # markers go on text parts only; an assistant message with only tool calls has none
        mark_for_cache(texts[-1])


def openai_tool(tool: ToolSpec) -> dict[str, Any]:
    """A tool as Chat Completions takes it."""
    return {
        "type": "function",
        "function": {"name": tool.name, "description": tool.description, "parameters": tool.parameters},
    }


def openai_messages(system: str, messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The conversation as Chat Completions messages.

    Tool messages carry text only, so images a tool returned follow the run of tool messages in one user message.
    """
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    pending_images: list[ImageBlock] = []
    for message in messages:
        if pending_images and not isinstance(message, ToolResultMessage):
            out.append(_tool_images_message(pending_images))
            pending_images = []
        if isinstance(message, UserMessage):
            out.append({"role": "user", "content": _user_content(message.content)})
        elif isinstance(message, AssistantMessage):
            out.append(_assistant(message))
        else:
            images = [block for block in message.content if isinstance(block, ImageBlock)]
            pending_images.extend(images)
            out.append({"role": "tool", "tool_call_id": message.call_id, "content": _tool_text(message, len(images))})
    if pending_images:
        out.append(_tool_images_message(pending_images))
    return out


def _image_part(block: ImageBlock) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": f"data:{block.mime_type};base64,{block.data}"}}


def _user_content(blocks: Sequence[ContentBlock]) -> str | list[dict[str, Any]]:
    # Plain text as a string: several local servers accept nothing else.
    if all(isinstance(block, TextBlock) for block in blocks):
        return "\n".join(block.text for block in blocks if isinstance(block, TextBlock))
    return [
        {"type": "text", "text": block.text} if isinstance(block, TextBlock) else _image_part(block) for block in blocks
    ]


def _assistant(message: AssistantMessage) -> dict[str, Any]:
    out: dict[str, Any] = {"role": "assistant", "content": message.text or (None if message.tool_calls else "")}
    if message.tool_calls:
        out["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": json.dumps(call.arguments, ensure_ascii=False)},
            }
            for call in message.tool_calls
        ]
    return out


def _tool_text(message: ToolResultMessage, images: int) -> str:
    text = "\n".join(block.text for block in message.content if isinstance(block, TextBlock))
    if images:
        note = f"({images} image{'s' if images > 1 else ''} attached in the next message)"
        text = f"{text}\n{note}" if text else note
    return text


def _tool_images_message(images: list[ImageBlock]) -> dict[str, Any]:
    parts: list[dict[str, Any]] = [{"type": "text", "text": "Images returned by the tool calls above:"}]
    return {"role": "user", "content": parts + [_image_part(image) for image in images]}
