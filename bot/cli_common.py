"""What the `bot` subcommands share: the `--config` and `--state-dir` options, the state folder beside the config,
and loading the config or exiting with its errors. Only click at import, so `bot --help` stays fast."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from bot.config import Config

__all__ = ["CONFIG_OPTION", "STATE_OPTION", "load_or_exit", "state_dir_for"]

_Command = Callable[..., Any]

CONFIG_OPTION: Callable[[_Command], _Command] = click.option(
    "--config",
    "config_path",
    default="bindings.yaml",
    show_default=True,
    type=click.Path(dir_okay=False),
    help="The bindings file.",
)


STATE_OPTION: Callable[[_Command], _Command] = click.option(
    "--state-dir",
    default=None,
    type=click.Path(file_okay=False),
    help="Where sessions and transcripts are kept (default: ./state beside the config).",
)


def state_dir_for(config_path: str, state_dir: str | None) -> Path:
    """`--state-dir`, else `state` beside the config file."""
    return Path(state_dir) if state_dir else Path(config_path).resolve().parent / "state"


def load_or_exit(config_path: str, state_dir: Path | None = None) -> Config:
    """Load the config (`.env` beside it first) or print every error and exit 1; with the state directory the bot
    will use, a workspace that holds it or the config file is an error too (the agent could rewrite its own
    rules)."""
    from bot.config import load_config, workspace_conflicts
    from bot.config_errors import ConfigError
    from bot.env_vars import load_env_file

    try:
        load_env_file(config_path)
        config = load_config(config_path)
        if state_dir is not None and (conflicts := workspace_conflicts(config, state_dir)):
            raise ConfigError(config_path, conflicts)
    except ConfigError as error:
        click.echo(str(error), err=True)
        count = len(error.issues)
        click.echo(f"{config_path}: {count} error{'s' if count != 1 else ''}", err=True)
        sys.exit(1)
    return config
