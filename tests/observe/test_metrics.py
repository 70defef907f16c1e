"""The admin listener of a running App: `/metrics` counts what went through it (messages in and out, tokens, tool
calls, approvals, turns) and shows the gauges; `/healthz` says whether every channel is up."""

from __future__ import annotations

import json
import logging
import socket
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest
from configs import config_dict
from fakes.llm import FakeLLM, Reply, ToolCallSpec
from helpers import eventually
from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel

from bot import App, parse_config
from bot.gateway.process import Gateway
from channels import Capabilities, MemoryChannel
from channels.health import ChannelHealth
from tools import Tool, ToolContext, ToolResult, json_result


class ShoutArguments(BaseModel):
    text: str


class Shout(Tool):
    name: ClassVar[str] = "shout"
    description: ClassVar[str] = "Repeat a text in capitals."
    parameters: ClassVar[type[BaseModel]] = ShoutArguments

    async def execute(self, call_id: str, args: ShoutArguments, ctx: ToolContext) -> ToolResult:
        return json_result({"shouted": args.text.upper()})


def make_app(tmp_path: Path, llm: FakeLLM, chat: MemoryChannel, **extra: Any) -> App:
    # `extra` replaces whole sections: `admin={}` is an admin section without `listen`
    config = config_dict(tmp_path, llm, owners=["memory:alice"], admin={"listen": "127.0.0.1:0"}) | extra
    return App(parse_config(json.dumps(config)), tmp_path / "state", tools=[Shout()], adapters=[chat])


def base_url(gateway: Gateway) -> str:
    assert gateway.admin is not None and gateway.admin.address is not None
    host, port = gateway.admin.address
    assert host == "127.0.0.1" and port > 0
    return f"http://{host}:{port}"


async def scrape(client: httpx.AsyncClient) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of `/metrics`, by name and labels."""
    response = await client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def value(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


async def test_metrics_count_a_conversation_and_healthz_follows_the_channels_health(
    tmp_path: Path, fake_llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    fake_llm.script(
        "Hello.",
        Reply.tool_calls(ToolCallSpec("shout", {"text": "hi"}), ToolCallSpec("read", {"path": "missing.txt"})),
        "Shouted.",
    )
    chat = MemoryChannel()
    app = make_app(tmp_path, fake_llm, chat)
    caplog.set_level(logging.INFO, logger="bot.gateway.admin")
    async with app.running() as gateway:
        url = base_url(gateway)
        assert f"admin listening on {url.removeprefix('http://')}" in caplog.text
        async with httpx.AsyncClient(base_url=url) as client:
            response = await client.get("/healthz")
            assert response.status_code == 200
            assert response.json()["status"] == "ok"
            assert response.json()["channels"] == [{"channel": "memory", "account": "default", "state": "connected"}]

            await chat.say("hi", sender="alice")
            [first] = await chat.replies()
            await chat.say("shout hi, then read missing.txt", sender="alice")
            [second] = await chat.replies()
            assert (first.text, second.text) == ("Hello.", "Shouted.")

            where = {"channel": "memory", "account": "default"}

            async def both_sent() -> bool:
                samples = await scrape(client)
                return value(samples, "switchboard_messages_out_total", **where, kind="send") == 2

            await eventually(both_sent, "both replies counted as sent")
            samples = await scrape(client)
            assert value(samples, "switchboard_messages_in_total", **where) == 2
            model = {"agent": "main", "model": "fake/m"}
            # three model calls of (21, 8) tokens: one for the first turn, two for the second
            assert value(samples, "switchboard_model_tokens_total", **model, kind="input") == 63
            assert value(samples, "switchboard_model_tokens_total", **model, kind="output") == 24
            assert value(samples, "switchboard_model_tokens_total", **model, kind="cache_read") == 0
            assert value(samples, "switchboard_tool_calls_total", tool="shout", outcome="ok") == 1
            assert value(samples, "switchboard_tool_calls_total", tool="read", outcome="error") == 1
            assert value(samples, "switchboard_turn_duration_seconds_count", agent="main") == 2
            assert value(samples, "switchboard_outbox_backlog") == 0
            assert value(samples, "switchboard_turns_running") == 0
            assert value(samples, "switchboard_turns_queued") == 0
            assert value(samples, "switchboard_channel_state", **where, state="connected") == 1
            assert value(samples, "switchboard_channel_state", **where, state="stalled") == 0

            chat.health = health = ChannelHealth("memory", "default")
            health.set("stalled", "no updates for 90 s")
            response = await client.get("/healthz")
            assert response.status_code == 503
            body = response.json()
            assert body["status"] == "unhealthy"
            assert body["unhealthy"] == [{"channel": "memory", "account": "default", "state": "stalled"}]
            samples = await scrape(client)
            assert value(samples, "switchboard_channel_state", **where, state="stalled") == 1
            assert value(samples, "switchboard_channel_state", **where, state="connected") == 0
    assert gateway.admin is not None and not gateway.admin.serving  # stopped with the gateway


async def test_an_approval_decision_is_counted(tmp_path: Path, fake_llm: FakeLLM) -> None:
    fake_llm.script(Reply.tool_calls(ToolCallSpec("exec", {"command": "touch made-by-exec"})), "It was denied.")
    chat = MemoryChannel(capabilities=Capabilities(buttons=True))
    app = make_app(tmp_path, fake_llm, chat)
    async with app.running() as gateway:
        await chat.say("make a file", sender="alice")
        [card] = await chat.replies()
        [[_, _, deny]] = card.message.buttons
        assert deny.value.endswith(":d")
        assert await chat.click(card.message_id, deny.value, sender="alice") is None
        [reply] = await chat.replies()
        assert reply.text == "It was denied."
        async with httpx.AsyncClient(base_url=base_url(gateway)) as client:
            samples = await scrape(client)
    assert value(samples, "switchboard_approvals_total", decision="deny") == 1
    assert value(samples, "switchboard_tool_calls_total", tool="exec", outcome="error") == 1


async def test_two_apps_in_one_process_keep_their_own_counts(tmp_path: Path, fake_llm: FakeLLM) -> None:
    fake_llm.script("One.", "Two.")
    first, second = MemoryChannel(), MemoryChannel()
    one = make_app(tmp_path / "one", fake_llm, first)
    two = make_app(tmp_path / "two", fake_llm, second)
    async with one.running() as gateway_one, two.running() as gateway_two:
        await first.say("hi", sender="alice")
        await first.replies()
        async with httpx.AsyncClient(base_url=base_url(gateway_one)) as client:
            counted_one = await scrape(client)
        async with httpx.AsyncClient(base_url=base_url(gateway_two)) as client:
            counted_two = await scrape(client)
    where = {"channel": "memory", "account": "default"}
    assert value(counted_one, "switchboard_messages_in_total", **where) == 1
    assert value(counted_two, "switchboard_messages_in_total", **where) is None  # no message, no series


async def test_without_admin_listen_nothing_listens(tmp_path: Path, fake_llm: FakeLLM) -> None:
    chat = MemoryChannel()
    app = make_app(tmp_path, fake_llm, chat, admin={})
    async with app.running() as gateway:
        assert gateway.admin is None


async def test_a_taken_admin_port_fails_the_start_before_any_channel_runs(tmp_path: Path, fake_llm: FakeLLM) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        chat = MemoryChannel()
        app = make_app(tmp_path, fake_llm, chat, admin={"listen": f"127.0.0.1:{taken.getsockname()[1]}"})
        with pytest.raises(OSError):
            async with app.running():
                pass
    with pytest.raises(RuntimeError, match="not running"):
        await chat.say("hi")
