"""Where messages come in when several processes serve one bot from one PostgreSQL database: Telegram webhooks may
reach any process (behind a balancer) and Slack Socket Mode connects from each; an update or event delivered to two
of them is answered once (the journal drops the second)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
from configs import config_of, slack as slack_account, telegram
from fakes.llm import FakeLLM
from fakes.slack import FakeSlack
from fakes.telegram import FakeTelegram
from helpers import eventually

from bot.app import App
from bot.gateway.process import Gateway
from channels.telegram import TelegramAdapter

SECRET = "s3cret"


def webhook_app(folder: Path, llm: FakeLLM, tg: FakeTelegram, url: str) -> App:
    account = telegram(
        tg, dm_policy="open", streaming="off", mode="webhook",
        webhook_url="https://bot.example.invalid/tg", webhook_secret=SECRET, webhook_port=0,
    )  # fmt: skip
    return App(config_of(folder.parent, llm, account, state={"backend": "postgres", "url": url}), folder / "state")


def update(update_id: int, user: int, text: str) -> dict[str, Any]:
    chat = {"id": user, "type": "private"}
    sender = {"id": user, "is_bot": False, "first_name": f"U{user}"}
    return {
        "update_id": update_id,
        "message": {"message_id": update_id, "date": 0, "chat": chat, "from": sender, "text": text},
    }


def hook_of(gateway: Gateway) -> str:
    adapter = gateway.adapters[("telegram", "main")]
    assert isinstance(adapter, TelegramAdapter) and adapter.webhook_port is not None
    return f"http://127.0.0.1:{adapter.webhook_port}/"


@asynccontextmanager
async def two_webhook_gateways(
    tmp_path: Path, llm: FakeLLM, tg: FakeTelegram, url: str
) -> AsyncIterator[list[Gateway]]:
    async with AsyncExitStack() as stack:
        yield [
            await stack.enter_async_context(webhook_app(tmp_path / name, llm, tg, url).running())
            for name in ("one", "two")
        ]


async def test_webhooks_reach_either_process_and_an_update_posted_to_both_is_answered_once(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram, postgres_url: str
) -> None:
    tg = fake_telegram
    fake_llm.script_for("first", "One.")
    fake_llm.script_for("second", "Two.")
    async with two_webhook_gateways(tmp_path, fake_llm, tg, postgres_url) as (one, two):
        assert one.cluster is not None and not one.cluster.listening  # a webhook is nobody's alone: no election
        assert len(tg.calls("setWebhook")) == 2
        headers = {"X-Telegram-Bot-Api-Secret-Token": SECRET}
        async with httpx.AsyncClient(headers=headers) as client:
            for hook in (hook_of(one), hook_of(two)):  # the balancer retried it on the other process
                answer = await client.post(hook, json=update(1, 501, "first"))
                assert answer.status_code == 200
            assert (await client.post(hook_of(two), json=update(2, 502, "second"))).status_code == 200
        assert await tg.wait_sent(501, 1) == ["One."]
        assert await tg.wait_sent(502, 1) == ["Two."]
        await eventually(lambda: one.lanes.lane_count() + two.lanes.lane_count() == 0, "both turns to end")
    assert tg.sent[501] == ["One."] and tg.sent[502] == ["Two."]
    assert len(fake_llm.requests) == 2


def slack_app(folder: Path, llm: FakeLLM, slack: FakeSlack, url: str) -> App:
    account = slack_account(slack, streaming="off", dm_policy="open")
    return App(config_of(folder.parent, llm, account, state={"backend": "postgres", "url": url}), folder / "state")


async def test_slack_socket_mode_connects_from_every_process_and_a_redelivered_event_is_answered_once(
    tmp_path: Path, fake_llm: FakeLLM, fake_slack: FakeSlack, postgres_url: str
) -> None:
    slack = fake_slack
    fake_llm.script_for("first", "One.")
    fake_llm.script_for("second", "Two.")
    async with AsyncExitStack() as stack:
        one, two = [
            await stack.enter_async_context(slack_app(tmp_path / name, fake_llm, slack, postgres_url).running())
            for name in ("one", "two")
        ]
        await eventually(lambda: slack.open_sockets == 2, "both processes to connect")
        assert one.cluster is not None and not one.cluster.listening  # Slack spreads events itself: no election
        ts = slack.new_ts()
        for socket in (0, 1):  # Slack retried the event on the other connection
            slack.deliver_to = socket
            await slack.dm("first", ts=ts)
        slack.deliver_to = 0
        await slack.dm("second", user="U0SECOND")
        await eventually(lambda: len(slack.posted) == 2, "both answers")
        await eventually(lambda: one.lanes.lane_count() + two.lanes.lane_count() == 0, "both turns to end")
    assert sorted(message["text"] for message in slack.posted) == ["One.", "Two."]
    assert len(fake_llm.requests) == 2
