"""`bot status` for several processes on one PostgreSQL database: each process publishes its status and what it holds
in the `processes` table (bot/store/postgres/processes.py, through the StatusWriter), and `bot status` lists every
process of the database, alive or gone, with exit 0 / 1 / 2 as for one process."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from click.testing import CliRunner, Result
from configs import config_dict, telegram
from fakes.llm import FakeLLM
from fakes.telegram import FakeTelegram
from helpers import FakeClock, eventually, launch_bot

from bot import App, parse_config
from bot.cli import status as status_cli
from bot.cli.main import cli
from bot.gateway.status import STATUS_FILE, STATUS_INTERVAL, StatusReport, StatusWriter, UsageToday, overall
from bot.store.postgres import PostgresStore
from bot.store.postgres.processes import (
    ProcessRecord,
    list_processes,
    prune_processes,
    publish_process,
    remove_process,
)
from channels import MemoryChannel
from channels.health import HealthSnapshot

if TYPE_CHECKING:
    pass

NOW = datetime(2026, 11, 27, 10, 0, 30, tzinfo=UTC).timestamp()  # mid-minute: the ages printed are whole


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    """The writers' clock, and `bot status`'s "now"."""
    fake = FakeClock(NOW)
    monkeypatch.setattr(status_cli, "clock", fake)
    return fake


def status_of(*, stalled: bool = False, running: int = 0, holds: dict[str, list[str]] | None = None) -> dict[str, Any]:
    """A process's status as the StatusWriter publishes it: the report, and what the process holds."""
    channels = [
        HealthSnapshot(channel="telegram", account="main", state="connected", since=NOW - 600, last_inbound=NOW - 150),
        HealthSnapshot(channel="slack", account="work", state="stalled" if stalled else "connected", since=NOW - 400,
                       reconnects=2, last_error="no events for 90s" if stalled else None),
    ]  # fmt: skip
    report = StatusReport(
        pid=4242, started_at=NOW - 5400, written_at=NOW, health=overall(channels), channels=channels,
        running_turns=running, usage_today=UsageToday(since=NOW - 36000),
    )  # fmt: skip
    return {**report.model_dump(mode="json"), "holds": holds or {}}


def publish(url: str, clock: FakeClock, *rows: tuple[str, float, dict[str, Any]]) -> None:
    """Each row (member id, when it was seen, status) as its process would publish it then."""

    async def run() -> None:
        async with await PostgresStore.open(url, clock=clock) as store:
            for member, seen, status in rows:
                clock.now = seen
                host, pid = member.split(":")[:2]
                await publish_process(store.db, member, host, int(pid), seen - 3600, status)

    now = clock.now
    asyncio.run(run())
    clock.now = now


def bindings(folder: Path, url: str, **extra: Any) -> Path:
    path = folder / "bindings.yaml"
    path.write_text(json.dumps({"state": {"backend": "postgres", "url": url}, **extra}))
    return path


def bot_status(config: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["status", "--config", str(config), *args])


HOLDS = {"sessions": ["agent:main:telegram:direct:42", "agent:main:slack:channel:c1"], "ingress": ["telegram:ab12"]}


def test_bot_status_lists_every_process_alive_or_gone_and_exits_by_the_alive_ones(
    tmp_path: Path, postgres_url: str, clock: FakeClock
) -> None:
    publish(
        postgres_url,
        clock,
        ("alpha:101:a1", NOW - 1, status_of(running=1, holds=HOLDS)),
        ("beta:202:b2", NOW - 20 * 60, status_of(stalled=True)),  # killed 20 minutes ago: gone, its health moot
        ("gamma:303:c3", NOW - 2 * 3600, status_of()),  # gone for more than an hour: not shown
    )
    config = bindings(tmp_path, postgres_url)

    result = bot_status(config)
    assert (result.exit_code, result.stderr) == (0, "")
    assert result.stdout.splitlines() == [
        "1 process(es) alive, 1 gone in the last hour",
        "alpha:101:a1  host alpha  pid 101  alive  up 1h  healthy",
        "  telegram/main  connected  last inbound 2m ago  reconnects 0",
        "  slack/work  connected  last inbound never  reconnects 2",
        "  turns running 1  queued 0  sessions held 2  listeners telegram:ab12",
        "beta:202:b2  host beta  pid 202  gone  last seen 20m ago",
    ]
    result = bot_status(config, "--json")
    assert result.exit_code == 0
    alive, gone = json.loads(result.stdout)
    assert (alive["id"], alive["host"], alive["pid"], alive["alive"], alive["seen"]) == ("alpha:101:a1", "alpha", 101,
                                                                                          True, NOW - 1)  # fmt: skip
    assert alive["holds"] == HOLDS and alive["running_turns"] == 1 and alive["health"] == "healthy"
    assert [channel["state"] for channel in alive["channels"]] == ["connected", "connected"]
    assert (gone["id"], gone["alive"], gone["seen"]) == ("beta:202:b2", False, NOW - 20 * 60)

    # The alive process's slack account stalls: exit 1.
    publish(postgres_url, clock, ("alpha:101:a1", NOW, status_of(stalled=True, holds=HOLDS)))
    result = bot_status(config)
    assert result.exit_code == 1
    assert result.stdout.splitlines()[1:4] == [
        "alpha:101:a1  host alpha  pid 101  alive  up 1h  unhealthy",
        "  telegram/main  connected  last inbound 2m ago  reconnects 0",
        "  slack/work  stalled  since 6m ago  last inbound never  reconnects 2  last error: no events for 90s",
    ]
    assert bot_status(config, "--json").exit_code == 1

    # Alive while rewritten within 3 write intervals; then no process is: exit 2.
    clock.advance(3 * STATUS_INTERVAL)
    assert bot_status(config).exit_code == 1
    clock.advance(1)
    result = bot_status(config)
    assert result.exit_code == 2
    assert result.stdout.splitlines() == [
        "not running (no process alive; 2 gone in the last hour)",
        "alpha:101:a1  host alpha  pid 101  gone  last seen 7s ago",
        "beta:202:b2  host beta  pid 202  gone  last seen 20m ago",
    ]
    result = bot_status(config, "--json")
    assert result.exit_code == 2 and [view["alive"] for view in json.loads(result.stdout)] == [False, False]


def test_bot_status_on_a_database_without_processes_says_not_running(
    tmp_path: Path, postgres_url: str, clock: FakeClock
) -> None:
    config = bindings(tmp_path, postgres_url)
    result = bot_status(config, "--json")  # not even migrated yet: no processes table
    assert (result.exit_code, json.loads(result.stdout), result.stderr) == (2, [], "")
    publish(postgres_url, clock)  # no rows; the database is migrated
    result = bot_status(config)
    assert (result.exit_code, result.stdout) == (2, "not running (no process alive; 0 gone in the last hour)\n")


def closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize("form", ["url", "key=value"])
def test_bot_status_names_an_unreachable_database_in_one_line_without_its_password(
    tmp_path: Path, clock: FakeClock, form: str
) -> None:
    port = closed_port()
    url = (
        f"postgresql://ann:s3cr%40t-pw@127.0.0.1:{port}/bots"
        if form == "url"
        else f"host=127.0.0.1 port={port} dbname=bots user=ann password=s3cr@t-pw"
    )
    result = bot_status(bindings(tmp_path, url), "--json")
    assert (result.exit_code, result.stdout) == (2, "")
    [line] = result.stderr.splitlines()
    assert line.startswith(f"bot status: cannot connect to PostgreSQL at 127.0.0.1:{port}/bots: ")
    assert "s3cr" not in line and "t-pw" not in line


def test_a_postgres_config_with_errors_is_reported_like_any_command(tmp_path: Path) -> None:
    config = tmp_path / "bindings.yaml"
    config.write_text("state:\n  backend: postgres\n  url: ${NO_SUCH_DATABASE_URL_FOR_THIS_TEST}\n")
    result = bot_status(config)
    assert result.exit_code == 1 and "NO_SUCH_DATABASE_URL_FOR_THIS_TEST" in result.stderr


async def test_the_store_functions_upsert_list_remove_and_prune(postgres_url: str, clock: FakeClock) -> None:
    async with await PostgresStore.open(postgres_url, clock=clock) as store:
        db = store.db
        await publish_process(db, "a", "h1", 1, NOW - 100, {"n": 1})
        clock.advance(10)
        await publish_process(db, "b", "h2", 2, NOW - 50, {"n": 2})
        await publish_process(db, "a", "h1", 1, NOW - 100, {"n": 3})  # rewritten: seen now
        assert await list_processes(db) == [
            ProcessRecord(id="b", host="h2", pid=2, started=NOW - 50, seen=NOW + 10, status={"n": 2}),
            ProcessRecord(id="a", host="h1", pid=1, started=NOW - 100, seen=NOW + 10, status={"n": 3}),
        ]  # the newest process first
        await remove_process(db, "b")
        await remove_process(db, "b")  # twice is fine
        assert [record.id for record in await list_processes(db)] == ["a"]
        clock.advance(86400)
        assert await prune_processes(db, 86400) == 0
        clock.advance(1)
        assert await prune_processes(db, 86400) == 1
        assert await list_processes(db) == []


# --- the StatusWriter of a gateway in a cluster ---------------------------------------------------------------------


class FakeCluster:
    """`gateway.cluster` as the StatusWriter sees it."""

    def __init__(self, member_id: str, started: float, holds: dict[str, list[str]]) -> None:
        self.member_id, self.started, self.holds = member_id, started, holds
        self.broken = False

    def holdings(self) -> dict[str, list[str]]:
        if self.broken:
            raise RuntimeError("the cluster is confused")
        return self.holds


def gateway_settings(llm: FakeLLM, tmp_path: Path) -> dict[str, Any]:
    return config_dict(tmp_path, llm, defaults={"timezone": "UTC"})


async def test_a_gateway_in_a_cluster_publishes_its_status_and_holdings_and_removes_them_at_a_clean_stop(
    fake_llm: FakeLLM, tmp_path: Path, postgres_url: str, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    settings = gateway_settings(fake_llm, tmp_path)
    chat, second = MemoryChannel(), MemoryChannel("memory", "second")
    app = App(parse_config(json.dumps(settings)), tmp_path / "state", adapters=[chat, second], clock=clock)
    cluster = FakeCluster("here:1:x", NOW - 60, HOLDS)
    local = tmp_path / "local" / STATUS_FILE
    local.parent.mkdir()
    config = bindings(tmp_path, postgres_url, **settings)
    here = f"here:1:x  host {socket.gethostname()}  pid {os.getpid()}"

    async def published() -> ProcessRecord | None:
        return next((record for record in await list_processes(store.db) if record.id == cluster.member_id), None)

    async with await PostgresStore.open(postgres_url, clock=clock) as store, app.running(grace_seconds=0.1) as gateway:
        clock.now = NOW - 2 * 86400
        await publish_process(store.db, "long:1:gone", "long", 1, NOW - 3 * 86400, {})  # killed two days ago
        clock.now = NOW + 5
        # A writer as a member of `cluster` storing in `store` has it, without the cluster's own machinery
        # (tests/e2e/test_cluster_bot_run.py runs the real thing), beside the gateway's own, which keeps
        # state/status.json.
        snapshots = gateway.channels.snapshots
        writer = StatusWriter(local.parent, clock, app.decisions, store, gateway.lanes, snapshots, lambda: cluster)
        await writer.start()
        record = await published()
        assert record is not None
        assert (record.host, record.pid, record.started, record.seen) == (socket.gethostname(), os.getpid(),
                                                                          NOW - 60, NOW + 5)  # fmt: skip
        assert record.status["holds"] == HOLDS and record.status["written_at"] == NOW + 5
        assert [(c["account"], c["state"]) for c in record.status["channels"]] == [("default", "connected"),
                                                                                   ("second", "connected")]  # fmt: skip
        assert [record.id for record in await list_processes(store.db)] == ["here:1:x"]  # gone for days: pruned
        assert local.exists()  # the local view, as before

        result = await asyncio.to_thread(bot_status, config)
        assert (result.exit_code, result.stdout.splitlines()[1]) == (0, f"{here}  alive  up 1m  healthy")
        second.health.set("degraded", "HTTP 502")
        await writer.write()
        result = await asyncio.to_thread(bot_status, config)
        assert (result.exit_code, result.stdout.splitlines()[1]) == (1, f"{here}  alive  up 1m  unhealthy")

        # A publish that fails is logged once per spell, and the file is still written.
        cluster.broken = True
        local.unlink()
        with caplog.at_level(logging.INFO, logger="bot.gateway.status"):
            await writer.write()
            await writer.write()
            assert local.exists()
            cluster.broken = False
            clock.advance(1)
            await writer.write()
        messages = [record.getMessage() for record in caplog.records if record.name == "bot.gateway.status"]
        assert messages == [
            "could not publish this process's status to the database",
            "this process's status is published to the database again",
        ]
        record = await published()
        assert record is not None and record.seen == NOW + 6

        await writer.stop()
        assert await published() is None  # a clean stop removes the row
        assert not local.exists()


# --- `bot status` beside real `bot run` processes on one database ---------------------------------------------------

STARTED = "channel telegram account main started"


async def bot_status_json(config: Path) -> tuple[int, list[dict[str, Any]]]:
    """`bot status --json` as a user runs it: its exit status and the processes it printed."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "status", "--json", "--config", str(config),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await process.communicate()
    assert process.returncode is not None and not err, err.decode()
    return process.returncode, json.loads(out)


async def test_bot_status_shows_two_real_processes_and_what_they_hold_then_one_stopped_and_one_killed(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram, postgres_url: str
) -> None:
    def settings(folder: Path) -> dict[str, Any]:
        return config_dict(
            folder, fake_llm, telegram(fake_telegram), owners=["telegram:4242"],
            state={"backend": "postgres", "url": postgres_url},
        )  # fmt: skip

    folders = [tmp_path / "one", tmp_path / "two"]
    for folder in folders:
        folder.mkdir()
    bots = [await launch_bot(settings(folder), folder, STARTED) for folder in folders]
    config = folders[0] / "bindings.yaml"
    seen: list[tuple[int, list[dict[str, Any]]]] = []

    async def both_alive_one_listening() -> bool:
        seen.append(await bot_status_json(config))
        code, views = seen[-1]
        listeners = [name for view in views for name in view.get("holds", {}).get("ingress", [])]
        return code == 0 and [view["alive"] for view in views] == [True, True] and len(listeners) == 1

    try:
        await eventually(both_alive_one_listening, "bot status to show both processes, one of them polling")
        views = seen[-1][1]
        assert sorted(view["pid"] for view in views) == sorted(bot.pid for bot in bots)
        assert {view["host"] for view in views} == {socket.gethostname()}
        assert all(view["channels"][0]["channel"] == "telegram" and view["health"] == "healthy" for view in views)
        assert [name.split(":")[0] for view in views for name in view["holds"]["ingress"]] == ["telegram"]

        bots[0].send_signal(signal.SIGTERM)
        assert await bots[0].wait() == 0
        code, views = await bot_status_json(config)
        assert code == 0 and [view["pid"] for view in views] == [bots[1].pid]  # a clean stop removes its row

        bots[1].send_signal(signal.SIGKILL)
        await bots[1].wait()

        async def gone() -> bool:
            seen.append(await bot_status_json(config))
            return seen[-1][0] == 2

        await eventually(gone, "the killed process to be shown gone")
        assert [(view["pid"], view["alive"]) for view in seen[-1][1]] == [(bots[1].pid, False)]
    finally:
        for bot in bots:
            if bot.returncode is None:
                bot.kill()
                await bot.wait()
