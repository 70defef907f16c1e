"""The Bot API transport on aiohttp, through python-telegram-bot's own Bot against a local server: forms, files
(streamed from an open handle), streamed downloads, timeouts and network errors, and the token never in an error."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from fakes.llm import refusing_port
from telegram import Bot, InputFile
from telegram.error import NetworkError, TimedOut

from channels.telegram_request import AiohttpRequest

TOKEN = "123456:SECRET-token-value"


class Recorder:
    def __init__(self) -> None:
        self.requests: list[tuple[str, str, dict[str, Any]]] = []
        self.answering = asyncio.Event()  # cleared: requests wait, unanswered, until it is set again
        self.answering.set()
        self.files: dict[str, bytes] = {}  # served at /file/bot<token>/<path>

    async def download(self, request: web.Request) -> web.Response:
        data = self.files.get(request.match_info["path"])
        return web.Response(body=data) if data is not None else web.Response(status=404)

    async def handle(self, request: web.Request) -> web.Response:
        await self.answering.wait()
        form = await request.post()
        fields = {
            name: (value.file.read() if isinstance(value, web.FileField) else value) for name, value in form.items()
        }
        self.requests.append((request.path, request.content_type, fields))
        method = request.path.rsplit("/", 1)[-1]
        message = {"message_id": 7, "date": 0, "chat": {"id": 1, "type": "private"}}
        results: dict[str, Any] = {
            "getMe": {"id": 1, "is_bot": True, "first_name": "B", "username": "b_bot"},
            "sendMessage": message | {"text": fields.get("text", "")},
            "sendDocument": message | {"document": {"file_id": "f", "file_unique_id": "u"}},
        }
        return web.json_response({"ok": True, "result": results.get(method, True)})


@pytest.fixture
async def server() -> AsyncIterator[tuple[Recorder, str]]:
    recorder = Recorder()
    app = web.Application()
    app.router.add_post("/{tail:.*}", recorder.handle)
    app.router.add_get("/file/bot{token}/{path:.+}", recorder.download)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield recorder, f"http://127.0.0.1:{runner.addresses[0][1]}"
    recorder.answering.set()
    await runner.cleanup()


def bot(root: str, **timeouts: float) -> Bot:
    return Bot(TOKEN, base_url=f"{root}/bot", request=AiohttpRequest(**timeouts), get_updates_request=AiohttpRequest())


async def test_a_call_sends_a_form_and_reads_the_answer(server: tuple[Recorder, str]) -> None:
    recorder, root = server
    async with bot(root) as client:
        sent = await client.send_message(1, "hello", reply_markup=None)
    assert sent.message_id == 7 and sent.text == "hello"
    path, content_type, fields = recorder.requests[-1]
    assert path == f"/bot{TOKEN}/sendMessage" and content_type == "application/x-www-form-urlencoded"
    assert fields["chat_id"] == "1" and fields["text"] == "hello"


async def test_a_file_goes_as_multipart(server: tuple[Recorder, str]) -> None:
    recorder, root = server
    async with bot(root) as client:
        await client.send_document(1, b"report body", filename="report.txt", caption="the report")
    path, content_type, fields = recorder.requests[-1]
    assert path.endswith("/sendDocument") and content_type == "multipart/form-data"
    assert fields["caption"] == "the report"
    assert any(value == b"report body" for value in fields.values())


async def test_a_slow_answer_is_timed_out(server: tuple[Recorder, str]) -> None:
    recorder, root = server
    async with bot(root, read_timeout=0.3, write_timeout=0.0) as client:
        recorder.answering.clear()  # no answer until the test is over: the read timeout is the only way out
        with pytest.raises(TimedOut):
            await client.send_message(1, "anyone?")


async def test_a_refused_connection_is_a_network_error_without_the_token() -> None:
    request = AiohttpRequest()
    await request.initialize()
    try:
        with refusing_port() as port, pytest.raises(NetworkError) as caught:
            await request.post(f"http://127.0.0.1:{port}/bot{TOKEN}/getMe")
    finally:
        await request.shutdown()
    assert "SECRET" not in str(caught.value) and TOKEN not in repr(caught.value)
    assert str(caught.value).strip()
    assert caught.value.__cause__ is None and caught.value.__suppress_context__  # no traceback shows the URL


async def test_a_file_handle_is_streamed_from_its_start_on_every_attempt(
    server: tuple[Recorder, str], tmp_path: Path
) -> None:
    recorder, root = server
    data = os.urandom(300_000)
    (tmp_path / "big.bin").write_bytes(data)
    with (tmp_path / "big.bin").open("rb") as handle:
        upload = InputFile(handle, filename="big.bin", read_file_handle=False)
        assert upload.input_file_content is handle  # PTB left the reading to the transport
        async with bot(root) as client:
            await client.send_document(1, upload)
            await client.send_document(1, upload)  # as a retried call sends the same request data again
        assert not handle.closed
    sent = [fields for path, _, fields in recorder.requests if path.endswith("/sendDocument")]
    assert [fields["document"] for fields in sent] == [data, data]


async def test_a_download_streams_the_body_in_chunks_and_fails_without_the_token(
    server: tuple[Recorder, str],
) -> None:
    recorder, root = server
    recorder.files["docs/a.bin"] = data = os.urandom(200_000)
    request = AiohttpRequest()
    await request.initialize()
    try:
        chunks = [chunk async for chunk in request.stream(f"{root}/file/bot{TOKEN}/docs/a.bin", chunk_size=50_000)]
        assert b"".join(chunks) == data and max(map(len, chunks)) <= 50_000
        with pytest.raises(NetworkError, match="404") as missing:
            _ = [chunk async for chunk in request.stream(f"{root}/file/bot{TOKEN}/docs/none.bin")]
        with refusing_port() as port, pytest.raises(NetworkError) as refused:
            _ = [chunk async for chunk in request.stream(f"http://127.0.0.1:{port}/file/bot{TOKEN}/docs/a.bin")]
    finally:
        await request.shutdown()
    for error in (missing.value, refused.value):
        assert "SECRET" not in str(error) and error.__cause__ is None
        assert error.__context__ is None or error.__suppress_context__
