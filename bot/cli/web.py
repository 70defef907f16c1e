"""`bot web url`: the login link of the Control UI and WebChat that `bot run` serves."""

from __future__ import annotations

import sys

import click

from bot.cli.common import CONFIG_OPTION, STATE_OPTION

__all__ = ["web"]


@click.group()
def web() -> None:
    """The web pages `bot run` serves (the Control UI and WebChat, `web:` in the bindings file)."""


@web.command("url")
@CONFIG_OPTION
@STATE_OPTION
@click.option("--login", "name", default=None, help="The `web.tokens` entry to log in as (default: the first).")
def web_url(config_path: str, state_dir: str | None, name: str | None) -> None:
    """Print the login link, `http://127.0.0.1:8765/#token=…`: whoever opens it is logged in (as the operator, an
    owner, when `web.tokens` names nobody). Keep it as secret as the bot's token."""
    from bot.cli.common import load_or_exit, state_dir_for
    from bot.config.web import host_port, web_url
    from bot.gateway.web.auth import Logins

    state = state_dir_for(config_path, state_dir)
    config = load_or_exit(config_path)
    settings = config.web
    if settings.listen is None:
        click.echo(f"web.listen is off in {config_path}: `bot run` serves no web pages.", err=True)
        sys.exit(1)
    host, port = host_port(settings.listen)
    if host in ("0.0.0.0", "::"):  # listening everywhere: this machine reaches it on loopback
        host = "127.0.0.1"
    try:
        link = Logins(settings, state).link(web_url(host, port), name)
    except KeyError:
        names = ", ".join(login.name for login in settings.tokens)
        click.echo(f"no login {name!r} in web.tokens (there are: {names})", err=True)
        sys.exit(1)
    click.echo(link)
