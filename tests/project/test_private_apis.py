"""The few places that lean on another library's private or undocumented parts, each checked for the shape we rely
on: when a new release changes one, this file says which, before a channel breaks in a subtler way."""

from __future__ import annotations

import contextvars
import inspect
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import discord
import pytest
import yarl
from discord.gateway import DiscordWebSocket
from discord.http import HTTPClient, Route
from discord.webhook.async_ import AsyncWebhookAdapter, async_context
from fakes.telegram import FakeTelegram
from slack_bolt.adapter.socket_mode.internals import build_headers
from slack_sdk.socket_mode.request import SocketModeRequest
from telegram import Bot, InlineKeyboardButton, InlineKeyboardMarkup, ReplyParameters
from telegram.ext import ExtBot
from telegram.request import BaseRequest, RequestData

from channels.discord import Client, DiscordAccount, DiscordAdapter, RoutedHTTPClient
from channels.telegram import _Bot
from channels.telegram_request import AiohttpRequest, given_or

ROOT = Path(__file__).resolve().parent.parent.parent
PACKAGES = ("bot", "channels", "routing", "agent", "tools")
_PRIVATE_IMPORT = re.compile(r"^\s*(?:from|import)\s+([A-Za-z]\w*(?:\.\w+)*\._\w+)", re.MULTILINE)


def test_no_package_imports_a_private_module_of_a_library() -> None:
    found = [
        f"{path.relative_to(ROOT)}: {module}"
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        for module in _PRIVATE_IMPORT.findall(path.read_text(encoding="utf-8"))
    ]
    assert found == []


# --- python-telegram-bot ------------------------------------------------------------------------------------------


def test_ptb_bot_post_keeps_the_signature_raw_updates_calls() -> None:
    post = ExtBot._post
    assert inspect.iscoroutinefunction(post)
    parameters = inspect.signature(post).parameters
    assert list(parameters)[:3] == ["self", "endpoint", "data"]
    assert parameters["read_timeout"].kind is inspect.Parameter.KEYWORD_ONLY


@pytest.fixture
async def tg() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as server:
        yield server


async def test_raw_updates_returns_the_unparsed_list(tg: FakeTelegram) -> None:
    bot = _Bot(tg.token, base_url=f"{tg.url}/bot", request=AiohttpRequest(), get_updates_request=AiohttpRequest())
    async with bot:
        updates = await bot.raw_updates(0, 0)
    assert isinstance(updates, list)


async def test_send_message_id_and_edit_text_make_the_requests_ptbs_own_methods_make(tg: FakeTelegram) -> None:
    bot = _Bot(tg.token, base_url=f"{tg.url}/bot", request=AiohttpRequest(), get_updates_request=AiohttpRequest())
    parameters: dict[str, Any] = {
        "parse_mode": "HTML",
        "message_thread_id": 7,
        "reply_markup": InlineKeyboardMarkup([[InlineKeyboardButton("Allow", callback_data="a:1")]]),
        "reply_parameters": ReplyParameters(5, allow_sending_without_reply=True),
    }
    parameters_of_an_edit = {"parse_mode": "HTML", "reply_markup": parameters["reply_markup"]}
    async with bot:
        parsed = await bot.send_message(-100123, "<b>hi</b>", **parameters)
        raw = await bot.send_message_id(-100123, "<b>hi</b>", **parameters)
        plain = await bot.send_message_id(-100123, "plain", parse_mode=None, message_thread_id=None)
    sent = tg.calls("sendMessage")
    assert sent[0] == sent[1] and sent[0]["reply_markup"] and sent[0]["reply_parameters"]
    assert set(sent[2]) == {"chat_id", "text"}  # None values left out, as send_message leaves them out
    assert raw == parsed.message_id + 1 and plain == raw + 1
    async with bot:
        await bot.edit_message_text("<i>new</i>", chat_id=-100123, message_id=raw, **parameters_of_an_edit)
        await bot.edit_text(-100123, raw, "<i>newer</i>", **parameters_of_an_edit)
    edits = tg.calls("editMessageText")
    assert len(edits) == 2 and edits[0] | {"text": "<i>newer</i>"} == edits[1] and edits[0]["reply_markup"]


def test_ptb_marks_a_timeout_not_given_with_default_none() -> None:
    for name in ("read_timeout", "write_timeout", "connect_timeout", "pool_timeout"):
        assert inspect.signature(BaseRequest.do_request).parameters[name].default is BaseRequest.DEFAULT_NONE
    assert given_or(BaseRequest.DEFAULT_NONE, 5.0) == 5.0
    assert given_or(None, 5.0) is None
    assert given_or(2, 5.0) == 2.0


class _Recording(AiohttpRequest):
    """AiohttpRequest that notes the timeouts PTB hands it."""

    def __init__(self) -> None:
        super().__init__()
        self.timeouts: list[object] = []

    async def do_request(
        self,
        url: str,
        method: str,
        request_data: RequestData | None = None,
        read_timeout: object = BaseRequest.DEFAULT_NONE,
        write_timeout: object = BaseRequest.DEFAULT_NONE,
        connect_timeout: object = BaseRequest.DEFAULT_NONE,
        pool_timeout: object = BaseRequest.DEFAULT_NONE,
    ) -> tuple[int, bytes]:
        self.timeouts += [read_timeout, write_timeout, connect_timeout, pool_timeout]
        return await super().do_request(
            url, method, request_data, read_timeout, write_timeout, connect_timeout, pool_timeout
        )


async def test_ptb_passes_only_numbers_none_or_default_none(tg: FakeTelegram) -> None:
    request = _Recording()
    async with Bot(tg.token, base_url=f"{tg.url}/bot", request=request) as bot:
        await bot.get_me()
        await bot.get_me(read_timeout=3)
    assert request.timeouts
    assert all(t is BaseRequest.DEFAULT_NONE or t is None or isinstance(t, int | float) for t in request.timeouts)
    assert 3 in request.timeouts


# --- discord.py ---------------------------------------------------------------------------------------------------


def test_discord_client_state_has_the_http_and_parsers_the_adapter_replaces() -> None:
    client = discord.Client(intents=discord.Intents.none())
    state: Any = client._connection
    assert state.http is client.http
    assert isinstance(state.parsers, dict)
    assert {"READY", "MESSAGE_CREATE", "INTERACTION_CREATE"} <= set(state.parsers)
    assert all(callable(parser) for parser in state.parsers.values())


def test_discord_gateway_reads_its_parsers_from_the_client_state() -> None:
    # The guard works by replacing entries of that dict: the gateway must look parsers up there, not in a copy.
    assert "client._connection.parsers" in inspect.getsource(DiscordWebSocket.from_client)


def test_the_adapters_client_routes_http_and_guards_every_parser() -> None:
    adapter = DiscordAdapter("probe", DiscordAccount(token="t"))
    client = Client(adapter, "http://127.0.0.1:9/api/v10", "ws://127.0.0.1:9/gateway", 1.0)
    state: Any = client._connection
    assert isinstance(client.http, RoutedHTTPClient) and state.http is client.http
    assert all(parser.__qualname__.startswith("_guarded.") for parser in state.parsers.values())
    state.parsers["MESSAGE_CREATE"]({"not": "a message"})  # logged and skipped, not raised


def test_discord_undocumented_parts_the_routing_uses() -> None:
    assert isinstance(Route.BASE, str) and Route.BASE.startswith("https://")
    assert Route("GET", "/users/@me").url == Route.BASE + "/users/@me"
    assert isinstance(DiscordWebSocket.DEFAULT_GATEWAY, yarl.URL)
    assert isinstance(async_context, contextvars.ContextVar)
    assert list(inspect.signature(HTTPClient.request).parameters)[:2] == ["self", "route"]
    assert list(inspect.signature(HTTPClient.ws_connect).parameters)[:2] == ["self", "url"]
    assert list(inspect.signature(AsyncWebhookAdapter.request).parameters)[:3] == ["self", "route", "session"]


# --- slack_bolt ---------------------------------------------------------------------------------------------------


def test_slack_bolt_socket_mode_build_headers() -> None:
    # channels/slack/inbound.py builds Bolt requests from Socket Mode frames with this helper from an `internals`
    # module.
    plain = SocketModeRequest(type="events_api", envelope_id="e1", payload={})
    retried = SocketModeRequest(
        type="events_api", envelope_id="e2", payload={}, retry_attempt=1, retry_reason="timeout"
    )
    assert build_headers(plain) is None
    assert build_headers(retried) == {"x-slack-retry-num": "1", "x-slack-retry-reason": "timeout"}
