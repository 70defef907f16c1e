"""A fake loopback bridge: a real HTTP server on 127.0.0.1 that queues updates for the bot and records its calls."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from helpers import WAIT, eventually


class FakeBridge:
    """`async with FakeBridge() as bridge:`; `bridge.say(...)` queues a message, `bridge.sent` holds replies."""

    def __init__(self) -> None:
        self.updates: list[dict[str, Any]] = []
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.offsets: list[int] = []
        self._ids = itertools.count(1)
        self._message_ids = itertools.count(1000)
        self._new_updates = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self._port = 0
        self.sent_ids: list[str] = []  # the message id of each of `sent`
        self.fail_sends = 0  # answer this many sends with HTTP 500 first
        self._stopping = False  # set at the end: a held /updates answers at once, so the server stops without waiting

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    @property
    def sent(self) -> list[dict[str, Any]]:
        """The bodies of every successful `send`, in order."""
        return [body for method, body in self.calls if method == "send"]

    def texts_to(self, peer_id: str) -> list[str]:
        return [body["message"]["text"] for body in self.sent if body["target"]["peer"]["id"] == peer_id]

    async def say(
        self,
        text: str,
        *,
        sender: str = "u1",
        peer: tuple[str, str] | None = None,
        message_id: str | None = None,
        **fields: Any,
    ) -> dict[str, Any]:
        """Queue a message from `sender` (a DM unless `peer` is given); returns the update."""
        kind, peer_id = peer or ("direct", sender)
        number = next(self._ids)
        message = {
            "peer": {"kind": kind, "id": peer_id},
            "sender_id": sender,
            "sender_name": sender,
            "text": text,
            "message_id": message_id or f"m{number}",
            **fields,
        }
        return await self.push({"update_id": number, "message": message})

    async def click(
        self, message_id: str, value: str, *, sender: str = "u1", peer: tuple[str, str] | None = None
    ) -> None:
        """Queue a click by `sender` on the button `value` of the bot's message `message_id`."""
        kind, peer_id = peer or ("direct", sender)
        action = {"peer": {"kind": kind, "id": peer_id}, "sender_id": sender, "message_id": message_id, "value": value}
        await self.push({"update_id": next(self._ids), "action": action})

    async def push(self, update: dict[str, Any]) -> dict[str, Any]:
        async with self._new_updates:
            self.updates.append(update)
            self._new_updates.notify_all()
        return update

    async def wait_for_sends(self, count: int, timeout: float = WAIT) -> list[dict[str, Any]]:
        await eventually(lambda: len(self.sent) >= count, f"{count} sends to the bridge", timeout)
        return self.sent

    async def _updates(self, request: web.Request) -> web.Response:
        offset = int(request.query.get("offset", "0"))
        timeout = min(float(request.query.get("timeout", "10")), 30)
        self.offsets.append(offset)

        def ready() -> list[dict[str, Any]]:
            return [update for update in self.updates if int(update.get("update_id", -1)) >= offset]

        async with self._new_updates:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._new_updates.wait_for(lambda: bool(ready()) or self._stopping), timeout)
            return web.json_response({"updates": ready()})

    async def _method(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        body = await request.json()
        if method == "send" and self.fail_sends > 0:
            self.fail_sends -= 1
            return web.json_response({"error": "try again"}, status=500)
        self.calls.append((method, body))
        message_id = str(next(self._message_ids))
        if method == "send":
            self.sent_ids.append(message_id)
        return web.json_response({"ok": True, "message_id": message_id})

    async def __aenter__(self) -> FakeBridge:
        app = web.Application()
        app.router.add_get("/updates", self._updates)
        app.router.add_post("/{method}", self._method)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self._port = self._runner.addresses[0][1]
        return self

    async def __aexit__(self, *_: object) -> None:
        async with self._new_updates:
            self._stopping = True
            self._new_updates.notify_all()
        if self._runner is not None:
            await self._runner.cleanup()


@pytest.fixture
async def bridge() -> AsyncIterator[FakeBridge]:
    async with FakeBridge() as server:
        yield server
