"""`bot status`: whether the bot runs and how its channels are doing, read from the status file a running gateway
keeps in its state directory. Exit 0 healthy, 1 a channel degraded or stalled, 2 not running."""

from __future__ import annotations

import json
import os
import sys
import time
from typing import TYPE_CHECKING

import click

from bot.cli_common import CONFIG_OPTION, state_dir_for

if TYPE_CHECKING:
    from bot.status import StatusReport

__all__ = ["status"]

HEALTHY, UNHEALTHY, NOT_RUNNING = 0, 1, 2


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


def _summary(report: StatusReport, now: float) -> list[str]:
    from bot.sessions_cli import escaped
    from channels.health import UNHEALTHY as DOWN

    lines = [f"running  pid {report.pid}  up {_ago(now - report.started_at)}  {report.health}"]
    for channel in report.channels:
        parts = [f"{channel.channel}/{channel.account}", channel.state]
        if channel.state != "connected":
            parts.append(f"since {_ago(now - channel.since)} ago")
        inbound = "never" if channel.last_inbound is None else f"{_ago(now - channel.last_inbound)} ago"
        parts += [f"last inbound {inbound}", f"reconnects {channel.reconnects}"]
        if channel.state in DOWN and channel.last_error:
            parts.append(f"last error: {channel.last_error}")
        lines.append(escaped("  ".join(parts)))
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
@click.option("--json", "as_json", is_flag=True, help="The status file's report as one JSON object.")
def _status(config_path: str, state_dir: str | None, as_json: bool) -> None:
    """Whether the bot runs, and how each channel account is doing (exit 0 healthy, 1 a channel degraded or
    stalled, 2 not running)."""
    from bot.status import STATUS_FILE, read_report, stale_after

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


# Annotated, and CONFIG_OPTION applied here: `bot.cli` imports this module while it is still loading.
status: click.Command = click.command("status")(CONFIG_OPTION(_status))
