"""The Telegram webhook (aiohttp.web): the secret header, what it refuses and how, and its answer given only after the
gateway recorded the update."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fakes.telegram import FakeTelegram
from helpers import WAIT

from channels.base import ActionEvent, InboundMessage
from channels.telegram import MAX_WEBHOOK_BODY, TelegramAccount, TelegramAdapter

SECRET = "s3cret"
HEADERS = {"X-Telegram-Bot-Api-Secret-Token": SECRET}


class Gate:
    """The gateway's side: records messages; `fail` makes recording raise, `hold` makes it wait until released."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.fail = False
        self.hold: asyncio.Event | None = None
        self.entered = asyncio.Event()

    async def on_message(self, message: InboundMessage) -> None:
        self.entered.set()
        if self.hold is not None:
            await self.hold.wait()
        if self.fail:
            raise RuntimeError("the journal is unavailable")
        self.texts.append(message.text)

    async def on_action(self, event: ActionEvent) -> str | None:
        return None


def update(update_id: int, text: str) -> dict[str, Any]:
    chat = {"id": 42, "type": "private"}
    sender = {"id": 42, "is_bot": False, "first_name": "W"}
    return {
        "update_id": update_id,
        "message": {"message_id": update_id, "date": 0, "chat": chat, "from": sender, "text": text},
    }


@pytest.fixture
async def hook() -> AsyncIterator[tuple[TelegramAdapter, Gate, httpx.AsyncClient]]:
    async with FakeTelegram() as tg:
        account = TelegramAccount(
            token=tg.token,
            api_base_url=tg.url,
            dm_policy="open",
            mode="webhook",
            webhook_url="https://example.invalid/tg",
            webhook_secret=SECRET,
            webhook_port=0,
        )
        adapter = TelegramAdapter("hook", account)
        gate = Gate()
        await adapter.start(gate.on_message, gate.on_action)
        try:
            assert tg.calls("setWebhook")[-1]["url"] == "https://example.invalid/tg"
            base = f"http://127.0.0.1:{adapter.webhook_port}"
            async with httpx.AsyncClient(base_url=base, timeout=WAIT) as client:
                yield adapter, gate, client
        finally:
            await adapter.stop()
        assert adapter.webhook_port is None


async def test_port_0_binds_a_free_port(hook: tuple[TelegramAdapter, Gate, httpx.AsyncClient]) -> None:
    adapter, _, _ = hook
    assert adapter.webhook_port is not None and adapter.webhook_port > 0


async def test_a_missing_or_wrong_secret_is_refused(hook: tuple[TelegramAdapter, Gate, httpx.AsyncClient]) -> None:
    _, gate, client = hook
    assert (await client.post("/", json=update(1, "no secret"))).status_code == 403
    wrong = {"X-Telegram-Bot-Api-Secret-Token": SECRET + "x"}
    assert (await client.post("/", json=update(2, "wrong secret"), headers=wrong)).status_code == 403
    assert gate.texts == []


async def test_only_posts_of_json_are_taken(hook: tuple[TelegramAdapter, Gate, httpx.AsyncClient]) -> None:
    _, gate, client = hook
    assert (await client.get("/", headers=HEADERS)).status_code == 405
    form = await client.post(
        "/", content=json.dumps(update(1, "form")), headers=HEADERS | {"Content-Type": "text/plain"}
    )
    assert form.status_code == 400
    empty = await client.post("/", content=b"", headers=HEADERS | {"Content-Type": "application/json"})
    assert empty.status_code == 400
    assert gate.texts == []


async def test_bad_json_is_logged_and_answered_400_and_the_next_update_still_arrives(
    hook: tuple[TelegramAdapter, Gate, httpx.AsyncClient], caplog: pytest.LogCaptureFixture
) -> None:
    _, gate, client = hook
    caplog.set_level(logging.WARNING, "channels.telegram")
    bad = await client.post("/", content=b'{"update_id": 1,', headers=HEADERS | {"Content-Type": "application/json"})
    assert bad.status_code == 400
    assert "bad webhook request" in caplog.text
    not_an_update = await client.post("/", json=[1, 2], headers=HEADERS)
    assert not_an_update.status_code == 200  # nothing to record; answered so that Telegram does not send it again
    ok = await client.post("/any/path", json=update(2, "after the bad ones"), headers=HEADERS)
    assert ok.status_code == 200
    assert gate.texts == ["after the bad ones"]


async def test_a_body_over_the_limit_is_refused(hook: tuple[TelegramAdapter, Gate, httpx.AsyncClient]) -> None:
    _, gate, client = hook
    padded = update(1, "big") | {"padding": "x" * MAX_WEBHOOK_BODY}
    response = await client.post("/", json=padded, headers=HEADERS)
    assert response.status_code == 413
    assert gate.texts == []


async def test_the_answer_waits_for_the_gateway(hook: tuple[TelegramAdapter, Gate, httpx.AsyncClient]) -> None:
    _, gate, client = hook
    gate.hold = asyncio.Event()
    posting = asyncio.create_task(client.post("/", json=update(1, "held"), headers=HEADERS))
    await asyncio.wait_for(gate.entered.wait(), WAIT)
    assert not posting.done()  # the gateway has not returned: no answer yet
    gate.hold.set()
    assert (await posting).status_code == 200
    assert gate.texts == ["held"]


async def test_an_update_the_gateway_could_not_record_is_answered_500(
    hook: tuple[TelegramAdapter, Gate, httpx.AsyncClient],
) -> None:
    _, gate, client = hook
    gate.fail = True
    assert (await client.post("/", json=update(1, "lost?"), headers=HEADERS)).status_code == 500
    gate.fail = False
    assert (await client.post("/", json=update(1, "lost?"), headers=HEADERS)).status_code == 200  # Telegram's retry
    assert gate.texts == ["lost?"]
