"""The Telegram watchdogs. Polling: a getUpdates that hangs without an error (the fake's `go_silent`) is given up
after `stall_seconds`, the poller gets a new HTTP session and asks again from the stored offset, and the account's
health says stalled, then connected, with one log line each way; decided on a fake clock, then on the real adapter
against the fake Bot API (through a real `bot run`, with `bot status`, on every platform:
test_watchdog_every_platform.py). A `stall_seconds` shorter than a long poll is refused by `bot config check` and
`bot run`, with its line. Webhook: after `stall_seconds` without a post, Telegram is asked whether it holds updates
(getWebhookInfo); if it does, the account is degraded and the webhook set again."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from fakes.telegram import FakeTelegram
from helpers import LOCAL, FakeClock, bot, eventually, write
from pydantic import ValidationError

from channels.accounts import STALL_MARGIN
from channels.base import ActionEvent, InboundMessage
from channels.telegram import PollWatchdog, TelegramAccount, TelegramAdapter

OWNER = 4242
STALLED = "channel telegram account main is stalled"
RECOVERED = "channel telegram account main recovered (was stalled)"


# --- the decision, on a fake clock -------------------------------------------------------------------------------


def test_the_silence_runs_through_failed_attempts_until_a_getupdates_completes() -> None:
    clock = FakeClock()
    watchdog = PollWatchdog(90, clock)
    assert watchdog.polling() == 90  # the first getUpdates has all of it
    clock.advance(40)  # it failed after 40s; the next attempt has what is left
    assert watchdog.polling() == 50
    clock.advance(60)
    assert watchdog.polling() == 0  # stalled: given up at once
    watchdog.reset()  # a new session: a full stall_seconds again, never a rebuild after a rebuild
    assert watchdog.polling() == 90


def test_time_spent_handing_updates_to_the_gateway_is_not_silence() -> None:
    clock = FakeClock()
    watchdog = PollWatchdog(90, clock)
    watchdog.polling()
    clock.advance(30)
    watchdog.reset()  # the getUpdates completed
    clock.advance(500)  # a slow journal write before the next getUpdates
    assert watchdog.polling() == 90


# --- stall_seconds shorter than a long poll: refused, with its line ----------------------------------------------

SHORT_STALL = (
    LOCAL
    + """\
channels:
  telegram:
    accounts:
      main:
        token: "123456:abc"
        poll_timeout: 30
        stall_seconds: 5
"""
)


def test_stall_seconds_shorter_than_a_long_poll_is_refused_by_config_check_and_bot_run_with_its_line(
    tmp_path: Path,
) -> None:
    path = write(tmp_path, SHORT_STALL)
    line = SHORT_STALL.splitlines().index("        stall_seconds: 5") + 1
    refusal = (
        f"{path}:{line}: channels.telegram.accounts.main.stall_seconds: must be at least 32 (poll_timeout 30 + 2) "
        "when polling"
    )
    check = bot("config", "check", "--config", str(path))
    assert check.returncode == 1 and refusal in check.stderr, check.stderr
    run = bot("run", "--config", str(path))  # refused before it connects anywhere
    assert run.returncode != 0 and refusal in run.stderr, run.stderr


def test_the_shortest_stall_seconds_a_poll_allows_is_taken_and_a_webhook_takes_any() -> None:
    shortest = TelegramAccount(token="1:x", poll_timeout=30, stall_seconds=30 + STALL_MARGIN)
    assert TelegramAdapter("main", shortest).watchdog.stall_seconds == 32
    assert TelegramAdapter("main", TelegramAccount(token="1:x")).watchdog.stall_seconds == 90
    with pytest.raises(ValidationError, match="must be at least 32"):
        TelegramAccount(token="1:x", poll_timeout=30, stall_seconds=31.9)
    hook = {"mode": "webhook", "webhook_url": "https://bot.example/tg", "webhook_secret": "s"}
    assert TelegramAccount.model_validate({"token": "1:x", "stall_seconds": 0.5} | hook).stall_seconds == 0.5


# --- the adapter against the fake Bot API ------------------------------------------------------------------------


class Received:
    def __init__(self) -> None:
        self.messages: list[InboundMessage] = []

    async def on_message(self, message: InboundMessage) -> None:
        self.messages.append(message)

    async def on_action(self, event: ActionEvent) -> None:
        return None


async def test_a_hung_getupdates_gets_a_new_session_and_the_same_offset(
    fake_telegram: FakeTelegram, caplog: pytest.LogCaptureFixture
) -> None:
    tg = fake_telegram
    caplog.set_level(logging.INFO, logger="channels.health")
    # The shortest stall the adapter takes (see `config` below): a real request held open, waited through in real time.
    settings = TelegramAccount(token=tg.token, api_base_url=tg.url, poll_timeout=1, stall_seconds=3)
    adapter, received = TelegramAdapter("main", settings), Received()
    await adapter.start(received.on_message, received.on_action)
    try:
        assert adapter.health.state == "connected"
        before = await tg.private_message("before")
        await tg.acknowledged(before)

        tg.go_silent()
        await eventually(lambda: tg.hung == 1, "a getUpdates held by the silence")
        hung_connection = tg.poll_connections[-1]
        during = await tg.private_message("during the outage")
        await eventually(lambda: adapter.health.state == "stalled", "the account to be stalled")
        await eventually(lambda: tg.hung == 2, "a getUpdates on the new session, held too")
        tg.resume()  # the held getUpdates stays held: only asking again gets an answer
        await tg.acknowledged(during)

        assert adapter.health.state == "connected"
        assert [message.text for message in received.messages] == ["before", "during the outage"]
        assert tg.poll_connections[-1] != hung_connection
        health = adapter.health.snapshot()
        assert health.reconnects == 2  # one new session per stall_seconds of silence
        assert health.last_error == "no getUpdates completed in 3s"
        assert health.last_inbound is not None and health.last_success is not None
    finally:
        await adapter.stop()
    assert adapter.health.snapshot().state == "stopped"
    lines = [record.getMessage() for record in caplog.records if record.name == "channels.health"]
    assert lines == [f"{STALLED}: no getUpdates completed in 3s", RECOVERED]  # one line each way


# --- webhook mode: a webhook Telegram no longer posts to ---------------------------------------------------------

SECRET = "s3cret"
DEGRADED = "channel telegram account main is degraded"


async def test_a_webhook_telegram_holds_updates_for_is_reported_and_set_again_and_a_quiet_one_is_left_alone(
    fake_telegram: FakeTelegram, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="channels.health")
    tg = fake_telegram
    received: list[str] = []

    async def on_message(message: InboundMessage) -> None:
        received.append(message.text)

    async def on_action(event: ActionEvent) -> None:
        return None

    hook = {"webhook_url": "https://bot.example.invalid/tg", "webhook_secret": SECRET, "webhook_port": 0}
    # Posts come over a real socket: the watchdog's silence is a real 0.3 s, set short here.
    settings = TelegramAccount(token=tg.token, api_base_url=tg.url, mode="webhook", stall_seconds=0.3, **hook)
    adapter = TelegramAdapter("main", settings)
    await adapter.start(on_message, on_action)
    try:
        await tg.route_webhook(f"http://127.0.0.1:{adapter.webhook_port}/tg")
        await tg.private_message("hello", user_id=OWNER)
        await eventually(lambda: received == ["hello"], "the first update, posted")

        # No traffic: Telegram holds nothing, so each look changes nothing.
        await tg.wait_calls("getWebhookInfo", 2)
        assert adapter.health.state == "connected" and len(tg.calls("setWebhook")) == 1

        tg.stall_webhook("Connection timed out")  # Telegram stops posting; what is said waits as pending
        await tg.private_message("are you there?", user_id=OWNER)
        await eventually(lambda: received == ["hello", "are you there?"], "the pending update, once set again")
        await eventually(lambda: adapter.health.state == "connected", "the recovery")
        first, again = tg.calls("setWebhook")
        assert again["url"] == first["url"] == hook["webhook_url"] and again["secret_token"] == SECRET
        assert adapter.health.snapshot().reconnects == 1
    finally:
        await adapter.stop()
    lines = [record.getMessage() for record in caplog.records if record.name == "channels.health"]
    assert lines == [
        f"{DEGRADED}: no update for 0.3s while Telegram holds 1 for the webhook (its last error: Connection timed "
        "out); setting the webhook again",
        "channel telegram account main recovered (was degraded)",
    ]
    assert received == ["hello", "are you there?"]  # once each
