"""`bot owners add|list`: who owns the bot, written into the config file with its comments and layout kept."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from bot.cli.common import CONFIG_OPTION

__all__ = ["owners"]


@click.group()
def owners() -> None:
    """Who owns the bot: owners may approve commands and use owner-only tools (send /whoami to see your id)."""


@owners.command("add")
@CONFIG_OPTION
@click.argument("owner", metavar="CHANNEL:ID")
def owners_add(config_path: str, owner: str) -> None:
    """Add CHANNEL:ID (e.g. telegram:4242, as /whoami shows it) to `owners:` in the bindings file, changing no other
    line. When the file cannot be edited safely it is left alone, and the line to add is printed (exit 1)."""
    from bot.config.owners_file import add_owner, parse_owner

    try:
        wanted = parse_owner(owner)
    except ValueError as error:
        raise click.UsageError(str(error)) from None
    path = Path(config_path)
    if not path.is_file():
        click.echo(f"{config_path}: file not found", err=True)
        sys.exit(1)
    edit = add_owner(path, wanted)
    if edit.status == "already":
        click.echo(f"{edit.owner} is already an owner ({config_path}).")
        return
    if edit.status == "refused":
        click.echo(f"Nothing changed: {edit.reason}.", err=True)
        where = "to" if edit.lines.startswith("owners:") else "under `owners:` in"
        lead = f"To make {edit.owner} an owner, add this {where} {config_path} yourself:"
        click.echo(f"{lead}\n\n{edit.lines}\n", err=True)
        sys.exit(1)
    for warning in edit.warnings:
        click.echo(f"warning (there before the edit too): {warning}", err=True)
    click.echo(f"Added {edit.owner} to owners in {config_path}. A running bot applies it from its next message.")


@owners.command("list")
@CONFIG_OPTION
def owners_list(config_path: str) -> None:
    """Show the owners, one `channel:id` a line."""
    from bot.cli.common import load_or_exit

    config = load_or_exit(config_path)
    if not config.owners:
        click.echo(
            "No owners: nobody may approve commands or use owner-only tools. Send /whoami to the bot for your id, "
            "then: bot owners add <channel>:<id>"
        )
        return
    for owner in config.owners:
        click.echo(owner)
