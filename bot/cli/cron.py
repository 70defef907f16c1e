"""`bot cron list|add|rm|run|runs`: scheduled jobs from the command line, beside a running bot (its scheduler reads
the state DB about once a second)."""

from __future__ import annotations

import json
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from bot.cli.common import CONFIG_OPTION, STATE_OPTION, cli_state, load_or_exit

if TYPE_CHECKING:
    from bot.scheduled.cron_book import CronBook

_T = TypeVar("_T")


def _with_book(config_path: str, state_dir: str | None, use: Callable[[CronBook], Awaitable[_T]]) -> _T:
    import asyncio
    import time

    from bot.scheduled.cron_book import CronBook

    config = load_or_exit(config_path)

    async def go() -> _T:
        async with cli_state(config_path, state_dir) as store:
            return await use(CronBook(store, config, time.time))

    try:
        return asyncio.run(go())
    except (ValueError, LookupError) as error:
        click.echo(f"bot cron: {error}", err=True)
        sys.exit(1)


def _when(timestamp: float | None) -> str:
    from datetime import datetime

    return "-" if timestamp is None else f"{datetime.fromtimestamp(timestamp):%Y-%m-%d %H:%M:%S}"


@click.group()
def cron() -> None:
    """Scheduled jobs: list, add, remove, run now, and what their runs did."""


@cron.command("list")
@CONFIG_OPTION
@STATE_OPTION
@click.option("--json", "as_json", is_flag=True, help="One JSON array of the flat job objects.")
def cron_list(config_path: str, state_dir: str | None, as_json: bool) -> None:
    """Show every job: the config's and those made by the `cron` tool or `bot cron add`."""
    jobs = _with_book(config_path, state_dir, lambda book: book.list())
    if as_json:
        click.echo(json.dumps(jobs, indent=2))
        return
    if not jobs:
        click.echo("No scheduled jobs.")
    for job in jobs:
        when = next(f"{key} {job[key]}" for key in ("cron", "every", "at") if job.get(key))
        state = "" if job["enabled"] else "  (disabled)"
        click.echo(f"{job['id']}  {job['origin']:<6} {when}  -> {job.get('deliver') or '-'}  {job['message']!r}{state}")


@cron.command("add")
@CONFIG_OPTION
@STATE_OPTION
@click.option("--id", "job_id", default=None, help="The job's id (made when absent).")
@click.option("--name", default=None)
@click.option("--agent", default=None, help="The agent that answers (default: the default agent).")
@click.option("--cron", "cron_expr", default=None, help='Five fields, e.g. "0 9 * * 1-5".')
@click.option("--every", default=None, help="30m, 2h, 1d (at least a minute).")
@click.option("--at", default=None, help="One moment, ISO 8601 (without offset: in --tz).")
@click.option("--tz", default=None, help="IANA time zone of --cron and of --at without offset.")
@click.option("--message", "-m", required=True, help="What the agent is asked.")
@click.option("--session", type=click.Choice(["isolated", "main"]), default=None)
@click.option("--deliver", required=True, help="Where the answer goes: <channel>[/<account>]:<kind>:<id>.")
@click.option("--disabled", is_flag=True, help="Add it switched off.")
@click.option("--json", "as_json", is_flag=True)
def cron_add(config_path: str, state_dir: str | None, job_id: str | None, cron_expr: str | None, disabled: bool,
             as_json: bool, **fields: Any) -> None:  # fmt: skip
    """Add a job to the state DB (a running bot picks it up within a second)."""
    from bot.runs.principal import SHELL

    given = {key: value for key, value in {**fields, "id": job_id, "cron": cron_expr}.items() if value is not None}
    if disabled:
        given["enabled"] = False
    job = _with_book(config_path, state_dir, lambda book: book.add_job(given, SHELL))
    click.echo(json.dumps(job, indent=2) if as_json else f"Added job {job['id']}.")


@cron.command("rm")
@CONFIG_OPTION
@STATE_OPTION
@click.argument("job_id")
def cron_rm(config_path: str, state_dir: str | None, job_id: str) -> None:
    """Remove a job made by the tool or `bot cron add` (the config's are removed from the file)."""
    _with_book(config_path, state_dir, lambda book: book.remove(job_id))
    click.echo(f"Removed job {job_id}.")


@cron.command("run")
@CONFIG_OPTION
@STATE_OPTION
@click.argument("job_id")
def cron_run(config_path: str, state_dir: str | None, job_id: str) -> None:
    """Run a job now (the running bot starts it within a second, unless a run of it is still going)."""
    run = _with_book(config_path, state_dir, lambda book: book.run_now(job_id))
    click.echo(f"Asked for run {run['run']} of job {job_id}.")


@cron.command("runs")
@CONFIG_OPTION
@STATE_OPTION
@click.argument("job_id", required=False)
@click.option("--limit", default=20, show_default=True)
@click.option("--json", "as_json", is_flag=True)
def cron_runs(config_path: str, state_dir: str | None, job_id: str | None, limit: int, as_json: bool) -> None:
    """Show the latest runs (of one job): when each was due, started and ended, its status, the messages it sent."""

    async def runs(book: CronBook) -> list[dict[str, Any]]:
        return [run.model_dump(mode="json") for run in await book.store.job_runs(job_id, limit)]

    found = _with_book(config_path, state_dir, runs)
    if as_json:
        click.echo(json.dumps(found, indent=2))
        return
    if not found:
        click.echo("No runs yet.")
    for run in found:
        ids = ",".join(run["message_ids"]) or "-"
        detail = f"  {run['detail']}" if run["detail"] else ""
        click.echo(
            f"{run['id']}  {run['job_id']}  due {_when(run['tick'])}  started {_when(run['started'])}"
            f"  ended {_when(run['ended'])}  {run['status']}  messages {ids}{detail}"
        )
