"""`bot doctor`: the command line of bot/cli/doctor_checks.py, light to import (the checks load when it runs)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from bot.cli.common import CONFIG_OPTION, STATE_OPTION

__all__ = ["doctor"]


@click.command()
@CONFIG_OPTION
@STATE_OPTION
@click.option("--models", is_flag=True, help="Also send each configured model one tiny request.")
def doctor(config_path: str, state_dir: str | None, models: bool) -> None:
    """Give `bot config check`'s verdict (the same errors, `.env` beside the config read), then check what needs the
    network or this machine: each channel account's token against its platform, the state DB and the workspaces.
    One line each (ok, warn, FAIL) with a fix for each failure; exit 1 when any check fails."""
    import asyncio
    import logging

    from bot.cli.doctor_checks import diagnose, render
    from bot.observe.redaction import configure_logging

    configure_logging(logging.ERROR)  # the report says what failed; an SDK's log line would only repeat it
    state = Path(state_dir) if state_dir else Path(config_path).resolve().parent / "state"
    checks, redactor = asyncio.run(diagnose(config_path, state, models=models))
    for line in render(checks, redactor):
        click.echo(line)
    sys.exit(1 if any(check.status == "FAIL" for check in checks) else 0)
