"""The OpenAI-compatible HTTP API: `POST /v1/chat/completions` (streamed with Server-Sent Events or whole) and
`GET /v1/models`, in OpenAI's wire format. Each agent is a model (`switchboard/<agent>`); a key is a principal
(`http:<name>`); the last user message is the turn, in a session the client names (`X-Session-Id`, else `user`, else
one per key): the agent keeps its history, so the client's earlier messages are not replayed into it."""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import math
import re
import secrets
import time
from collections import defaultdict, deque
from typing import TYPE_CHECKING, Any

from aiohttp import web

from bot.config.http_api import API_CHANNEL, ApiKey
from channels.http_api import Answer
from routing import Peer, RoutingInput

if TYPE_CHECKING:
    from bot.gateway.web.pages import Site

__all__ = ["ApiRoutes"]

log = logging.getLogger(__name__)

MODEL_PREFIX = "switchboard/"
_SESSION = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def error(status: int, message: str, kind: str, code: str | None = None, **headers: str) -> web.Response:
    """An error as OpenAI writes them: `{"error": {"message", "type", "code"}}` with the HTTP status."""
    body = {"error": {"message": message, "type": kind, "code": code, "param": None}}
    return web.json_response(body, status=status, headers=headers)


class ApiRoutes:
    """The API routes of `site`."""

    def __init__(self, site: Site) -> None:
        self.site = site
        self.parts = site.parts
        self._calls: defaultdict[str, deque[float]] = defaultdict(deque)  # key name -> its requests' times

    def routes(self, router: web.UrlDispatcher) -> None:
        router.add_post("/v1/chat/completions", self.completions)
        router.add_get("/v1/models", self.models)

    def _key(self, request: web.Request) -> ApiKey | web.Response:
        """The caller's key (compared in constant time; never echoed), or the error to answer: 401, or 429 with
        Retry-After past `http_api.requests_per_minute`."""
        settings = self.parts.decisions.config.http_api
        sent = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        found = None
        for key in settings.keys:
            if hmac.compare_digest(key.key.get_secret_value().encode(), sent.encode()):
                found = key
        if found is None:
            log.warning("http api: a request with a wrong or missing key was refused")
            return error(401, "Incorrect API key provided.", "invalid_request_error", "invalid_api_key")
        now = time.monotonic()
        calls = self._calls[found.name]
        while calls and calls[0] <= now - 60:
            calls.popleft()
        if len(calls) >= settings.requests_per_minute:
            wait = str(max(1, math.ceil(calls[0] + 60 - now)))
            message = f"Rate limit reached for {found.identity}: {settings.requests_per_minute} requests per minute."
            return error(429, message, "requests", "rate_limit_exceeded", **{"Retry-After": wait})
        calls.append(now)
        return found

    def _agents(self, key: ApiKey) -> list[str]:
        agents = [agent.id for agent in self.parts.decisions.config.agents]
        return [key.agent] if key.agent in agents else ([] if key.agent else agents)

    async def models(self, request: web.Request) -> web.StreamResponse:
        key = self._key(request)
        if isinstance(key, web.Response):
            return key
        data = [
            {"id": f"{MODEL_PREFIX}{agent}", "object": "model", "created": 0, "owned_by": "switchboard"}
            for agent in self._agents(key)
        ]
        return web.json_response({"object": "list", "data": data})

    async def completions(self, request: web.Request) -> web.StreamResponse:
        key = self._key(request)
        if isinstance(key, web.Response):
            return key
        settings = self.parts.decisions.config.http_api
        if (request.content_length or 0) > settings.max_body_bytes:
            return error(413, f"The body is larger than {settings.max_body_bytes} bytes.", "invalid_request_error")
        try:
            body = json.loads(await request.content.read(settings.max_body_bytes + 1))
        except (ValueError, UnicodeDecodeError):
            return error(400, "The body is not JSON.", "invalid_request_error")
        if not isinstance(body, dict):
            return error(400, "The body must be a JSON object.", "invalid_request_error")
        model = str(body.get("model", ""))
        agent = model.removeprefix(MODEL_PREFIX)
        if agent not in self._agents(key):
            return error(404, f"The model {model!r} does not exist or you do not have access to it.",
                         "invalid_request_error", "model_not_found")  # fmt: skip
        text = _last_user_text(body.get("messages"))
        if text is None:
            return error(400, "messages must end with a user message that has text.", "invalid_request_error")
        session = request.headers.get("X-Session-Id") or body.get("user") or "default"
        if not isinstance(session, str) or not _SESSION.match(session):
            return error(400, "The session (X-Session-Id or user) must be 1 to 64 of A-Z a-z 0-9 _ . -",
                         "invalid_request_error")  # fmt: skip
        channel = self.parts.apis().get(agent)
        if channel is None or not channel.serving:
            return error(503, f"The agent {agent!r} is not served right now.", "server_error")
        chat = f"{key.name}.{session}"  # a key's sessions are its own
        source = RoutingInput(channel=API_CHANNEL, account=agent, peer=Peer("direct", chat))
        session_key = self.parts.decisions.router.resolve(source).session_key
        completion = f"chatcmpl-{secrets.token_hex(12)}"
        started = time.time()
        answers = channel.ask(key.name, chat, text)
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return await self._stream(request, answers, completion, model, session_key, started, include_usage)
        answer = await _last(answers, settings.timeout_seconds)
        if answer is None or not answer.done:
            return error(504, "The agent did not answer in time; its answer stays in the session.", "server_error")
        usage = await self._usage(session_key, started)
        message = {"role": "assistant", "content": answer.text}
        choice = {"index": 0, "message": message, "finish_reason": "stop", "logprobs": None}
        created = int(started)
        reply = {"id": completion, "object": "chat.completion", "created": created, "model": model}
        return web.json_response({**reply, "choices": [choice], "usage": usage})

    async def _stream(
        self, request: web.Request, answers: Any, completion: str, model: str, session_key: str, started: float,
        include_usage: bool,
    ) -> web.StreamResponse:  # fmt: skip
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"})
        await response.prepare(request)

        async def chunk(delta: dict[str, Any], finish: str | None = None, usage: dict[str, int] | None = None) -> None:
            choices = [] if usage is not None else [{"index": 0, "delta": delta, "finish_reason": finish}]
            data: dict[str, Any] = {"id": completion, "object": "chat.completion.chunk", "created": int(started),
                                    "model": model, "choices": choices}  # fmt: skip
            if usage is not None:
                data["usage"] = usage
            await response.write(f"data: {json.dumps(data)}\n\n".encode())

        await chunk({"role": "assistant", "content": ""})
        written = ""
        timeout = self.parts.decisions.config.http_api.timeout_seconds
        try:
            async with asyncio.timeout(timeout):
                async for answer in answers:
                    text = answer.text
                    # A stream only grows: what the answer has beyond what was sent goes out (a preview that changed
                    # behind it cannot be taken back).
                    if len(text) > len(written):
                        await chunk({"content": text[len(written) :]})
                        written = text
        except TimeoutError:
            pass
        await chunk({}, "stop")
        if include_usage:
            await chunk({}, usage=await self._usage(session_key, started))
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def _usage(self, session_key: str, started: float) -> dict[str, int]:
        """The tokens of the runs this request made (the session's usage rows since it began)."""
        rows = await self.parts.store.usage_since(started, session_key)
        prompt = sum(row.input_tokens for row in rows)
        completion = sum(row.output_tokens for row in rows)
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _last_user_text(messages: object) -> str | None:
    """The text of the last message when it is the user's (a string, or the text parts of a list)."""
    if not isinstance(messages, list) or not messages or not isinstance(messages[-1], dict):
        return None
    last = messages[-1]
    if last.get("role") != "user":
        return None
    content = last.get("content")
    if isinstance(content, list):
        content = "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return content if isinstance(content, str) and content.strip() else None


async def _last(answers: Any, timeout: float) -> Answer | None:
    last = None
    try:
        async with asyncio.timeout(timeout):
            async for answer in answers:
                last = answer
    except TimeoutError:
        pass
    return last
