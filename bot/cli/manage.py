"""`bot config show`, `bot pairing revoke`, `bot approvals rules list|revoke` and `bot service install`."""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from bot.cli.common import CONFIG_OPTION, STATE_OPTION, cli_state, load_or_exit
from bot.config.shown import masked_config

if TYPE_CHECKING:
    from bot.config.settings import Config
    from bot.store.approvals import AllowedRule

__all__ = [
    "approval_rules",
    "approved_lines",
    "config_show",
    "non_owner_tools",
    "pairing_revoke",
    "service",
    "service_unit",
]


@click.command("show")
@CONFIG_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of YAML.")
def config_show(config_path: str, as_json: bool) -> None:
    """Print the effective config: `${VAR}` substituted, defaults filled in, each agent's model, fallbacks and
    workspace as it gets them, `tools.non_owner` merged with its default and the tools a non-owner's run of each agent
    gets (`non_owner_tools`, under `bot run`, in a DM), every secret shown as ***."""
    config = load_or_exit(config_path)
    data = masked_config(config, non_owner_tools(config))
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    import yaml

    click.echo(f"# {config.file or config_path}: effective config, secrets masked", nl=True)
    click.echo("# agents[].non_owner_tools: what a run started by someone not in owners gets (in a DM; no MCP tools)")
    click.echo(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), nl=False)


def non_owner_tools(config: Config) -> dict[str, list[str]]:
    """Each agent's tools in a run started by someone not in `owners` (a DM under `bot run`), through the same
    policy layers as `bot tools --not-owner`. The MCP servers are not started: their tools are not listed."""
    from bot.app import App
    from bot.cli.gateway_tools import gateway_policy

    app = App(config)
    return {
        agent.id: [tool.name for tool in gateway_policy(app, agent.id, "console", owner=False).kept]
        for agent in config.agents
    }


# --- bot pairing revoke -------------------------------------------------------------------------------------------


@click.command("revoke")
@CONFIG_OPTION
@STATE_OPTION
@click.option("--account", default=None, help="Only on this account of the channel (default: every account).")
@click.argument("channel")
@click.argument("sender_id")
def pairing_revoke(config_path: str, state_dir: str | None, account: str | None, channel: str, sender_id: str) -> None:
    """Take back the pairing of SENDER_ID on CHANNEL (and drop any request of theirs): a running bot treats their
    next message as a stranger's. Senders in allow_from or owners are in the config, not here."""
    import asyncio

    async def revoke() -> tuple[int, int]:
        async with cli_state(config_path, state_dir) as store:
            where = channel.strip().lower()
            return await store.revoke_pairing(where, sender_id.strip(), account.strip() if account else None)

    approved, pending = asyncio.run(revoke())
    if approved == pending == 0:
        click.echo(f"{sender_id} on {channel} has no pairing and no pending request.", err=True)
        sys.exit(1)
    done = [f"{approved} approval{'s' if approved != 1 else ''}"] if approved else []
    done += [f"{pending} pending request{'s' if pending != 1 else ''}"] if pending else []
    click.echo(f"Revoked {sender_id} on {channel}: removed {' and '.join(done)}.")


def approved_lines(config_path: str, state_dir: str | None, channel: str | None) -> list[str]:
    """The senders pairing let in, one line each (for `bot pairing list`)."""
    import asyncio
    from datetime import datetime

    async def allowed() -> list[str]:
        async with cli_state(config_path, state_dir) as store:
            rows = await store.allowed_senders(channel.strip().lower() if channel else None)
        return [
            f"{r.channel}/{r.account}  {r.sender_id}  {r.sender_name or ''}  approved by {r.approved_by or '?'} "
            f"{datetime.fromtimestamp(r.created):%Y-%m-%d %H:%M}"
            for r in rows
        ]

    return asyncio.run(allowed())


# --- bot approvals rules ------------------------------------------------------------------------------------------


@click.group("rules")
def approval_rules() -> None:
    """The "Allow always" rules: exact commands an agent runs without asking."""


def _rules(config_path: str, state_dir: str | None, agent: str | None) -> list[AllowedRule]:
    import asyncio

    async def listed() -> list[AllowedRule]:
        async with cli_state(config_path, state_dir) as store:
            return await store.allowed_rules(agent.strip().lower() if agent else None)

    return asyncio.run(listed())


def _command_text(rule: AllowedRule) -> str:
    from bot.approvals.text import shown_command

    return shown_command(shlex.join([rule.executable, *rule.args])).text


@approval_rules.command("list")
@CONFIG_OPTION
@STATE_OPTION
@click.option("--agent", default=None, help="Only this agent's rules.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per line.")
def rules_list(config_path: str, state_dir: str | None, agent: str | None, as_json: bool) -> None:
    """Show every "Allow always" rule with the id `bot approvals rules revoke` takes."""
    from datetime import datetime

    rules = _rules(config_path, state_dir, agent)
    if as_json:
        for rule in rules:
            click.echo(json.dumps({"id": rule.id, **rule.model_dump(mode="json")}))
        return
    if not rules:
        click.echo('No "Allow always" rules.')
        return
    for rule in rules:
        pinned = f"  (script sha256 {rule.sha256[:12]}…)" if rule.sha256 else ""
        when = f"{datetime.fromtimestamp(rule.created):%Y-%m-%d %H:%M}"
        click.echo(f"{rule.id}  {rule.agent}  {_command_text(rule)}{pinned}  by {rule.approved_by or '?'} {when}")


@approval_rules.command("revoke")
@CONFIG_OPTION
@STATE_OPTION
@click.argument("rule_id")
def rules_revoke(config_path: str, state_dir: str | None, rule_id: str) -> None:
    """Delete the rule RULE_ID (a prefix is enough when it is unambiguous): a running bot asks again for that command
    from its next run of it."""
    import asyncio

    wanted = rule_id.strip().lower()
    found = [rule for rule in _rules(config_path, state_dir, None) if rule.id.startswith(wanted)] if wanted else []
    if not found:
        click.echo(f'No "Allow always" rule has an id starting with {rule_id}.', err=True)
        sys.exit(1)
    if len(found) > 1:
        click.echo(f"More than one rule has an id starting with {rule_id}: give more of the id.", err=True)
        sys.exit(1)
    [rule] = found

    async def revoke() -> bool:
        async with cli_state(config_path, state_dir) as store:
            return await store.revoke_allowed_rule(rule)

    if not asyncio.run(revoke()):
        click.echo(f"The rule {rule.id} was already gone.", err=True)
        sys.exit(1)
    click.echo(f"Revoked {rule.id}: {rule.agent} asks again before {_command_text(rule)}")


# --- bot service install ------------------------------------------------------------------------------------------


def _unit_word(text: str) -> str:
    """One word of an ExecStart= line: specifiers (%) and variables ($) escaped, quoted when it has spaces."""
    text = text.replace("%", "%%").replace("$", "$$")
    if re.search(r"[\s\"'\\;]", text):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return text


def _unit_path(path: Path) -> str:
    """A path for WorkingDirectory= / EnvironmentFile=: specifiers escaped."""
    return str(path).replace("%", "%%")


def _bot_program() -> list[str]:
    """How to start `bot` from this installation: the venv's `bot` script, else this Python with `-m bot`."""
    script = Path(sys.executable).parent / "bot"  # not resolved: a venv's python is a link out of the venv
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script.absolute())]
    return [str(Path(sys.executable).absolute()), "-m", "bot"]


def service_unit(config: Path, *, user: bool, run_as: str | None = None, program: Iterable[str] | None = None) -> str:
    """A systemd unit that runs `bot run --config <config>` from the config's folder, restarted when it fails, with
    the `.env` beside the config as its environment file (optional: `-`)."""
    config = config.absolute()
    folder = config.parent
    command = [*(program if program is not None else _bot_program()), "run", "--config", str(config)]
    lines = [
        "[Unit]",
        f"Description=Switchboard chat bot ({_unit_path(config)})",
        # The user manager has no network-online.target.
        *([] if user else ["Wants=network-online.target", "After=network-online.target"]),
        "StartLimitIntervalSec=300",
        "StartLimitBurst=10",
        "",
        "[Service]",
        "Type=simple",
        *([f"User={run_as}"] if run_as else []),
        f"WorkingDirectory={_unit_path(folder)}",
        f"EnvironmentFile=-{_unit_path(folder / '.env')}",
        "Environment=PYTHONUNBUFFERED=1",
        f"ExecStart={' '.join(_unit_word(word) for word in command)}",
        "Restart=on-failure",
        "RestartSec=5",
        "KillSignal=SIGTERM",  # `bot run` finishes what it is sending and exits 0
        "TimeoutStopSec=60",
        "",
        "[Install]",
        f"WantedBy={'default.target' if user else 'multi-user.target'}",
    ]
    return "\n".join(lines) + "\n"


def _unit_file(name: str, user: bool) -> Path:
    if user:
        base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
        return base / "systemd" / "user" / f"{name}.service"
    return Path("/etc/systemd/system") / f"{name}.service"


def _owner_of(path: Path) -> str | None:
    """The user who owns `path` (the system service runs as them), None for root or when unknown."""
    import pwd

    try:
        uid = path.stat().st_uid
        return None if uid == 0 else pwd.getpwuid(uid).pw_name
    except (OSError, KeyError):
        return None


@click.group()
def service() -> None:
    """Keep the bot running as a systemd service."""


@service.command("install")
@CONFIG_OPTION
@click.option("--user", "user", is_flag=True, help="A user service (~/.config/systemd/user) instead of a system one.")
@click.option("--name", default="switchboard", show_default=True, help="The unit's name.")
@click.option("--print", "only_print", is_flag=True, help="Print the unit instead of writing it.")
@click.option("--force", is_flag=True, help="Replace a unit file that differs.")
def service_install(config_path: str, user: bool, name: str, only_print: bool, force: bool) -> None:
    """Write a systemd unit that runs `bot run --config FILE` with restarts on failure, and say how to enable it.
    The .env beside the config is its environment file."""
    config = Path(config_path).absolute()
    if not config.is_file():
        click.echo(f"{config_path}: file not found", err=True)
        sys.exit(1)
    if not re.fullmatch(r"[A-Za-z0-9:_.\\-]+", name):
        raise click.UsageError(f"not a unit name: {name!r} (letters, digits, - _ . :)")
    unit = service_unit(config, user=user, run_as=None if user else _owner_of(config))
    if only_print:
        click.echo(unit, nl=False)
        return
    target = _unit_file(name, user)
    if target.exists() and target.read_text(encoding="utf-8") != unit and not force:
        click.echo(f"{target} exists and differs (see it with --print); --force replaces it.", err=True)
        sys.exit(1)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(unit, encoding="utf-8")
    except OSError as error:
        hint = "" if user else " (a system unit needs root: sudo, or --user)"
        click.echo(f"cannot write {target}: {error.strerror}{hint}", err=True)
        sys.exit(1)
    click.echo(f"Wrote {target}.")
    systemctl = "systemctl --user" if user else "sudo systemctl"
    click.echo("Check the config, then enable and start it:")
    click.echo(f"  bot config check --config {shlex.quote(str(config))}")
    click.echo(f"  {systemctl} daemon-reload")
    click.echo(f"  {systemctl} enable --now {name}.service")
    journal = f"journalctl --user -u {name}" if user else f"sudo journalctl -u {name}"
    click.echo(f"Its log: {journal} -f")
    if user:
        click.echo("To keep it running while you are logged out: sudo loginctl enable-linger $USER")
