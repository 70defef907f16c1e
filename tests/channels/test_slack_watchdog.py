"""Slack's Socket Mode watchdog: a connection that goes silent (no envelope, no pong) for `stall_seconds` is reported
stalled once, replaced by a fresh one (apps.connections.open again) and closed for good, never more than two open at
once; new connections that stay silent each get their full `stall_seconds`; the account recovers on a hello. A socket
that drops without a close frame makes the account degraded, and reconnects that keep failing wait longer each time,
with jitter, until one holds. First on the adapter against the fake Slack, then through a real `bot run` that answers
what was said while the socket was dropped (while it was silent, on every platform:
test_watchdog_every_platform.py)."""

from __future__ import annotations

import asyncio
import logging
import re
from pathlib import Path
from typing import Any

import configs
import pytest
from fakes.llm import FakeLLM
from fakes.slack import FakeSlack, dm_channel
from helpers import asked, bot_run, eventually, finished

from channels.backoff import Timing
from channels.base import ActionEvent, InboundMessage
from channels.slack import MAX_BACKOFF_SECONDS, SlackAccount, SlackAdapter
from routing.errors import ChannelError

OWNER = "U0OWNER01"
STALL = 1.0  # the adapter test's stall_seconds


def said(slack: FakeSlack, channel: str) -> list[str]:
    """The text of the bot's messages in one channel, in order."""
    return [str(message["text"]) for (where, _), message in slack.messages.items() if where == channel]


async def test_a_silent_connection_is_replaced_closed_and_reported_once(
    fake_slack: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="channels.health")
    slack = fake_slack
    received: list[InboundMessage] = []

    async def on_message(message: InboundMessage) -> None:
        received.append(message)

    async def on_action(event: ActionEvent) -> None:
        raise AssertionError("no clicks here")

    settings = {"bot_token": slack.bot_token, "app_token": slack.app_token, "api_base_url": slack.url}
    adapter = SlackAdapter(
        "default", SlackAccount.model_validate(settings | {"stall_seconds": STALL, "ping_interval": 0.2})
    )
    assert adapter.health.state == "starting"
    await adapter.start(on_message, on_action)
    try:
        await eventually(lambda: adapter.health.state == "connected", "connected on Slack's hello")
        await eventually(lambda: slack.pings >= 2, "the adapter's own pings, answered")
        assert adapter.health.snapshot().last_inbound is not None  # the hello and the pongs were heard

        slack.go_deaf(later_ones_too=True)  # the socket and every new one say nothing at all
        await eventually(lambda: slack.connections >= 3, "two replacements, each as silent")
        assert adapter.health.state == "stalled"
        assert caplog.text.count("channel slack account default is stalled: no envelope or pong") == 1  # one incident
        # No hot loop: a new connection is given its full stall_seconds (and a backoff after it) before the next.
        gaps = [later - earlier for earlier, later in zip(slack.opened_at[1:], slack.opened_at[2:], strict=False)]
        assert gaps and all(gap >= STALL for gap in gaps)
        assert len(slack.calls_to("apps.connections.open")) == slack.connections  # a fresh URL for each

        slack.hear_again()
        await eventually(lambda: adapter.health.state == "connected", "recovery on a new connection's hello")
        assert caplog.text.count("channel slack account default recovered (was stalled)") == 1
        assert adapter.health.snapshot().reconnects == slack.connections - 1
        assert slack.max_open_sockets == 2  # the old one open until the new one was, then closed
        await eventually(lambda: slack.open_sockets == 1, "every silent connection closed")

        envelope = await slack.dm("still there?")
        await slack.wait_for_ack(envelope)
        await eventually(lambda: [message.text for message in received] == ["still there?"], "the message handed over")
    finally:
        await adapter.stop()
    await eventually(lambda: slack.open_sockets == 0, "the last connection closed on stop")
    assert adapter.health.state == "stopped"


class HeldWaits:
    """The adapter's reconnect waits: each one recorded, and held until the test lets them all pass (so that it can
    act while the account is down)."""

    def __init__(self) -> None:
        self.asked: list[float] = []
        self.go = asyncio.Event()

    async def sleep(self, seconds: float) -> None:
        self.asked.append(seconds)
        await self.go.wait()


async def test_a_dropped_socket_reconnects_after_waits_that_grow_with_jitter_and_what_was_said_comes_once(
    fake_slack: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="channels.health")
    slack = fake_slack
    received: list[str] = []

    async def on_message(message: InboundMessage) -> None:
        received.append(message.text)

    async def on_action(event: ActionEvent) -> None:
        raise AssertionError("no clicks here")

    waits, draws = HeldWaits(), iter([0.0, 1.0, 0.5, 0.5])
    settings = {"bot_token": slack.bot_token, "app_token": slack.app_token, "api_base_url": slack.url}
    account = SlackAccount.model_validate(settings | {"stall_seconds": 60})  # no stall in this test: a drop
    adapter = SlackAdapter("default", account, timing=Timing(sleep=waits.sleep, draw=lambda: next(draws)))
    await adapter.start(on_message, on_action)
    try:
        await eventually(lambda: adapter.health.state == "connected", "connected on Slack's hello")
        slack.refuse_sockets(3)  # Slack's socket hosts are down for the next three tries
        await slack.drop_sockets()  # the open socket cut, no close frame
        await eventually(lambda: len(waits.asked) == 1, "the first reconnect refused, the next one waiting")
        assert adapter.health.state == "degraded" and slack.open_sockets == 0
        envelope = await slack.dm("are you there?")  # said while the app has no connection: Slack holds it
        waits.go.set()
        await slack.wait_for_ack(envelope)  # on the connection that held
        await eventually(lambda: received == ["are you there?"], "the message handed over once")
        assert adapter.health.snapshot().state == "connected"
        # The first reconnect went at once; after each failure the wait doubled (1 s, 2 s, 4 s), each one between
        # half and all of its step by the draw.
        assert waits.asked == [1 * 0.5, 2 * 1.0, 4 * 0.75]
        assert slack.refused == 3 and slack.connections == 2 and slack.max_open_sockets == 1
        assert caplog.text.count("channel slack account default is degraded: the connection dropped without") == 1
        assert caplog.text.count("channel slack account default recovered (was degraded)") == 1
        assert adapter.health.snapshot().reconnects == 1
    finally:
        await adapter.stop()


async def test_the_reconnect_waits_stop_growing_at_the_cap(fake_slack: FakeSlack) -> None:
    slack = fake_slack
    waits: list[float] = []

    async def instant(seconds: float) -> None:
        waits.append(seconds)
        await asyncio.sleep(0)

    async def ignore(event: Any) -> None:
        return None

    settings = {"bot_token": slack.bot_token, "app_token": slack.app_token, "api_base_url": slack.url}
    adapter = SlackAdapter(
        "default", SlackAccount.model_validate(settings), timing=Timing(sleep=instant, draw=lambda: 1.0)
    )
    await adapter.start(ignore, ignore)
    try:
        await eventually(lambda: adapter.health.state == "connected", "connected")
        slack.refuse_sockets(9)
        await slack.drop_sockets()
        await eventually(lambda: slack.connections == 2 and adapter.health.state == "connected", "back after nine")
        assert waits == [1, 2, 4, 8, 16, 32, MAX_BACKOFF_SECONDS, MAX_BACKOFF_SECONDS, MAX_BACKOFF_SECONDS]
    finally:
        await adapter.stop()


def bot_config(tmp_path: Path, llm: FakeLLM, fake: FakeSlack) -> dict[str, Any]:
    # The socket's watchdog as in a bot that notices a silent connection soon: short, yet long enough that pongs
    # 0.5 s apart never look like a stall on a loaded machine.
    account = configs.slack(fake, streaming="off", stall_seconds=3, ping_interval=0.5)
    binding = {"agent": "main", "match": {"channel": "slack", "account": "main"}}
    return configs.config_dict(tmp_path, llm, account, owners=[f"slack:{OWNER}"], bindings=[binding])


async def test_a_bot_whose_socket_drops_reconnects_and_answers_what_was_said_meanwhile_once(
    tmp_path: Path, fake_llm: FakeLLM, fake_slack: FakeSlack
) -> None:
    slack = fake_slack
    chat = dm_channel(OWNER)
    fake_llm.script("After the drop.")
    async with bot_run(bot_config(tmp_path, fake_llm, slack), tmp_path, "channel slack account main started") as path:
        state, log = path.parent / "state", tmp_path / "bot.log"
        await slack.wait_connected()
        slack.refuse_sockets(1)  # the first reconnect fails: the next waits the backoff's first step, 0.5 to 1 s
        await slack.drop_sockets()
        during = await slack.dm("are you there?", user=OWNER)  # no socket open: held for the next connection
        await slack.wait_for_ack(during)
        await eventually(lambda: said(slack, chat) == ["After the drop."], "the answer")
        await eventually(lambda: "channel slack account main recovered (was degraded)" in log.read_text(), "recovery")
        await finished(state)

        text = log.read_text()
        assert text.count("channel slack account main is degraded") == 1
        assert said(slack, chat) == ["After the drop."] and asked(fake_llm) == ["are you there?"]  # once
        assert slack.refused == 1 and slack.connections == 2


async def test_an_app_token_slack_refuses_fails_the_start_instead_of_retrying(fake_slack: FakeSlack) -> None:
    # the bot token where the app-level token belongs, a common slip
    settings = {"bot_token": fake_slack.bot_token, "app_token": fake_slack.bot_token, "api_base_url": fake_slack.url}
    adapter = SlackAdapter("default", SlackAccount.model_validate(settings))

    async def ignore(event: Any) -> None:
        raise AssertionError("nothing is delivered")

    with pytest.raises(ChannelError, match=re.escape("apps.connections.open refused the app token: invalid_auth")):
        await adapter.start(ignore, ignore)
    await adapter.stop()
    assert fake_slack.connections == 0 and len(fake_slack.calls_to("apps.connections.open")) == 1
    snapshot = adapter.health.snapshot()
    assert snapshot.last_error == "apps.connections.open: invalid_auth" and snapshot.state == "stopped"
