"""`bot status`: whether the bot runs and how its channels are doing, read from the status file a running gateway
keeps in its state directory — or, with `state: {backend: postgres}`, from the database's `processes` table, where
every process sharing the database reports (what it holds too). Exit 0 healthy, 1 a channel degraded or stalled or
the config file on disk invalid (the last good config running), 2 not running (in a cluster: no process alive)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

import click

from bot.cli.common import CONFIG_OPTION, database_url, state_dir_for

if TYPE_CHECKING:
    from bot.gateway.status import StatusReport
    from bot.store.postgres.processes import ProcessRecord
    from channels.health import HealthSnapshot

__all__ = ["status"]

HEALTHY, UNHEALTHY, NOT_RUNNING = 0, 1, 2
GONE_SHOWN_FOR = 3600.0  # seconds a process that stopped reporting is still listed (as gone)

clock: Callable[[], float] = time.time  # the cluster view's "now" (a test sets its own)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        return True
    return True


def _ago(seconds: float) -> str:
    seconds = max(0.0, seconds)
    for size, unit in ((86400, "d"), (3600, "h"), (60, "m")):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def _channel_line(channel: HealthSnapshot, now: float) -> str:
    from bot.cli.sessions import escaped
    from channels.health import UNHEALTHY as DOWN

    parts = [f"{channel.channel}/{channel.account}", channel.state]
    if channel.state != "connected":
        parts.append(f"since {_ago(now - channel.since)} ago")
    inbound = "never" if channel.last_inbound is None else f"{_ago(now - channel.last_inbound)} ago"
    parts += [f"last inbound {inbound}", f"reconnects {channel.reconnects}"]
    if channel.state in DOWN and channel.last_error:
        parts.append(f"last error: {channel.last_error}")
    return escaped("  ".join(parts))


def refused_config(report: StatusReport, now: float) -> str | None:
    """The line saying the config file on disk is invalid and the last good config runs (None when it is not so)."""
    from datetime import datetime

    from bot.cli.sessions import escaped

    state = report.config
    if state is None or state.refused_at is None:
        return None
    more = state.error_count - 1
    first = (state.errors or ["(no error text)"])[0] + (f"; and {more} more" if more > 0 else "")
    loaded = datetime.fromtimestamp(state.loaded_at).strftime("%Y-%m-%d %H:%M:%S")
    return escaped(
        f"config on disk is invalid ({first}); running the last good config from {loaded} "
        f"({_ago(now - state.loaded_at)} ago). `bot config check` shows every error; the bot takes the file again "
        "once it is valid"
    )


def _summary(report: StatusReport, now: float) -> list[str]:
    lines = [f"running  pid {report.pid}  up {_ago(now - report.started_at)}  {report.health}"]
    lines += [refused] if (refused := refused_config(report, now)) is not None else []
    lines += [_channel_line(channel, now) for channel in report.channels]
    queued = sum(queue.depth for queue in report.queues)
    outbox = report.outbox
    oldest = f" (oldest {_ago(outbox.oldest_age)})" if outbox.oldest_age is not None else ""
    lines.append(
        f"turns running {report.running_turns}  queued {queued} in {len(report.queues)} session(s)"
        f"  approvals pending {report.pending_approvals}  outbox unsent {outbox.unsent}{oldest}"
    )
    usage = report.usage_today
    lines.append(
        f"today: {usage.runs} run(s), {usage.input_tokens:,} tokens in, {usage.output_tokens:,} out, "
        f"cache {usage.cache_read_tokens:,} read, {usage.cache_write_tokens:,} written"
    )
    return lines


@click.option(
    "--state-dir",
    "--state",
    "state_dir",
    default=None,
    type=click.Path(file_okay=False),
    help="The running bot's state directory (default: ./state beside the config).",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="The status file's report as one JSON object (a PostgreSQL state: a list, one object per process).",
)
def _status(config_path: str, state_dir: str | None, as_json: bool) -> None:
    """Whether the bot runs, how each channel account is doing, and whether the config file on disk was refused
    (the last good config running) (exit 0 healthy, 1 a channel degraded or stalled or the config on disk invalid,
    2 not running). With a PostgreSQL state: every process sharing the database, alive or gone, and what
    each holds (exit 2 when none is alive, or the database cannot be reached)."""
    from bot.gateway.status import STATUS_FILE, read_report, stale_after

    url = database_url(config_path)
    if url is not None:
        _cluster_status(url, as_json)
    folder = state_dir_for(config_path, state_dir)
    report = read_report(folder)
    now = time.time()
    reason = None
    if report is None:
        reason = f"no {STATUS_FILE} in {folder}"
    elif not _alive(report.pid):
        reason = f"process {report.pid} is gone"
    elif now - report.written_at > stale_after(report):
        reason = f"{STATUS_FILE} not updated for {_ago(now - report.written_at)}"
    if report is None or reason is not None:
        click.echo(json.dumps({"running": False, "reason": reason}) if as_json else f"not running ({reason})")
        sys.exit(NOT_RUNNING)
    if as_json:
        click.echo(json.dumps({"running": True, **report.model_dump(mode="json")}, indent=2))
    else:
        click.echo("\n".join(_summary(report, now)))
    sys.exit(HEALTHY if report.health == "healthy" else UNHEALTHY)


# --- several processes on one PostgreSQL database ------------------------------------------------------------------


def _process_view(record: ProcessRecord, now: float) -> dict[str, Any]:
    """One process as `--json` shows it: its last status, where it runs, and whether it is alive (it rewrote its row
    within 3 of its write intervals)."""
    from bot.gateway.status import STALE_WRITES, STATUS_INTERVAL

    interval = record.status.get("interval")
    interval = float(interval) if isinstance(interval, int | float) and interval > 0 else STATUS_INTERVAL
    return {
        **record.status,
        "id": record.id,
        "host": record.host,
        "pid": record.pid,
        "started": record.started,
        "seen": record.seen,
        "alive": now - record.seen <= STALE_WRITES * interval,
    }


def _process_health(view: dict[str, Any]) -> StatusReport | None:
    from pydantic import ValidationError

    from bot.gateway.status import StatusReport

    try:
        return StatusReport.model_validate(view)
    except ValidationError:
        return None


def _process_lines(view: dict[str, Any], now: float) -> list[str]:
    from bot.cli.sessions import escaped

    head = f"{view['id']}  host {view['host']}  pid {view['pid']}"
    if not view["alive"]:
        return [escaped(f"{head}  gone  last seen {_ago(now - view['seen'])} ago")]
    report = _process_health(view)
    if report is None:
        return [escaped(f"{head}  alive  up {_ago(now - view['started'])}  (its status cannot be read)")]
    lines = [escaped(f"{head}  alive  up {_ago(now - view['started'])}  {report.health}")]
    lines += [f"  {refused}"] if (refused := refused_config(report, now)) is not None else []
    lines += [f"  {_channel_line(channel, now)}" for channel in report.channels]
    holds = view.get("holds")
    holds = holds if isinstance(holds, dict) else {}
    sessions, listeners = holds.get("sessions") or [], holds.get("ingress") or []
    queued = sum(queue.depth for queue in report.queues)
    lines.append(
        escaped(
            f"  turns running {report.running_turns}  queued {queued}  sessions held {len(sessions)}"
            f"  listeners {', '.join(map(str, listeners)) if listeners else 'none'}"
        )
    )
    return lines


def _cluster_status(url: str, as_json: bool) -> NoReturn:
    """Every process reporting to the database at `url` (those gone within the last hour too), and the exit status:
    2 when none is alive, 1 when an alive one is unhealthy (a channel degraded or stalled, its config file refused)
    or has a status that cannot be read, else 0."""
    from bot.store.base import StoreError
    from bot.store.postgres.processes import read_processes

    now = clock()
    try:
        records = asyncio.run(read_processes(url, seen_since=now - GONE_SHOWN_FOR))
    except StoreError as error:
        click.echo(f"bot status: {error}", err=True)
        sys.exit(NOT_RUNNING)
    views = sorted((_process_view(record, now) for record in records), key=lambda view: not view["alive"])
    alive = [view for view in views if view["alive"]]
    reports = [_process_health(view) for view in alive]
    if not alive:
        code = NOT_RUNNING
    elif any(report is None or report.health != "healthy" for report in reports):
        code = UNHEALTHY
    else:
        code = HEALTHY
    if as_json:
        click.echo(json.dumps(views, indent=2))
    else:
        gone = len(views) - len(alive)
        head = f"{len(alive)} process(es) alive" + (f", {gone} gone in the last hour" if gone else "")
        lines = [head if alive else f"not running (no process alive; {gone} gone in the last hour)"]
        for view in views:
            lines += _process_lines(view, now)
        click.echo("\n".join(lines))
    sys.exit(code)


# Annotated, and CONFIG_OPTION applied here: `bot.cli.main` imports this module while it is still loading.
status: click.Command = click.command("status")(CONFIG_OPTION(_status))
