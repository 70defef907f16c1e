"""The `bot` command line: run, route and config check. Heavy imports wait until a command needs them."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from bot.config import Config

CONFIG_OPTION = click.option(
    "--config",
    "config_path",
    default="bindings.yaml",
    show_default=True,
    type=click.Path(dir_okay=False),
    help="The bindings file.",
)


def _load(config_path: str) -> Config:
    """Load the config or print every error and exit 1."""
    from bot.config import load_config
    from bot.config_errors import ConfigError

    try:
        return load_config(config_path)
    except ConfigError as error:
        click.echo(str(error), err=True)
        count = len(error.issues)
        click.echo(f"{config_path}: {count} error{'s' if count != 1 else ''}", err=True)
        sys.exit(1)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="switchboard", prog_name="bot")
def cli() -> None:
    """Switchboard: AI agents that live in Telegram, Discord and Slack."""


@cli.command()
@CONFIG_OPTION
def run(config_path: str) -> None:
    """Run the bot on the channels configured in the bindings file."""
    config = _load(config_path)
    agents = ", ".join(agent.id for agent in config.agents)
    click.echo(f"{config_path}: valid ({len(config.agents)} agents: {agents}; {len(config.bindings)} bindings)")
    click.echo("No channel adapter is implemented yet, so there is nothing to run; `bot route` shows the routing.")


@cli.command()
@CONFIG_OPTION
@click.option("--channel", required=True, help="telegram, discord, slack, ...")
@click.option("--account", default=None, help="Channel account id (default: 'default').")
@click.option("--peer", default=None, metavar="KIND:ID", help="direct|group|channel (or dm) and its id.")
@click.option("--parent-peer", default=None, metavar="KIND:ID", help="The parent of a thread or topic.")
@click.option("--guild", default=None, help="Discord guild id.")
@click.option("--team", default=None, help="Slack team id.")
@click.option("--roles", default=None, metavar="R1,R2", help="Member role ids, comma separated.")
@click.option("--thread", default=None, metavar="ID", help="Thread id (appends :thread:<id> to the session).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def route(
    config_path: str,
    channel: str,
    account: str | None,
    peer: str | None,
    parent_peer: str | None,
    guild: str | None,
    team: str | None,
    roles: str | None,
    thread: str | None,
    as_json: bool,
) -> None:
    """Show which agent and session a message with these properties goes to, and why."""
    from routing import Peer, RoutingInput

    config = _load(config_path)
    try:
        source = RoutingInput(
            channel=channel,
            account=account or "",
            peer=Peer.parse(peer) if peer else None,
            parent_peer=Peer.parse(parent_peer) if parent_peer else None,
            guild=guild,
            team=team,
            member_roles=tuple((roles or "").split(",")),
            thread=thread,
        )
    except ValueError as error:
        raise click.UsageError(str(error)) from None
    result = config.router().resolve(source)
    if as_json:
        click.echo(
            json.dumps({"agent": result.agent, "session_key": result.session_key, "matched_by": result.matched_by})
        )
    else:
        click.echo(f"agent:       {result.agent}")
        click.echo(f"session_key: {result.session_key}")
        click.echo(f"matched_by:  {result.matched_by}")


@cli.group()
def config() -> None:
    """Inspect the bindings file."""


@config.command("check")
@CONFIG_OPTION
def config_check(config_path: str) -> None:
    """Exit 0 if the bindings file is valid; otherwise print every error and exit 1."""
    loaded = _load(config_path)
    click.echo(f"{config_path}: valid ({len(loaded.agents)} agents, {len(loaded.bindings)} bindings)")


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="bot")
