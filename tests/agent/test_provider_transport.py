"""The providers' aiohttp-backed httpx transport, and the POST whose answer streams straight from aiohttp
(`post_stream`): what httpx's own transport does, they do too (the provider tests in test_providers.py all run
through them as well)."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Literal

import httpx
import pytest
from aiohttp import web
from fakes.llm import FakeLLM, refusing_port

from agent.messages import UserMessage
from agent.providers.anthropic import AnthropicProvider
from agent.providers.base import Completed, ModelRequest
from agent.providers.builtins import build_provider
from agent.providers.config import ProviderConfig
from agent.providers.openai import OpenAIProvider
from agent.providers.sse import encode_body
from agent.providers.transport import post_stream, provider_client


@pytest.fixture
async def llm() -> AsyncIterator[FakeLLM]:
    async with FakeLLM() as server:
        yield server


@contextlib.asynccontextmanager
async def serving(
    handler: Callable[[web.Request], Awaitable[web.StreamResponse]], host: str = "127.0.0.1"
) -> AsyncIterator[str]:
    """A local server answering every request with `handler`; yields its URL, with `host` as the host name."""
    app = web.Application()
    app.router.add_route("*", "/", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://{host}:{runner.addresses[0][1]}/"
    finally:
        await runner.cleanup()


async def answer(client: httpx.AsyncClient, base_url: str) -> str:
    config = {"kind": "openai", "base_url": base_url, "api_key": "sk-transport-test"}
    provider = build_provider("fake", ProviderConfig.model_validate(config), client)
    events = [event async for event in provider.stream(ModelRequest(model="m", messages=[UserMessage.of("hi")]))]
    assert isinstance(events[-1], Completed)
    return events[-1].message.text


async def test_a_proxy_from_the_environment_carries_the_call(llm: FakeLLM, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", llm.url)  # the fake answers proxied requests as if they were its own
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    llm.script("through the proxy")
    async with provider_client() as client:
        assert await answer(client, "http://model.invalid/v1") == "through the proxy"
    assert llm.requests[-1].headers["host"] == "model.invalid"


async def test_no_proxy_exempts_a_host(llm: FakeLLM, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    llm.script("direct")
    async with provider_client() as client:
        assert await answer(client, llm.openai_base_url) == "direct"


async def test_a_compressed_body_is_decoded_once() -> None:
    payload = {"answer": "x" * 2000}

    async def handler(request: web.Request) -> web.Response:
        body = gzip.compress(json.dumps(payload).encode())
        return web.Response(body=body, headers={"Content-Encoding": "gzip", "Content-Type": "application/json"})

    async with serving(handler) as url, provider_client() as client:
        response = await client.get(url)
    assert response.json() == payload


async def test_a_streamed_request_body_is_sent_whole_with_its_length() -> None:
    async def handler(request: web.Request) -> web.Response:
        framing = request.headers.get("Transfer-Encoding", "") or f"length {request.headers['Content-Length']}"
        return web.json_response({"body": (await request.read()).decode(), "framing": framing})

    async def pieces() -> AsyncIterator[bytes]:
        for piece in (b"one ", b"two ", b"three"):
            yield piece

    async with serving(handler) as url, provider_client() as client:
        response = await client.post(url, content=pieces())
    assert response.json() == {"body": "one two three", "framing": "length 13"}


async def test_cookies_are_kept_by_httpx_and_sent_once() -> None:
    seen: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Cookie", ""))
        response = web.Response(text="ok")
        response.set_cookie("session", "abc")
        return response

    # by name: aiohttp's own jar, were it used, would keep cookies of a host name but not of an IP address
    async with serving(handler, host="localhost") as url, provider_client() as client:
        await client.get(url)
        await client.get(url)
    assert seen == ["", "session=abc"]


async def test_a_refused_connection_is_httpx_connect_error() -> None:
    with refusing_port() as port:
        async with provider_client() as client:
            with pytest.raises(httpx.ConnectError):
                await client.get(f"http://127.0.0.1:{port}")


async def test_a_body_left_unread_does_not_poison_the_next_call(llm: FakeLLM) -> None:
    llm.script("first answer " * 200, "second")
    async with provider_client() as client:
        async with client.stream("POST", f"{llm.openai_base_url}/chat/completions", json={"stream": True}) as response:
            async for _ in response.aiter_bytes():
                break  # walk away mid-body: that connection must be closed, not reused
        assert await answer(client, llm.openai_base_url) == "second"


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_the_body_arrives_as_the_bytes_the_provider_encoded(
    llm: FakeLLM, kind: Literal["openai", "anthropic"]
) -> None:
    llm.script("ok")
    request = ModelRequest(model="m", system="Be brief. Ünïcode stays as it is.", messages=[UserMessage.of("hi")])
    async with provider_client() as client:
        provider = build_provider("fake", llm.provider_config(kind), client)
        assert isinstance(provider, OpenAIProvider | AnthropicProvider)
        [*_, done] = [event async for event in provider.stream(request)]
    assert isinstance(done, Completed)
    [sent] = llm.requests
    assert sent.raw == encode_body(provider.request_body(request))
    assert "Ünïcode".encode() in sent.raw  # compact UTF-8, not \u escapes
    assert (sent.headers["content-type"], sent.headers["content-length"]) == ("application/json", str(len(sent.raw)))


STREAMED_PIECES = [b"data: one\r", b"\ndata: t", b"wo\rdata: caf\xc3", b"\xa9\n\r\n", b"\n", b"data: last, no end"]
STREAMED_LINES = ["data: one", "data: two", "data: café", "", "", "data: last, no end"]


async def streamed_lines(client: httpx.AsyncClient, url: str) -> list[str]:
    async with client, post_stream(client, url, content=b"{}", headers={}, timeout=httpx.Timeout(5)) as answer:
        assert answer.status == 200 and answer.headers["Content-Type"] == "text/event-stream"
        return [line async for line in answer.lines()]


async def test_a_streamed_answer_has_the_lines_httpx_reads_whatever_the_line_ends_and_chunks() -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for piece in STREAMED_PIECES:  # each its own write: a CRLF and a character's two bytes split between writes
            await response.write(piece)
            await asyncio.sleep(0.01)
        await response.write_eof()
        return response

    async with serving(handler) as url:
        straight, through_httpx = (
            await streamed_lines(provider_client(), url),
            await streamed_lines(httpx.AsyncClient(), url),
        )
    assert straight == STREAMED_LINES  # CRLF, LF and a bare CR end a line; the last one needs none
    assert straight == through_httpx


async def test_a_compressed_event_stream_is_decoded_once() -> None:
    async def handler(request: web.Request) -> web.Response:
        body = gzip.compress(b"".join(STREAMED_PIECES))
        return web.Response(body=body, headers={"Content-Encoding": "gzip", "Content-Type": "text/event-stream"})

    async with serving(handler) as url:
        assert await streamed_lines(provider_client(), url) == STREAMED_LINES


async def test_a_stream_left_unread_does_not_poison_the_next_call(llm: FakeLLM) -> None:
    llm.script("first answer " * 200, "second")
    async with provider_client() as client:
        url = f"{llm.openai_base_url}/chat/completions"
        async with post_stream(
            client, url, content=b'{"stream": true}', headers={}, timeout=httpx.Timeout(5)
        ) as streamed:
            async for _ in streamed.lines():
                break  # walk away mid-body: that connection must be closed, not reused
        assert await answer(client, llm.openai_base_url) == "second"


async def test_a_refused_connection_to_a_stream_is_httpx_connect_error() -> None:
    with refusing_port() as port:
        async with provider_client() as client:
            with pytest.raises(httpx.ConnectError):
                async with post_stream(
                    client, f"http://127.0.0.1:{port}", content=b"", headers={}, timeout=httpx.Timeout(5)
                ):
                    pass
