"""A real LLM server on 127.0.0.1 that streams scripted replies in OpenAI Chat Completions and Anthropic Messages form.

    async with FakeLLM() as llm:
        llm.script(Reply.text("hello"), Reply.tool_calls(ToolCallSpec("read", {"path": "a"})))
        config = llm.provider_config("openai", api_key="sk-test")   # or "anthropic"
        ...                                                          # call the provider
        assert llm.requests[0].body["model"] == "gpt-test"

Replies are consumed one per request; the same reply renders in whichever protocol the request's path asks for
(`/chat/completions`, also under any prefix such as `/v1`, or `/v1/messages`). When the script runs out the server
answers 500 saying so, so a test fails instead of hanging. Error bodies for 401 echo the key the client sent, the
worst a real proxy might do, so that tests can check that the key never reaches an error message.

A model caught mid-answer is `Reply.held(...)`: it writes its first words and goes on only when the test calls
`llm.release()`, so what a test sees never depends on how fast the machine is.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections import deque
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest
from aiohttp import BodyPartReader, web

from agent.providers.config import ProviderConfig

Protocol = Literal["openai", "anthropic"]
Ending = Literal["done", "cut", "eof", "error", "stall"]
NeutralStop = Literal["end_turn", "max_tokens", "other"]

_OPENAI_FINISH = {"end_turn": "stop", "max_tokens": "length", "other": "content_filter"}
_ANTHROPIC_STOP = {"end_turn": "end_turn", "max_tokens": "max_tokens", "other": "refusal"}
# status -> (error type, code, message) in each provider's style; {key} is the key the client sent
_OPENAI_ERRORS: dict[int, tuple[str, str | None, str]] = {
    400: ("invalid_request_error", None, "Invalid request."),
    401: ("invalid_request_error", "invalid_api_key", "Incorrect API key provided: {key}."),
    403: ("permission_error", None, "You are not allowed to use this model."),
    404: ("invalid_request_error", "model_not_found", "The model does not exist."),
    429: ("requests", "rate_limit_exceeded", "Rate limit reached for requests. Please try again later."),
    500: ("server_error", None, "The server had an error while processing your request."),
    503: ("server_error", None, "The engine is currently overloaded."),
}
_ANTHROPIC_ERRORS: dict[int, tuple[str, str]] = {
    400: ("invalid_request_error", "Invalid request."),
    401: ("authentication_error", "invalid x-api-key: {key}"),
    403: ("permission_error", "Your API key does not have permission to use the specified resource."),
    404: ("not_found_error", "The requested resource could not be found."),
    413: ("request_too_large", "Request exceeds the maximum allowed number of bytes."),
    429: ("rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit."),
    500: ("api_error", "Internal server error."),
    529: ("overloaded_error", "Overloaded"),
}
OPENAI_OVERFLOW = (
    "This model's maximum context length is 128000 tokens. However, your messages resulted in 200512 tokens. "
    "Please reduce the length of the messages."
)
ANTHROPIC_OVERFLOW = "prompt is too long: 210450 tokens > 200000 maximum"


@dataclass(frozen=True)
class ToolCallSpec:
    """A tool call the fake model makes. A `str` for arguments is sent verbatim (e.g. malformed JSON)."""

    name: str
    arguments: dict[str, Any] | str = field(default_factory=dict)
    id: str | None = None

    def raw_arguments(self) -> str:
        return self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments)


@dataclass(frozen=True)
class Reply:
    """One scripted answer. Build it with the class methods; the fields say how it is rendered."""

    answer: str = ""
    calls: tuple[ToolCallSpec, ...] = ()
    stop: NeutralStop = "end_turn"
    usage: tuple[int, int] = (21, 8)  # (input tokens: the whole prompt, output tokens)
    cache_read: int = 0  # of the input tokens, how many the prompt cache served
    cache_write: int = 0  # of the input tokens, how many were written to the prompt cache
    ending: Ending = "done"
    status: int = 200
    error_type: str | None = None
    error_message: str | None = None
    retry_after: str | None = None
    overflow: bool = False
    stall_seconds: float = 0.0
    chunk_size: int = 3
    frame_delay: float = 0.0  # seconds between the frames of the stream's body
    hold: bool = False  # after `answer`, wait for FakeLLM.release() (or the server's stop); then `then` and the end
    then: str = ""

    @classmethod
    def text(
        cls,
        text: str,
        *,
        stop: NeutralStop = "end_turn",
        usage: tuple[int, int] = (21, 8),
        cache_read: int = 0,
        cache_write: int = 0,
    ) -> Reply:
        """Text streamed in small chunks."""
        return cls(answer=text, stop=stop, usage=usage, cache_read=cache_read, cache_write=cache_write)

    @classmethod
    def slow(cls, text: str, seconds: float, *, pieces: int = 10) -> Reply:
        """Text in `pieces` chunks spread over `seconds`, as a model writing at human speed. Pacing only: on a busy
        machine the client may see all of it at once, so a test that must catch the answer unfinished uses held()."""
        size = max(1, -(-len(text) // pieces))
        return cls(answer=text, chunk_size=size, frame_delay=seconds / pieces)

    @classmethod
    def tool_calls(
        cls,
        *calls: ToolCallSpec,
        text: str = "",
        usage: tuple[int, int] = (21, 8),
        cache_read: int = 0,
        cache_write: int = 0,
    ) -> Reply:
        """One or several tool calls (arguments split across chunks), after optional text."""
        return cls(answer=text, calls=calls, usage=usage, cache_read=cache_read, cache_write=cache_write)

    @classmethod
    def malformed_tool_call(cls, name: str, raw_arguments: str) -> Reply:
        """A tool call whose arguments are sent exactly as given."""
        return cls(calls=(ToolCallSpec(name, raw_arguments, id="call_bad"),))

    @classmethod
    def cut_after_text(cls, text: str, *, abrupt: bool = True) -> Reply:
        """Some text, then the stream stops without its end marker: the connection is dropped (abrupt) or the
        HTTP body simply ends."""
        return cls(answer=text, ending="cut" if abrupt else "eof")

    @classmethod
    def error(
        cls,
        status: int,
        *,
        message: str | None = None,
        retry_after: float | str | None = None,
        error_type: str | None = None,
    ) -> Reply:
        """An HTTP error in the provider's style; `retry_after` becomes the Retry-After header."""
        return cls(
            status=status,
            error_type=error_type,
            error_message=message,
            retry_after=None if retry_after is None else str(retry_after),
        )

    @classmethod
    def context_overflow(cls) -> Reply:
        """HTTP 400 saying the prompt is too long, as OpenAI or Anthropic word it."""
        return cls(status=400, overflow=True)

    @classmethod
    def stream_error(
        cls, error_type: str = "overloaded_error", message: str = "Overloaded", *, after_text: str = ""
    ) -> Reply:
        """An error event in the middle of a 200 stream (after `after_text`)."""
        return cls(answer=after_text, ending="error", error_type=error_type, error_message=message)

    @classmethod
    def held(cls, text: str, *, then: str = "") -> Reply:
        """`text`, then nothing until the test calls `release()` on the server (an answer still being written for
        exactly as long as the test needs), then `then` and the end. When the server stops first, the stream just
        stops, as a stall's does."""
        return cls(answer=text, hold=True, then=then)

    @classmethod
    def stall(cls, seconds: float, *, after_text: str = "") -> Reply:
        """Headers and `after_text`, then silence for `seconds` (cut short when the server stops), then the end."""
        return cls(answer=after_text, ending="stall", stall_seconds=seconds)


@dataclass(frozen=True)
class RecordedRequest:
    """What a client sent: method, path, headers (lowercased names), the JSON body, the client's address (the
    same one on two requests means the connection was kept), and the body's bytes as they arrived."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    peer: tuple[str, int] | None = None
    raw: bytes = b""


def _pieces(text: str, size: int) -> list[str]:
    return [text[start : start + size] for start in range(0, len(text), size)] if text else []


def _openai_frame(payload: Any) -> bytes:
    return f"data: {json.dumps(payload)}\n\n".encode()


def _anthropic_frame(event: str, payload: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps({'type': event, **payload})}\n\n".encode()


def _text_pieces(reply: Reply) -> tuple[list[str], int]:
    """The chunks of the reply's text (`answer`, then a held reply's `then`), and how many of them are `answer`."""
    first = _pieces(reply.answer, reply.chunk_size)
    return first + _pieces(reply.then, reply.chunk_size), len(first)


def _openai_frames(reply: Reply, model: str, include_usage: bool) -> tuple[list[bytes], int, list[bytes]]:
    """(the body of the stream, the number of its frames that come before a hold, its closing frames)."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        header = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": model}
        return _openai_frame(header | {"choices": [choice]})

    pieces, answered = _text_pieces(reply)
    body = [chunk({"role": "assistant", "content": ""})]
    held_at = len(body) + answered
    body += [chunk({"content": piece}) for piece in pieces]
    for index, call in enumerate(reply.calls):
        first = {"index": index, "id": call.id or f"call_{index + 1}", "type": "function"}
        body.append(chunk({"tool_calls": [first | {"function": {"name": call.name, "arguments": ""}}]}))
        for piece in _pieces(call.raw_arguments(), 5):
            body.append(chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}))
    finish = "tool_calls" if reply.calls else _OPENAI_FINISH[reply.stop]
    closing = [chunk({}, finish)]
    if include_usage:
        prompt, completion = reply.usage
        details = {"cached_tokens": reply.cache_read}
        if reply.cache_write:  # OpenRouter reports what it wrote to the cache too
            details["cache_write_tokens"] = reply.cache_write
        usage = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": details,
        }
        closing.append(_openai_frame({"id": "chatcmpl-fake", "model": model, "choices": [], "usage": usage}))
    closing.append(b"data: [DONE]\n\n")
    return body, held_at, closing


def _anthropic_input_usage(reply: Reply) -> dict[str, int]:
    """The prompt's size as the Messages API splits it: `input_tokens` counts only what the cache did not touch."""
    return {
        "input_tokens": reply.usage[0] - reply.cache_read - reply.cache_write,
        "cache_creation_input_tokens": reply.cache_write,
        "cache_read_input_tokens": reply.cache_read,
    }


def _anthropic_frames(reply: Reply, model: str) -> tuple[list[bytes], int, list[bytes]]:
    """(the body of the stream, the number of its frames that come before a hold, its closing frames)."""
    message: dict[str, Any] = {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": _anthropic_input_usage(reply) | {"output_tokens": 1},
    }
    body = [_anthropic_frame("message_start", {"message": message})]
    held_at = len(body)
    index = 0
    pieces, answered = _text_pieces(reply)
    if pieces:
        text_block = {"type": "text", "text": ""}
        body.append(_anthropic_frame("content_block_start", {"index": 0, "content_block": text_block}))
        body.append(_anthropic_frame("ping", {}))
        held_at = len(body) + answered
        for piece in pieces:
            delta = {"type": "text_delta", "text": piece}
            body.append(_anthropic_frame("content_block_delta", {"index": 0, "delta": delta}))
        body.append(_anthropic_frame("content_block_stop", {"index": 0}))
        index = 1
    for number, call in enumerate(reply.calls, start=index):
        block = {"type": "tool_use", "id": call.id or f"toolu_{number}", "name": call.name, "input": {}}
        body.append(_anthropic_frame("content_block_start", {"index": number, "content_block": block}))
        for piece in _pieces(call.raw_arguments(), 5):
            delta = {"type": "input_json_delta", "partial_json": piece}
            body.append(_anthropic_frame("content_block_delta", {"index": number, "delta": delta}))
        body.append(_anthropic_frame("content_block_stop", {"index": number}))
    stop = "tool_use" if reply.calls else _ANTHROPIC_STOP[reply.stop]
    closing = [
        _anthropic_frame(
            "message_delta",
            {"delta": {"stop_reason": stop, "stop_sequence": None}, "usage": {"output_tokens": reply.usage[1]}},
        ),
        _anthropic_frame("message_stop", {}),
    ]
    return body, held_at, closing


def _sent_key(request: web.Request) -> str:
    return request.headers.get("x-api-key") or request.headers.get("authorization", "").removeprefix("Bearer ")


def _error_body(protocol: Protocol, status: int, reply: Reply, key: str) -> dict[str, Any]:
    if protocol == "openai":
        fallback = ("server_error" if status >= 500 else "invalid_request_error", None, "Error.")
        kind, code, message = _OPENAI_ERRORS.get(status, fallback)
        if reply.overflow:
            kind, code, message = "invalid_request_error", "context_length_exceeded", OPENAI_OVERFLOW
        error = {"message": (reply.error_message or message).format(key=key), "type": reply.error_type or kind}
        return {"error": error | {"param": None, "code": code}}
    kind, message = _ANTHROPIC_ERRORS.get(status, ("api_error" if status >= 500 else "invalid_request_error", "Error."))
    if reply.overflow:
        kind, message = "invalid_request_error", ANTHROPIC_OVERFLOW
    error = {"type": reply.error_type or kind, "message": (reply.error_message or message).format(key=key)}
    return {"type": "error", "error": error}


@dataclass(frozen=True)
class Transcription:
    """An upload to `/v1/audio/transcriptions`: the model asked for, the file (name, type, bytes), the auth header."""

    model: str
    file_name: str
    content_type: str
    data: bytes
    authorization: str | None


class FakeLLM:
    """The server. `async with FakeLLM() as llm:`, or `await start()` / `await stop()` (see the `fake_llm` fixture).
    It also transcribes audio (`/v1/audio/transcriptions`, OpenAI's form): `transcribe_as` scripts the texts,
    `transcriptions` records the uploads."""

    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self.transcriptions: list[Transcription] = []
        self._transcripts: deque[str] = deque()
        self._replies: deque[Reply] = deque()
        self._routed: list[tuple[str, deque[Reply]]] = []  # (marker, replies) for conversations that start with it
        self._stopping = asyncio.Event()
        self._releases = asyncio.Semaphore(0)
        self.holding = 0  # held replies waiting for release() right now
        self._runner: web.AppRunner | None = None
        self._port = 0

    @property
    def url(self) -> str:
        """`http://127.0.0.1:<port>`: the Anthropic base URL."""
        return f"http://127.0.0.1:{self._port}"

    @property
    def openai_base_url(self) -> str:
        return f"{self.url}/v1"

    @property
    def pending(self) -> int:
        """Replies scripted but not yet served (`script_for`'s too)."""
        return len(self._replies) + sum(len(queue) for _, queue in self._routed)

    def script(self, *replies: Reply | str) -> None:
        """Queue replies, one per coming request; a plain string is a text reply."""
        self._replies.extend(Reply.text(reply) if isinstance(reply, str) else reply for reply in replies)

    def script_for(self, marker: str, *replies: Reply | str) -> None:
        """Queue replies for the requests of one conversation: those whose first user message contains `marker`
        (runs that go on at once, such as a subagent's beside its parent's, each get their own script). Requests
        no marker matches take from `script`'s queue."""
        queue = next((queue for known, queue in self._routed if known == marker), None)
        if queue is None:
            queue = deque()
            self._routed.append((marker, queue))
        queue.extend(Reply.text(reply) if isinstance(reply, str) else reply for reply in replies)

    def _next_reply(self, body: Any) -> Reply | None:
        first = _first_user_text(body)
        for marker, queue in self._routed:
            if marker in first:
                return queue.popleft() if queue else None
        return self._replies.popleft() if self._replies else None

    def transcribe_as(self, *texts: str) -> None:
        """Queue what the coming transcription requests are answered with, one text each."""
        self._transcripts.extend(texts)

    def release(self) -> None:
        """Let one held reply write the rest: the one that has waited longest, or else the next to reach its hold."""
        self._releases.release()

    def provider_config(self, kind: Protocol, **settings: Any) -> ProviderConfig:
        """A ProviderConfig pointing at this server (keys, timeout and so on as keyword arguments)."""
        base_url = self.openai_base_url if kind == "openai" else self.url
        return ProviderConfig.model_validate({"kind": kind, "base_url": base_url, **settings})

    async def start(self) -> FakeLLM:
        app = web.Application()
        app.router.add_post("/v1/audio/transcriptions", self._transcribe)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self._port = self._runner.addresses[0][1]
        return self

    async def stop(self) -> None:
        self._stopping.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeLLM:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    async def _transcribe(self, request: web.Request) -> web.Response:
        fields: dict[str, str] = {}
        upload: tuple[str, str, bytes] | None = None
        async for part in await request.multipart():
            if not isinstance(part, BodyPartReader):
                continue
            if part.filename is not None:
                upload = (part.filename, part.headers.get("Content-Type", ""), await part.read())
            elif part.name is not None:
                fields[part.name] = await part.text()
        if upload is None or "model" not in fields:
            return web.json_response({"error": {"message": "file and model are required"}}, status=400)
        auth = request.headers.get("Authorization")
        self.transcriptions.append(Transcription(fields["model"], *upload, authorization=auth))
        if not self._transcripts:
            return web.json_response({"error": {"message": "FakeLLM: no transcript scripted"}}, status=500)
        return web.json_response({"text": self._transcripts.popleft()})

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        headers = {name.lower(): value for name, value in request.headers.items()}
        peer = request.transport.get_extra_info("peername") if request.transport is not None else None
        self.requests.append(RecordedRequest(request.method, request.path, headers, body, peer, raw))
        protocol: Protocol
        if request.method == "POST" and request.path.endswith("/chat/completions"):
            protocol = "openai"
        elif request.method == "POST" and request.path.endswith("/v1/messages"):
            protocol = "anthropic"
        else:
            return web.json_response({"error": {"message": f"FakeLLM: no route {request.path}"}}, status=404)
        reply = self._next_reply(body)
        if reply is None:
            message = f"FakeLLM: the script ran out (request #{len(self.requests)} to {request.path} has no reply)"
            return web.json_response(_error_body(protocol, 500, Reply(error_message=message), ""), status=500)
        if reply.status != 200:
            extra = {"Retry-After": reply.retry_after} if reply.retry_after is not None else {}
            payload = _error_body(protocol, reply.status, reply, _sent_key(request))
            return web.json_response(payload, status=reply.status, headers=extra)
        model = body.get("model", "") if isinstance(body, dict) else ""
        if protocol == "openai":
            include_usage = isinstance(body, dict) and bool((body.get("stream_options") or {}).get("include_usage"))
            frames, held_at, closing = _openai_frames(reply, model, include_usage)
        else:
            frames, held_at, closing = _anthropic_frames(reply, model)
        return await self._stream(request, protocol, reply, frames, held_at if reply.hold else None, closing)

    async def _stream(
        self,
        request: web.Request,
        protocol: Protocol,
        reply: Reply,
        frames: list[bytes],
        held_at: int | None,
        closing: list[bytes],
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        for number, frame in enumerate(frames):
            if number == held_at and not await self._hold():
                return response  # the server stopped before the release
            await response.write(frame)
            if reply.frame_delay:
                await asyncio.sleep(reply.frame_delay)
        if held_at == len(frames) and not await self._hold():
            return response
        if reply.ending == "cut":
            assert request.transport is not None
            request.transport.abort()  # no end of the chunked body: the client sees a broken connection
            return response
        if reply.ending == "eof":
            return response
        if reply.ending == "error":
            error = {"type": reply.error_type, "message": reply.error_message}
            if protocol == "openai":
                await response.write(_openai_frame({"error": error | {"code": None}}))
            else:
                await response.write(_anthropic_frame("error", {"error": error}))
            return response
        if reply.ending == "stall":
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), timeout=reply.stall_seconds)
            if self._stopping.is_set():
                return response
        for frame in closing:
            await response.write(frame)
        return response

    async def _hold(self) -> bool:
        """Wait for a `release()` (True) or the server's stop (False)."""
        self.holding += 1
        released = asyncio.ensure_future(self._releases.acquire())
        stopping = asyncio.ensure_future(self._stopping.wait())
        try:
            await asyncio.wait({released, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self.holding -= 1
            stopping.cancel()
            if not released.done():
                released.cancel()
        return released.done() and not released.cancelled()


def _first_user_text(body: Any) -> str:
    """The text of a chat request's first user message (either protocol), "" when it has none."""
    messages = body.get("messages") if isinstance(body, dict) else None
    for message in messages or []:
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            parts = content if isinstance(content, list) else []
            return "".join(str(part.get("text", "")) for part in parts if isinstance(part, dict))
    return ""


@contextlib.contextmanager
def refusing_port() -> Iterator[int]:
    """A port on 127.0.0.1 that refuses connections while the block runs: bound but never listening, so nothing
    else on the machine can start listening there meanwhile (as it could on a stopped server's freed port)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


@pytest.fixture
async def fake_llm() -> AsyncIterator[FakeLLM]:
    """A running FakeLLM for one test (register with `pytest_plugins = ["fakes.llm"]` or import it)."""
    async with FakeLLM() as server:
        yield server
