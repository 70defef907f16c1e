"""The gateway's status (issue 19): the report in status.json (channels, running turns, queues, approvals, the outbox,
today's usage), the owners' notices of a channel that stays down and of its recovery, /status's channel lines for
owners, and `bot status` beside a real `bot run` (running, stopped, killed)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from configs import config_dict, config_of, telegram
from fakes.llm import FakeLLM, Reply
from fakes.telegram import FakeTelegram
from helpers import FakeClock, eventually, launch_bot

from bot import App
from bot.cli.main import cli
from bot.config.settings import Config
from bot.gateway.status import (
    STATUS_FILE,
    STATUS_INTERVAL,
    OutboxBacklog,
    QueueDepth,
    StatusReport,
    UsageToday,
    read_report,
)
from bot.store.approvals import ApprovalRecord
from channels import MemoryChannel
from channels.base import ChatTarget, InboundMessage, OutboundMessage
from channels.health import HealthSnapshot
from routing import Peer
from routing.errors import ChannelError

NOW = datetime(2026, 11, 27, 10, 0, tzinfo=UTC).timestamp()
OWNER = "ann"


def config(llm: FakeLLM, tmp_path: Path, **extra: Any) -> Config:
    return config_of(
        tmp_path, llm, defaults={"timezone": "UTC"}, owners=[f"memory:{OWNER}", "memory:cat", "slack:U1"],
        session={"queue": {"mode": "followup", "debounce_ms": 0}}, **extra,
    )  # fmt: skip


class Unreachable(MemoryChannel):
    """A channel account whose platform refuses every send: what is said there stays in the outbox."""

    async def send(self, target: ChatTarget, message: OutboundMessage) -> str | None:
        raise ChannelError("the platform is down")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(NOW)


async def test_the_report_shows_channels_turns_queues_approvals_outbox_and_usage_today(
    fake_llm: FakeLLM, tmp_path: Path, clock: FakeClock
) -> None:
    chat, broken = MemoryChannel(), Unreachable("memory", "broken")
    fake_llm.script(Reply.text("Done.", usage=(100, 20), cache_read=40), Reply.held("Thinking…"))
    state = tmp_path / "state"
    app = App(config(fake_llm, tmp_path), state, adapters=[chat, broken], clock=clock)
    async with app.running(grace_seconds=0.1) as gateway:
        assert (state / STATUS_FILE).exists()  # written once right after start
        await chat.say("hello", sender=OWNER)
        assert [sent.text for sent in await chat.replies()] == ["Done."]
        await eventually(lambda: not gateway.lanes.busy(f"agent:main:memory:direct:{OWNER}"), "ann's turn to end")
        await chat.say("think hard", sender="bob")
        await eventually(lambda: fake_llm.holding == 1, "bob's turn to be running")
        await chat.say("and this", sender="bob")
        await chat.say("and that", sender="bob")
        bob = "agent:main:memory:direct:bob"
        await eventually(lambda: gateway.lanes.depth(bob) == 2, "two messages to wait in bob's queue")
        await gateway.store.create_approval(
            ApprovalRecord(id="ap1", agent="main", session_key=bob, command="ls", cwd="/", approvers=["memory:ann"],
                           created=clock(), expires=clock() + 1800, status="pending")
        )  # fmt: skip
        stranded = InboundMessage(channel="memory", account="broken", peer=Peer("direct", "z"), sender_id="z",
                                  message_id="n1")  # fmt: skip
        await gateway.delivery.reply(stranded, "nobody hears this")
        broken.health.set("stalled", "no updates for 90s")
        clock.advance(30)

        report = await gateway.status.report()
        assert [(c.channel, c.account, c.state, c.last_error) for c in report.channels] == [
            ("memory", "default", "connected", None),
            ("memory", "broken", "stalled", "no updates for 90s"),
        ]
        assert report.health == "unhealthy"
        assert report.running_turns == 1
        assert [(queue.session_key, queue.depth) for queue in report.queues] == [(bob, 2)]
        assert report.pending_approvals == 1
        assert (report.outbox.unsent, report.outbox.oldest_age) == (1, 30.0)
        usage = report.usage_today
        assert (usage.runs, usage.input_tokens, usage.output_tokens, usage.cache_read_tokens) == (1, 100, 20, 40)
        assert report.written_at == clock() and report.started_at == NOW

        await gateway.status.write()
        assert read_report(state) == report
        broken.health.set("connected")
        assert (await gateway.status.report()).health == "healthy"
    assert not (state / STATUS_FILE).exists()  # a clean stop removes it


OWNERS_DMS = {Peer("direct", OWNER), Peer("direct", "cat")}


def notice_config(llm: FakeLLM, tmp_path: Path, notify: bool = True) -> Config:
    return config(llm, tmp_path, health={"notify_owners": notify, "notify_after": "5m"})


async def test_owners_hear_once_when_a_channel_stays_down_and_once_when_it_is_back(
    fake_llm: FakeLLM, tmp_path: Path, clock: FakeClock
) -> None:
    chat, second = MemoryChannel(), MemoryChannel("memory", "second")
    app = App(notice_config(fake_llm, tmp_path), tmp_path / "state", adapters=[chat, second], clock=clock)
    async with app.running() as gateway:
        notices = gateway.notices
        second.health.set("stalled", "no updates for 90s")
        await notices.check()  # the incident begins
        clock.advance(299)
        await notices.check()
        await gateway.delivery.flush()
        assert chat.sent == [] and second.sent == []  # not yet: notify_after is 5 minutes

        clock.advance(1)
        await notices.check()
        down = await chat.replies(2)  # through the account that works; slack:U1 has no account to reach
        assert {sent.target.peer for sent in down} == OWNERS_DMS
        assert {sent.text for sent in down} == {"Channel memory/second has been stalled for 5m: no updates for 90s"}
        second.health.set("degraded", "still nothing")  # the same incident
        clock.advance(600)
        await notices.check()
        await gateway.delivery.flush()
        assert len(chat.sent) == 2  # once per incident

        second.health.set("connected")
        await notices.check()
        back = await chat.replies(2)
        assert {sent.target.peer for sent in back} == OWNERS_DMS
        assert {sent.text for sent in back} == {"Channel memory/second is connected again (it was down for 15m)."}
        clock.advance(600)
        await notices.check()
        await gateway.delivery.flush()
        assert len(chat.sent) == 4 and second.sent == []


async def test_without_notify_owners_nobody_is_told(fake_llm: FakeLLM, tmp_path: Path, clock: FakeClock) -> None:
    chat, second = MemoryChannel(), MemoryChannel("memory", "second")
    app = App(notice_config(fake_llm, tmp_path, notify=False), tmp_path / "state", adapters=[chat, second], clock=clock)
    async with app.running() as gateway:
        second.health.set("stalled")
        await gateway.notices.check()
        clock.advance(3600)
        await gateway.notices.check()
        await gateway.delivery.flush()
        assert chat.sent == []


async def test_status_shows_the_channels_health_to_owners_only(
    fake_llm: FakeLLM, tmp_path: Path, clock: FakeClock
) -> None:
    chat, second = MemoryChannel(), MemoryChannel("memory", "second")
    async with App(config(fake_llm, tmp_path), tmp_path / "state", adapters=[chat, second], clock=clock).running():
        second.health.set("degraded", "HTTP 502 from the platform")
        since = f"{datetime.fromtimestamp(second.health.snapshot().since, UTC):%Y-%m-%d %H:%M} UTC"
        await chat.say("/status", sender=OWNER)
        [owner_view] = await chat.replies()
        heading, first, second_line = owner_view.text.splitlines()[-3:]
        assert heading == "Channels:"
        assert second_line == f"memory/second: degraded since {since} (HTTP 502 from the platform)"
        assert first.startswith("memory/default: connected since ") and first.endswith(" UTC")
        await chat.say("/status", sender="bob")
        [other_view] = await chat.replies()
        assert "Agent: main" in other_view.text
        assert "Channels:" not in other_view.text and "memory/second" not in other_view.text


# --- `bot status` ---------------------------------------------------------------------------------------------------


def written(state: Path, *, age: float = 0.0, pid: int | None = None, stalled: bool = False) -> None:
    """A status file as a gateway of pid `pid` (default: this process, alive) wrote it `age` seconds ago (its times
    chosen mid-minute and mid-hour, so the ages printed do not depend on how fast the test runs)."""
    now = time.time()
    channels = [
        HealthSnapshot(channel="telegram", account="main", state="connected", since=now - 60, last_inbound=now - 150),
        HealthSnapshot(channel="slack", account="work", state="stalled" if stalled else "connected", since=now - 400,
                       last_inbound=now - 400, reconnects=3, last_error="no events for 90s\x1b[2J"),
    ]  # fmt: skip
    report = StatusReport(
        pid=os.getpid() if pid is None else pid, started_at=now - 5400, written_at=now - age,
        health="unhealthy" if stalled else "healthy", channels=channels, running_turns=1,
        queues=[QueueDepth(session_key="agent:main:x", depth=2)], pending_approvals=1,
        outbox=OutboxBacklog(unsent=4, oldest_age=75), usage_today=UsageToday(since=now, runs=2, input_tokens=1200),
    )  # fmt: skip
    state.mkdir(exist_ok=True)
    (state / STATUS_FILE).write_text(report.model_dump_json())


def bot_status_here(state: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["status", "--state", str(state), *args])
    return result.exit_code, result.output


def test_bot_status_prints_a_line_per_channel_and_exits_by_their_health(tmp_path: Path) -> None:
    state = tmp_path / "state"
    written(state)
    code, out = bot_status_here(state)
    lines = out.splitlines()
    assert code == 0 and lines[0].startswith(f"running  pid {os.getpid()}  up 1h  healthy")
    assert lines[1:3] == [
        "telegram/main  connected  last inbound 2m ago  reconnects 0",
        "slack/work  connected  last inbound 6m ago  reconnects 3",  # the last error only while it is down
    ]
    assert lines[3] == "turns running 1  queued 2 in 1 session(s)  approvals pending 1  outbox unsent 4 (oldest 1m)"
    assert lines[4].startswith("today: 2 run(s), 1,200 tokens in, 0 out")

    written(state, stalled=True)
    code, out = bot_status_here(state)
    assert code == 1
    assert out.splitlines()[2] == (  # the terminal's escape sequence shown, not obeyed
        "slack/work  stalled  since 6m ago  last inbound 6m ago  reconnects 3  last error: no events for 90s\\x1b[2J"
    )
    code, out = bot_status_here(state, "--json")
    assert code == 1 and json.loads(out)["health"] == "unhealthy" and json.loads(out)["running"] is True


def test_bot_status_says_not_running_for_no_file_a_dead_pid_or_a_stale_file(tmp_path: Path) -> None:
    state = tmp_path / "state"
    assert bot_status_here(state) == (2, f"not running (no status.json in {state})\n")
    written(state, age=3 * STATUS_INTERVAL + 90)  # alive, but not writing: hung
    code, out = bot_status_here(state, "--json")
    assert code == 2 and json.loads(out) == {"running": False, "reason": "status.json not updated for 1m"}
    written(state, pid=2**22 + 1)  # above Linux's largest pid: no such process
    assert bot_status_here(state) == (2, f"not running (process {2**22 + 1} is gone)\n")


# --- `bot status` beside a real `bot run` ---------------------------------------------------------------------------

TG_OWNER = 4242
STARTED = "channel telegram account main started"


async def bot_status_text(folder: Path, *options: str) -> tuple[int, str]:
    """`bot status` on the test's config: its exit status and what it printed."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "status", *options, "--config", str(folder / "bindings.yaml"),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await process.communicate()
    assert process.returncode is not None and not err, err.decode()
    return process.returncode, out.decode()


async def bot_status(folder: Path) -> tuple[int, dict[str, Any]]:
    """`bot status --json` on the test's config: its exit status and the report."""
    code, out = await bot_status_text(folder, "--json")
    return code, json.loads(out)


async def test_bot_status_beside_a_running_a_stopped_and_a_killed_bot(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    settings = config_dict(
        tmp_path, fake_llm, telegram(fake_telegram), agents=[{"id": "main", "default": True}],
        owners=[f"telegram:{TG_OWNER}"],
    )  # fmt: skip
    seen: list[tuple[int, dict[str, Any]]] = []

    async def running_and_connected() -> bool:
        seen.append(await bot_status(tmp_path))
        code, report = seen[-1]
        return code == 0 and [(c["channel"], c["account"], c["state"]) for c in report["channels"]] == [
            ("telegram", "main", "connected")
        ]

    bot = await launch_bot(settings, tmp_path, STARTED)
    try:
        await eventually(running_and_connected, "bot status to show telegram/main connected")
        report = seen[-1][1]
        assert report["running"] is True and report["pid"] == bot.pid and report["health"] == "healthy"
        bot.send_signal(signal.SIGTERM)
        assert await bot.wait() == 0
        assert not (tmp_path / "state" / STATUS_FILE).exists()
        code, stopped = await bot_status(tmp_path)
        assert (code, stopped["running"]) == (2, False) and "no status.json" in stopped["reason"]

        bot = await launch_bot(settings, tmp_path, STARTED)
        await eventually(running_and_connected, "the second bot's status")
        bot.send_signal(signal.SIGKILL)
        await bot.wait()
        assert (tmp_path / "state" / STATUS_FILE).exists()  # left behind, its process gone
        code, killed = await bot_status(tmp_path)
        assert (code, killed) == (2, {"running": False, "reason": f"process {bot.pid} is gone"})
    finally:
        if bot.returncode is None:
            bot.kill()
            await bot.wait()


async def test_bot_status_says_when_the_config_on_disk_is_invalid_and_the_last_good_one_runs(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    settings = config_dict(
        tmp_path, fake_llm, telegram(fake_telegram), agents=[{"id": "main", "default": True}],
        owners=[f"telegram:{TG_OWNER}"],
    )  # fmt: skip
    seen: list[tuple[int, str]] = []

    async def status_is(code: int, *words: str) -> bool:
        seen.append(await bot_status_text(tmp_path))
        return seen[-1][0] == code and all(word in seen[-1][1] for word in words)

    bot = await launch_bot(settings, tmp_path, STARTED)
    try:
        await eventually(lambda: status_is(0, "healthy", "telegram/main  connected"), "a healthy bot")
        assert "config on disk" not in seen[-1][1]
        started = time.time()
        broken = {**settings, "bindings": [{"agent": "ghost", "match": {"channel": "telegram"}}]}
        path = tmp_path / "bindings.yaml"
        path.write_text(json.dumps(broken, indent=2), encoding="utf-8")
        line = json.dumps(broken, indent=2).splitlines().index('      "agent": "ghost",') + 1
        await eventually(lambda: status_is(1, "config on disk is invalid"), "bot status to see the refused file")
        out = seen[-1][1]
        first, refused, *_ = out.splitlines()
        assert first.startswith(f"running  pid {bot.pid}") and first.endswith("unhealthy")
        assert f"({path}:{line}: bindings[0].agent: no agent 'ghost'" in refused
        assert "; running the last good config from " in refused  # loaded when the bot started
        _, report = await bot_status(tmp_path)
        assert report["config"]["error_count"] == 1 and report["config"]["loaded_at"] <= started
        assert report["config"]["refused_at"] >= started

        path.write_text(json.dumps(settings, indent=2), encoding="utf-8")  # fixed: taken again, healthy again
        await eventually(lambda: status_is(0, "healthy"), "bot status to see the file taken again")
        assert "config on disk" not in seen[-1][1]
        _, report = await bot_status(tmp_path)
        assert report["config"]["refused_at"] is None and report["config"]["loaded_at"] >= started
    finally:
        bot.send_signal(signal.SIGTERM)
        assert await bot.wait() == 0
