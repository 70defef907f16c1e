"""Discord's gateway going bad, through a real `bot run` on the fake Discord: a gateway that closes every connection
puts the account in `degraded`, and the bot's attempts are spaced by the backoff, not a hot loop, until it is let in
again (a zombie connection, left for a new one that resumes the session, on every platform:
test_watchdog_every_platform.py). On the adapter: a silent gateway (discord.py's own watchdog), and the storm's
backoff growing to five minutes with jitter on an injected clock and random source. And ReconnectGate (the storm
count and its backoff) on an injected clock."""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import configs
import discord
import pytest
from fakes.discord import FakeDiscord
from fakes.llm import FakeLLM
from helpers import FakeClock, asked, bot_run, eventually, finished

from channels.accounts import DiscordAccount
from channels.backoff import Backoff, Timing
from channels.base import ActionEvent, ChatTarget, InboundMessage, OutboundMessage
from channels.discord import BACKOFF_CAP, BACKOFF_FIRST, CONNECT_SECONDS, DiscordAdapter, ReconnectGate
from routing import Peer

STARTED = "channel discord account main started"
DEGRADED = "channel discord account main is degraded"


def config(tmp_path: Path, llm: FakeLLM, dc: FakeDiscord, **account: Any) -> dict[str, Any]:
    binding = {"agent": "main", "match": {"channel": "discord", "account": "main"}}
    return configs.config_dict(
        tmp_path, llm, configs.discord(dc, streaming="off", **account),
        agents=[{"id": "main", "default": True}], owners=[f"discord:{dc.alice.id}"], bindings=[binding],
    )  # fmt: skip


class Log:
    """The bot's log from the moment this is made: what a step of the test caused, not what came before it."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / "bot.log"
        self.start = len(self.path.read_text(errors="replace"))

    def text(self) -> str:
        return self.path.read_text(errors="replace")[self.start :]

    def __contains__(self, line: str) -> bool:
        return line in self.text()


def most_connections(limit: int, elapsed: float) -> int:
    """The most gateway connections ReconnectGate lets through in `elapsed` seconds: `limit` at once, then each one
    after the one before it by at least half its backoff step (1 s, 2 s, 4 s … up to BACKOFF_CAP)."""
    made, waited, step = limit, 0.0, BACKOFF_FIRST
    while True:
        waited += step / 2
        if waited > elapsed:
            return made
        made, step = made + 1, min(BACKOFF_CAP, step * 2)


async def test_a_gateway_that_closes_every_connection_degrades_the_account_and_gets_backed_off_attempts(
    tmp_path: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord
) -> None:
    dc = fake_discord
    limit = 3
    fake_llm.script("Still here.")
    owner_dm = dc.dm_channel_id(dc.alice)
    settings = config(tmp_path, fake_llm, dc, storm_reconnects=limit, storm_minutes=10)
    async with bot_run(settings, tmp_path, STARTED):
        log = Log(tmp_path)
        loop = asyncio.get_running_loop()
        connections = dc.connections
        dc.close_new_connections = True
        began = loop.time()
        await dc.drop_connection()
        # Connections beyond the limit (the first connection counts too): the storm, and backed-off attempts.
        await eventually(
            lambda: DEGRADED in log and dc.connections - connections >= limit + 1, "a reconnect storm, backed off"
        )
        made = dc.connections - connections
        elapsed = loop.time() - began  # read after the count: the bound below is only ever looser for it
        assert made <= most_connections(limit, elapsed), (made, elapsed)

        dc.close_new_connections = False
        await eventually(lambda: "channel discord account main recovered (was degraded)" in log, "the recovery")
        await dc.dm("still there?", user=dc.alice)
        await dc.wait_for_posts(1, owner_dm)
        await finished(tmp_path / "state")
        assert dc.texts(owner_dm) == ["Still here."]
        assert asked(fake_llm) == ["still there?"]
        assert log.text().count(DEGRADED) == 1  # one line for the incident, not one per attempt


# --- the adapter's health, in process ---------------------------------------------------------------------------


async def ignore(_: InboundMessage | ActionEvent) -> None:
    return None


@pytest.fixture
async def adapter(fake_discord: FakeDiscord) -> AsyncIterator[DiscordAdapter]:
    settings = {"token": fake_discord.token, **fake_discord.urls, "guild_ready_timeout": 0.05, "storm_reconnects": 1}
    started = DiscordAdapter("main", DiscordAccount.model_validate(settings))
    await started.start(ignore, ignore)
    try:
        yield started
    finally:
        await started.stop()


async def test_the_adapter_keeps_its_health_true(adapter: DiscordAdapter, fake_discord: FakeDiscord) -> None:
    dc = fake_discord
    health = adapter.health.snapshot()
    assert (health.channel, health.account, health.state) == ("discord", "main", "connected")
    assert health.last_inbound is not None and health.last_success is not None  # READY; users/@me at login
    owner = ChatTarget(channel="discord", peer=Peer("direct", dc.alice.id))
    with pytest.raises(discord.NotFound, match="Unknown Message"):
        await adapter.edit(owner, "1", OutboundMessage(text="gone"))
    assert "Unknown Message" in (adapter.health.snapshot().last_error or "")
    assert dc.token not in (adapter.health.snapshot().last_error or "")
    await dc.drop_connection()
    await eventually(lambda: adapter.health.snapshot().reconnects == 1, "the resumed connection counted")
    assert adapter.health.snapshot().state == "connected"
    await adapter.stop()
    assert adapter.health.snapshot().state == "stopped"


async def test_stopping_during_a_storms_wait_ends_the_adapter_quietly(
    adapter: DiscordAdapter, fake_discord: FakeDiscord, caplog: pytest.LogCaptureFixture
) -> None:
    fake_discord.close_new_connections = True
    await fake_discord.drop_connection()
    await eventually(lambda: adapter.health.state == "degraded", "the storm")  # one connection allowed: this is one
    await adapter.stop()
    assert adapter.health.state == "stopped"
    assert adapter._task is None
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR], caplog.text


class Heard:
    """What the adapter handed over, in order."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    async def message(self, message: InboundMessage | ActionEvent) -> None:
        if isinstance(message, InboundMessage):
            self.texts.append(message.text)


async def test_a_silent_gateway_is_left_by_discord_py_and_what_it_held_back_comes_once_on_the_resume(
    fake_discord: FakeDiscord,
) -> None:
    dc = fake_discord
    dc.heartbeat_interval_ms = 200
    settings = {**dc.urls, "token": dc.token, "guild_ready_timeout": 0.05, "stall_seconds": 1, "storm_reconnects": 50}
    adapter = DiscordAdapter("main", DiscordAccount.model_validate(settings))
    heard = Heard()
    await adapter.start(heard.message, ignore)
    try:
        dc.go_silent()  # nothing more on this connection, nor on new ones for now
        await dc.dm("held back")  # kept in the session, for the RESUME
        await eventually(lambda: adapter.health.state == "stalled", "the silence found")
        dc.speak_again()
        await eventually(lambda: heard.texts == ["held back"], "the held message, on the resume")
        await eventually(lambda: adapter.health.state == "connected", "the recovery")
        assert dc.resumes and {resume["session_id"] for resume in dc.resumes} == {"session-1"}
        await dc.dm("after")
        await eventually(lambda: heard.texts == ["held back", "after"], "the next message, once")
    finally:
        await adapter.stop()


class Draws:
    """A random source that hands out `values` in turn, again from the start when they run out."""

    def __init__(self, *values: float) -> None:
        self.values = values
        self.drawn = 0

    def __call__(self) -> float:
        value = self.values[self.drawn % len(self.values)]
        self.drawn += 1
        return value


async def test_a_storm_backs_off_doubling_up_to_five_minutes_with_jitter(fake_discord: FakeDiscord) -> None:
    dc = fake_discord
    clock, draws = FakeClock(), Draws(0.0, 0.5, 0.9)
    settings = {**dc.urls, "token": dc.token, "guild_ready_timeout": 0.05, "storm_reconnects": 1}
    timing = Timing(clock=clock, sleep=clock.sleep, draw=draws)
    adapter = DiscordAdapter("main", DiscordAccount.model_validate(settings), timing=timing)
    heard = Heard()
    await adapter.start(heard.message, ignore)
    try:
        dc.close_new_connections = True
        await dc.drop_connection()
        # Twelve connections closed one after the other, each waiting (on the fake clock) before it was made.
        await eventually(lambda: len(clock.slept) >= 12, "a long storm")
        steps = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 300.0, 300.0, 300.0]
        expected = [step * (0.5 + 0.5 * draws.values[n % 3]) for n, step in enumerate(steps)]
        assert clock.slept[:12] == pytest.approx(expected)
        assert BACKOFF_CAP == 300.0 and max(clock.slept) <= BACKOFF_CAP
        assert adapter.health.state == "degraded"

        dc.close_new_connections = False
        await eventually(lambda: adapter.health.state == "connected", "let in again")
        await dc.dm("calm again")
        await eventually(lambda: heard.texts == ["calm again"], "the session, resumed")
    finally:
        await adapter.stop()


def test_the_gateway_loop_follows_the_discord_py_it_was_written_against() -> None:
    # Client.connect (channels/discord/client.py) is discord.py's Client.connect with the watchdog added; a new
    # discord.py may change its loop (the exceptions it reconnects on, how it resumes): compare the two, then update
    # this digest.
    source = inspect.getsource(discord.Client.connect)
    assert hashlib.sha256(source.encode()).hexdigest()[:16] == "300daeed48a83570", "discord.py changed Client.connect"
    assert "timeout=60.0" in source and CONNECT_SECONDS == 60.0


# --- ReconnectGate, on an injected clock ---------------------------------------------------------------------------


def gate(clock: FakeClock, jitter: float, limit: int = 3, window: float = 600.0) -> ReconnectGate:
    return ReconnectGate(limit, window, clock=clock, backoff=Backoff(draw=lambda: jitter))


def test_the_gate_lets_the_limit_through_then_doubles_its_wait_up_to_the_cap_with_jitter() -> None:
    clock = FakeClock()
    longest, shortest = gate(clock, jitter=1.0), gate(clock, jitter=0.0)
    assert [longest.attempt() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert [longest.attempt() for _ in range(11)] == [1, 2, 4, 8, 16, 32, 64, 128, 256, BACKOFF_CAP, BACKOFF_CAP]
    assert [shortest.attempt() for _ in range(3 + 11)][3:] == [0.5, 1, 2, 4, 8, 16, 32, 64, 128, 150, 150]
    assert longest.recent == 14


async def test_a_gateway_closing_every_connection_for_an_hour_gets_a_few_dozen_attempts_not_a_loop() -> None:
    clock = FakeClock()
    storm = gate(clock, jitter=0.0, limit=5, window=3600.0)  # the shortest waits the jitter allows
    attempts = 0
    while clock.now < 1000.0 + 3600.0:
        attempts += 1
        await clock.sleep(storm.attempt())
    # 5 at once, then 0.5 + 1 + 2 … + 128 s (511 s in all), then one every 150 s until the hour is over
    assert attempts == 5 + 9 + 23
    assert max(clock.slept) == BACKOFF_CAP / 2


def test_a_connection_that_stays_up_ends_the_storm_and_one_dropped_soon_does_not() -> None:
    clock = FakeClock()
    storm = gate(clock, jitter=1.0, limit=3, window=600.0)  # stable after 600 / 3 = 200 s
    for _ in range(5):
        storm.attempt()  # the limit, and two of the storm: 1 s, 2 s
    storm.connected()
    clock.advance(199.0)  # READY, then dropped before it proved stable
    assert storm.attempt() == 4.0
    storm.connected()
    clock.advance(200.0)  # this one stayed up
    assert [storm.attempt() for _ in range(4)] == [0.0, 0.0, 0.0, 1.0]


def test_a_window_without_any_connection_ends_the_storm() -> None:
    clock = FakeClock()
    storm = gate(clock, jitter=1.0, limit=2, window=60.0)
    assert [storm.attempt() for _ in range(4)] == [0.0, 0.0, 1.0, 2.0]
    clock.advance(30.0)
    assert storm.attempt() == 4.0  # still within the window of the others: the storm goes on
    clock.advance(60.0)
    assert [storm.attempt() for _ in range(3)] == [0.0, 0.0, 1.0]


@pytest.mark.parametrize("jitter", [0.0, 0.999])
def test_every_wait_is_between_half_and_all_of_its_step(jitter: float) -> None:
    clock = FakeClock()
    storm = gate(clock, jitter=jitter, limit=1)
    storm.attempt()
    waits = [storm.attempt() for _ in range(10)]
    steps = [min(BACKOFF_CAP, BACKOFF_FIRST * 2**n) for n in range(10)]
    assert all(step / 2 <= wait <= step for wait, step in zip(waits, steps, strict=True))
