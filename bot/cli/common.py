"""What the `bot` subcommands share: the `--config` and `--state-dir` options, the state folder beside the config,
and loading the config or exiting with its errors. Only click at import, so `bot --help` stays fast."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import click

if TYPE_CHECKING:
    from bot.config.errors import ConfigIssue
    from bot.config.settings import Config
    from bot.store import SqliteStore
    from bot.store.postgres import PostgresStore

__all__ = [
    "CONFIG_OPTION",
    "STATE_OPTION",
    "ConfigVerdict",
    "checked_config",
    "cli_state",
    "database_url",
    "load_checked",
    "load_or_exit",
    "state_dir_for",
]

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


def load_checked(config_path: str, state_dir: Path | None = None) -> Config:
    """The config as every command loads it: `.env` beside it first (the process environment wins), then the file;
    with the state directory the bot will use, a workspace that holds it or the config file is an error too (the
    agent could rewrite its own rules). ConfigError with every error."""
    from bot.config.checks import workspace_conflicts
    from bot.config.env import load_env_file
    from bot.config.errors import ConfigError
    from bot.config.loading import load_config

    load_env_file(config_path)
    config = load_config(config_path)
    if state_dir is not None and (conflicts := workspace_conflicts(config, state_dir)):
        raise ConfigError(config_path, conflicts)
    return config


class ConfigVerdict(NamedTuple):
    """What `bot config check` says of a config file: the config (None when an error is fatal), every error (fatal
    or not: an account whose token is unset, a provider without its key) and every warning, each with its line."""

    config: Config | None
    errors: list[ConfigIssue]
    warnings: list[ConfigIssue]

    def summary(self, config_path: str) -> str:
        """The verdict's last line: `<file>: N errors`, or `<file>: valid (A agents, B bindings)`."""
        if self.errors or self.config is None:
            count = len(self.errors)
            return f"{config_path}: {count} error{'s' if count != 1 else ''}"
        return f"{config_path}: valid ({len(self.config.agents)} agents, {len(self.config.bindings)} bindings)"


def checked_config(config_path: str, state_dir: Path) -> ConfigVerdict:
    """The one verdict `bot config check` prints and `bot doctor` starts from: the validation `bot run`, `bot chat`
    and a reload share (`.env` beside the file included), plus the warnings about sandboxes that cannot run here."""
    from bot.config.checks import sandbox_warnings
    from bot.config.loading import validate_config

    config, errors, warnings = validate_config(config_path, state_dir=state_dir)
    return ConfigVerdict(config, errors, warnings + (sandbox_warnings(config) if config is not None else []))


def load_or_exit(config_path: str, state_dir: Path | None = None) -> Config:
    """`load_checked`, or every error printed and exit 1."""
    from bot.config.errors import ConfigError

    try:
        config = load_checked(config_path, state_dir)
    except ConfigError as error:
        click.echo(str(error), err=True)
        count = len(error.issues)
        click.echo(f"{config_path}: {count} error{'s' if count != 1 else ''}", err=True)
        sys.exit(1)
    return config


def database_url(config_path: str) -> str | None:
    """The PostgreSQL URL when the config keeps the state there; None for SQLite (or no readable config: the state
    folder is all there is then, as for `--state-dir` alone). Only a config that asks for PostgreSQL is loaded (the
    URL is usually ${DATABASE_URL}, perhaps from the .env beside it), and it must load, or its errors are printed
    and the command exits 1."""
    import yaml

    try:
        raw = yaml.safe_load(Path(config_path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    state = raw.get("state") if isinstance(raw, dict) else None
    if not isinstance(state, dict) or state.get("backend", "sqlite") == "sqlite":
        return None
    config = load_or_exit(config_path)
    return config.state.url if config.state.backend == "postgres" else None


@contextlib.asynccontextmanager
async def cli_state(config_path: str, state_dir: str | None) -> AsyncIterator[SqliteStore | PostgresStore]:
    """The state a command works on, as the running bot keeps it: the PostgreSQL database the config names, else
    state.db in the state folder. Closed when the block ends."""
    url = database_url(config_path)
    store: SqliteStore | PostgresStore
    if url is not None:
        from bot.store.postgres import PostgresStore

        store = await PostgresStore.open(url)
    else:
        from bot.store import SqliteStore

        store = await SqliteStore.open(state_dir_for(config_path, state_dir))
    async with store:
        yield store
