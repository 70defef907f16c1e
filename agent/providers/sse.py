"""Plumbing the providers share: the request body's bytes and cache markers, server-sent events over HTTP,
classified errors, streamed tool arguments."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

from agent.providers.base import ErrorKind, ProviderError
from agent.providers.transport import post_stream, provider_client

MESSAGE_LIMIT = 300  # characters of the provider's own error message kept in ours
RAW_ARGUMENTS_LIMIT = 200  # characters of unparsable tool arguments shown back to the model
STREAM_ENDED = "stream ended before the answer was complete"
DRAIN_SECONDS = 0.5  # how long the rest of a response after its end marker may take to arrive

_OVERFLOW_MARKERS = (
    "context_length_exceeded",
    "maximum context length",
    "prompt is too long",
    "too many tokens",
    "exceeds the context window",
    "input is too long",
)
_MIN_SECRET_LENGTH = 4  # shorter values would blank out ordinary words
_JSON_TYPES = {list: "an array", str: "a string", int: "a number", float: "a number", bool: "a boolean"}

ErrorObject = dict[str, Any]


def encode_body(body: dict[str, Any]) -> bytes:
    """`body` as compact JSON in its keys' insertion order: the same request is always the same bytes."""
    # Serialized here rather than by httpx (whose output differs between versions): prompt caches key on the bytes.
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def mark_for_cache(block: dict[str, Any]) -> None:
    """Make `block` a prompt-cache breakpoint; the marker is its last key, so the bytes before it stay the same."""
    block["cache_control"] = {"type": "ephemeral"}


@dataclass(frozen=True)
class SSEEvent:
    """One dispatched server-sent event: its name ("message" when unnamed) and its data lines joined."""

    event: str
    data: str


async def parse_sse(lines: AsyncIterable[str]) -> AsyncIterator[SSEEvent]:
    """Turn lines of an event stream into events; an event without its closing blank line is dropped (spec)."""
    name = ""
    data: list[str] = []
    async for raw in lines:
        line = raw.rstrip("\r\n")
        if not line:
            if data:
                yield SSEEvent(name or "message", "\n".join(data))
            name, data = "", []
            continue
        if line.startswith(":"):  # a comment, e.g. OpenRouter's ": OPENROUTER PROCESSING" keep-alives
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "data":
            data.append(value)
        elif field == "event":
            name = value


def redact(text: str, secrets: Iterable[str]) -> str:
    """`text` with every secret (API key, header value) replaced by `***`."""
    for secret in sorted(set(secrets), key=len, reverse=True):
        if len(secret) >= _MIN_SECRET_LENGTH:
            text = text.replace(secret, "***")
    return text


def mentions_overflow(text: str) -> bool:
    """Whether an error text says the prompt does not fit the model's context window."""
    lowered = text.lower()
    return any(marker in lowered for marker in _OVERFLOW_MARKERS)


def kind_for_status(status: int, body: str) -> ErrorKind:
    """The error kind an HTTP status (and, for 400/413, its body) means."""
    if status in (401, 403):
        return "auth"
    if status == 429:
        return "rate_limit"
    if status in (400, 413) and mentions_overflow(body):
        return "context_overflow"
    if status == 408:
        return "timeout"
    if status >= 500:  # includes Anthropic's 529 "overloaded"
        return "server"
    return "bad_request"


def kind_for_payload(error: ErrorObject, status: int | None) -> ErrorKind:
    """The error kind of an error object sent inside a stream, judged by its type, code and message."""
    text = " ".join(str(error.get(field) or "") for field in ("type", "code", "message")).lower()
    if mentions_overflow(text):
        return "context_overflow"
    if "overloaded" in text:
        return "server"
    if "rate_limit" in text or "rate limit" in text or status == 429:
        return "rate_limit"
    if any(word in text for word in ("authentication", "invalid_api_key", "permission")) or status in (401, 403):
        return "auth"
    if "timeout" in text or status == 408:
        return "timeout"
    if "invalid_request" in text or (status is not None and 400 <= status < 500):
        return "bad_request"
    return "server"


def error_object(payload: Any) -> ErrorObject:
    """The `{"type", "code", "message"}` part of an error payload, whatever its wrapping."""
    if isinstance(payload, dict):
        inner = payload.get("error", payload)
        if isinstance(inner, dict):
            return inner
        if isinstance(inner, str):
            return {"message": inner}
    return {}


def short_message(error: ErrorObject, fallback: str) -> str:
    """The provider's own words, on one line, at most MESSAGE_LIMIT characters."""
    message = error.get("message") or error.get("detail") or fallback
    text = " ".join(str(message).split())
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 1] + "…"


def parse_retry_after(headers: Mapping[str, str], now: datetime | None = None) -> float | None:
    """Seconds to wait, from `retry-after-ms` or `Retry-After` (seconds or an HTTP date); None when absent."""
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def parse_tool_arguments(raw: str) -> tuple[dict[str, Any], str | None]:
    """Streamed arguments as a JSON object, or `({}, why not)` with the raw text shown (truncated)."""
    if not raw.strip():
        return {}, None  # a call without arguments may stream none at all
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as error:
        problem = f"not valid JSON ({error.msg} at position {error.pos})"
    else:
        if isinstance(value, dict):
            return value, None
        problem = f"{_JSON_TYPES.get(type(value), 'null')}, not a JSON object"
    shown = raw if len(raw) <= RAW_ARGUMENTS_LIMIT else raw[:RAW_ARGUMENTS_LIMIT] + "…"
    return {}, f"arguments are {problem}: {shown}"


class SSEClient:
    """POSTs one request and yields its events; every failure comes out as a ProviderError with secrets redacted."""

    def __init__(
        self, provider: str, client: httpx.AsyncClient | None, timeout_seconds: float, secrets: Iterable[str]
    ) -> None:
        self.provider = provider
        self._client = client
        self._owns_client = client is None
        self._timeout = httpx.Timeout(timeout_seconds)
        self._timeout_seconds = timeout_seconds
        self._secrets = {secret for secret in secrets if secret}

    def add_secret(self, secret: str | None) -> None:
        """Also keep `secret` (e.g. a key passed per call) out of error messages."""
        if secret:
            self._secrets.add(secret)

    def error(
        self, kind: ErrorKind, message: str, *, status: int | None = None, retry_after: float | None = None
    ) -> ProviderError:
        """A ProviderError naming the provider, with every secret taken out of the message."""
        text = redact(f"{self.provider}: {message}", self._secrets)
        return ProviderError(kind, text, status=status, retry_after=retry_after)

    def http_error(self, status: int, body: str, headers: Mapping[str, str]) -> ProviderError:
        """The error an HTTP error response means."""
        try:
            payload: Any = json.loads(body)
        except ValueError:
            payload = None
        message = short_message(error_object(payload), body.strip() or "(empty body)")
        return self.error(
            kind_for_status(status, body),
            f"HTTP {status}: {message}",
            status=status,
            retry_after=parse_retry_after(headers),
        )

    def stream_error(self, payload: Any) -> ProviderError:
        """The error an error object sent mid-stream means (`data: {"error": ...}` or `event: error`)."""
        error = error_object(payload)
        code = error.get("code")
        status = code if isinstance(code, int) and not isinstance(code, bool) else None
        label = error.get("type") or error.get("code") or "error"
        message = short_message(error, json.dumps(payload)[:MESSAGE_LIMIT])
        return self.error(kind_for_payload(error, status), f"error in stream ({label}): {message}", status=status)

    def json_object(self, data: str) -> dict[str, Any]:
        """One event's data as a JSON object; anything else is a `server` error."""
        try:
            decoded = json.loads(data)
        except ValueError:
            decoded = None
        if not isinstance(decoded, dict):
            raise self.error("server", f"the stream carried something other than a JSON object: {data[:100]!r}")
        return decoded

    def ended_early(self) -> ProviderError:
        """The error for a stream that stopped before its end marker."""
        return self.error("network", STREAM_ENDED)

    async def events(
        self, url: str, *, body: dict[str, Any], headers: dict[str, str]
    ) -> AsyncGenerator[SSEEvent, None]:
        """POST `body` as JSON to `url` and yield the response's events (use with `contextlib.aclosing`)."""
        client = self._get_client()
        answering = False
        content = encode_body(body)
        headers = {"content-type": "application/json"} | headers
        try:
            async with post_stream(client, url, content=content, headers=headers, timeout=self._timeout) as answer:
                answering = True
                if answer.status >= 300:
                    text = (await answer.read()).decode("utf-8", "replace")
                    raise self.http_error(answer.status, text, answer.headers)
                if "json" in answer.headers.get("content-type", ""):
                    # A 200 with a JSON body where a stream belongs: some proxies report errors this way.
                    text = (await answer.read()).decode("utf-8", "replace")
                    raise self._json_instead_of_stream(text)
                lines = answer.lines()
                try:
                    async for event in parse_sse(lines):
                        yield event
                except GeneratorExit:  # the caller has what it wanted (the end marker, usually)
                    await _drain(lines)  # a response read to its end keeps its connection for the next call
                    raise
        except httpx.TimeoutException as error:
            silence = f"nothing received for {self._timeout_seconds:g}s ({type(error).__name__})"
            raise self.error("timeout", silence) from error
        except httpx.HTTPError as error:
            cause = f"{type(error).__name__}: {error}"
            raise self.error("network", f"{STREAM_ENDED} ({cause})" if answering else cause) from error

    async def aclose(self) -> None:
        """Close the HTTP client if this object created it."""
        if self._owns_client and self._client is not None:
            await self._client.aclose()
            self._client = None

    def _get_client(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = provider_client()
        return self._client

    def _json_instead_of_stream(self, text: str) -> ProviderError:
        try:
            payload: Any = json.loads(text)
        except ValueError:
            payload = None
        if isinstance(payload, dict) and "error" in payload:
            return self.stream_error(payload)
        return self.error("bad_request", "expected an event stream but got a JSON body (is stream supported?)")


async def _drain(lines: AsyncIterator[str]) -> None:
    """Read what is left of a response, for at most DRAIN_SECONDS; whatever goes wrong, the caller closes it."""
    with contextlib.suppress(Exception):
        async with asyncio.timeout(DRAIN_SECONDS):
            async for _ in lines:
                pass
