"""The `bot` command line: run, route and config check. Heavy imports wait until a command needs them."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from bot.cli.common import CONFIG_OPTION, STATE_OPTION, cli_state, load_or_exit, state_dir_for
from bot.observe.log_format import LogFormat, log_options

_Command = Callable[..., Any]

if TYPE_CHECKING:
    from bot.config.settings import Config
    from bot.store import ApprovalDecision, ApprovalStatus
    from routing.errors import SwitchboardError


def _agent(config: Config, agent: str | None) -> str:
    """The named agent (lowercased), else the default agent; a usage error names the valid ones."""
    if agent is None:
        return config.default_agent
    wanted = agent.strip().lower()
    if wanted not in {item.id for item in config.agents}:
        names = ", ".join(item.id for item in config.agents)
        raise click.UsageError(f"no agent {agent!r} in the config (agents: {names})")
    return wanted


def _validated(config_path: str, state_dir: Path, *, warn: bool = True) -> Config:
    """`bot run` and `bot chat`: the same validation as `bot config check`, with its lines. A fatal error ends the
    command (exit 1); the others (an account whose token is unset, a provider without its key) are printed and the
    bot starts without that part; warnings are printed when `warn`."""
    from bot.config.loading import validate_config

    config, errors, warnings = validate_config(config_path, state_dir=state_dir)
    for issue in errors:
        click.echo(issue.render(config_path), err=True)
    if config is None:
        count = len(errors)
        click.echo(f"{config_path}: {count} error{'s' if count != 1 else ''}", err=True)
        sys.exit(1)
    for warning in warnings if warn else []:
        click.echo(f"warning: {warning.render(config_path)}", err=True)
    return config


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="switchboard", prog_name="bot")
def cli() -> None:
    """Switchboard: AI agents that live in Telegram, Discord and Slack."""


@cli.command()
@CONFIG_OPTION
@STATE_OPTION
@click.option("-v", "--verbose", is_flag=True, help="Log every decision (--log-level DEBUG).")
@log_options("INFO")
def run(config_path: str, state_dir: str | None, verbose: bool, log_format: LogFormat, log_level: str) -> None:
    """Run the bot on the channels configured in the bindings file (or, with none and a terminal, the console)."""
    import asyncio
    import logging

    from bot.app import App
    from bot.cli.run import serve
    from bot.config.checks import secrets_of
    from bot.observe.redaction import configure_logging

    level = logging.DEBUG if verbose else logging.getLevelNamesMapping()[log_level]
    redactor = configure_logging(level, log_format=log_format)
    if level > logging.DEBUG:
        logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per HTTP request is noise
    state = state_dir_for(config_path, state_dir)
    config = _validated(config_path, state)
    redactor.add(secrets_of(config))
    sys.exit(asyncio.run(serve(App(config, state))))


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

    config = load_or_exit(config_path)
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
@STATE_OPTION
def config_check(config_path: str, state_dir: str | None) -> None:
    """Exit 0 if the bindings file is valid; otherwise print every error and exit 1. Errors are what `bot run` would
    refuse or skip (with file, line and key path); warnings are lines that match nothing or are unwise."""
    from bot.cli.common import checked_config

    verdict = checked_config(config_path, state_dir_for(config_path, state_dir))
    for issue in verdict.errors:
        click.echo(issue.render(config_path), err=True)
    for warning in verdict.warnings:
        click.echo(f"warning: {warning.render(config_path)}", err=True)
    if verdict.errors or verdict.config is None:
        click.echo(verdict.summary(config_path), err=True)
        sys.exit(1)
    click.echo(verdict.summary(config_path))


@cli.command()
@CONFIG_OPTION
@click.option("--agent", default=None, help="Talk to this agent (default: whatever the bindings route to).")
@STATE_OPTION
@click.option("-m", "--message", default=None, help="Send one message, print the answer and exit.")
@log_options("ERROR")  # the answer, or one line saying why not: no decision log unless asked for
def chat(
    config_path: str, agent: str | None, state_dir: str | None, message: str | None, log_format: LogFormat,
    log_level: str,
) -> None:  # fmt: skip
    """Talk to an agent in the terminal; the conversation is kept between invocations."""
    import asyncio
    import logging

    from bot.app import App
    from bot.cli.chat import run_chat
    from bot.config.checks import secrets_of
    from bot.observe.redaction import configure_logging

    redactor = configure_logging(logging.getLevelNamesMapping()[log_level], log_format=log_format)
    state = state_dir_for(config_path, state_dir)
    config = _validated(config_path, state, warn=False)  # the answer alone on stdout, and on stderr only what failed
    redactor.add(secrets_of(config))
    app = App(config, state)

    async def chatting() -> int:
        # The MCP servers start in the background; a one-message chat waits for them, so their tools are there.
        async with app.mcp.running(settle=message is not None):
            return await run_chat(app, _agent(config, agent) if agent else None, message)

    sys.exit(asyncio.run(chatting()))


@cli.command("tools")
@CONFIG_OPTION
@click.option("--agent", default=None, help="The agent (default: the default agent).")
@click.option("--channel", default="console", show_default=True, help="The channel the run is on.")
@click.option("--peer", default=None, metavar="KIND:ID", help="The chat, for tools.by_group (e.g. group:-100123).")
@click.option("--not-owner", is_flag=True, help="Show what a sender who is not an owner gets.")
@click.option(
    "--explain",
    is_flag=True,
    help="Also name the entry that kept each tool, and show tools.non_owner and tools.subagent merged with their "
    "defaults: what each denies, lifts and limits to, and the tools it removes or lifts.",
)
def tools_command(
    config_path: str, agent: str | None, channel: str, peer: str | None, not_owner: bool, explain: bool
) -> None:
    """List the tools a run of the agent gets under `bot run` (the MCP servers' too: each is started briefly; those
    only the running gateway adds are marked), and which policy layer removed each other tool."""
    import asyncio

    from bot.app import App
    from bot.cli.gateway_tools import ONLY_UNDER_RUN_NOTE, gateway_only, gateway_policy
    from routing import Peer
    from tools.policy import PolicyResult, explain_defaulted, render_policy

    config = load_or_exit(config_path)
    agent_id = _agent(config, agent)
    try:
        target = Peer.parse(peer) if peer else None
    except ValueError as error:
        raise click.UsageError(str(error)) from None
    app = App(config)
    channel = channel.strip().lower()
    _quiet_logs(config)

    async def policy() -> tuple[PolicyResult, list[str]]:
        async with app.mcp.running(settle=True):  # the MCP servers' tools are listed too
            result = gateway_policy(app, agent_id, channel, peer=target, owner=not not_owner)
            return result, explain_defaulted(app.registry(), config.tools) if explain else []

    result, layers = asyncio.run(policy())
    click.echo(f"agent: {agent_id}  model: {app.decisions.first_model(agent_id) or '(none)'}  channel: {channel}")
    only = gateway_only(app)
    kept = [tool.name for tool in result.kept if tool.name in only]
    note = [f"* {ONLY_UNDER_RUN_NOTE}: {', '.join(kept)}"] if kept else []
    for line in [*_marked(render_policy(result, explain=explain), only), *note, *layers]:
        click.echo(line)


def _marked(lines: list[str], only: Collection[str]) -> list[str]:
    """`render_policy`'s lines with each kept tool that only a running gateway has marked `*`."""
    marked: list[str] = []
    kept = False
    for line in lines:
        if line.startswith(("kept (", "removed (")):
            kept = line.startswith("kept (")
        elif kept and line.startswith("  ") and line.split(maxsplit=1)[0] in only:
            line += " *" if line.rstrip() == line else "*"
        marked.append(line)
    return marked


@cli.command()
@CONFIG_OPTION
@click.option("--agent", default=None, help="The agent (default: the default agent).")
@click.option("--channel", default="console", show_default=True, help="The channel the run is on.")
def prompt(config_path: str, agent: str | None, channel: str) -> None:
    """Print exactly what the model receives under `bot run`: the system prompt, then the tools as sent to the
    provider (those only the running gateway adds, such as cron, named in a comment line)."""
    import asyncio

    from bot.app import App
    from bot.cli.prompt import preview

    config = load_or_exit(config_path)
    app = App(config)
    _quiet_logs(config)

    async def previewed() -> str:
        async with app.mcp.running(settle=True):  # the MCP servers' tools are shown too
            return await preview(app, _agent(config, agent), channel.strip().lower())

    click.echo(asyncio.run(previewed()), nl=False)


def _quiet_logs(config: Config) -> None:
    """Errors only, and no secret of the config's in them: for commands that start the MCP servers for a moment
    (what failed shows in their output)."""
    import logging

    from bot.config.checks import secrets_of
    from bot.observe.redaction import configure_logging

    configure_logging(logging.ERROR).add(secrets_of(config))


@cli.group()
def mcp() -> None:
    """MCP servers: tools from outside the code (mcp.servers in bindings.yaml)."""


@mcp.command("list")
@CONFIG_OPTION
def mcp_list(config_path: str) -> None:
    """Start each MCP server, wait until it runs or fails (at most its startup_timeout_seconds), show its state, why
    it failed, and the names its tools have here; then stop them. A running bot keeps its own servers."""
    import asyncio

    from bot.app import App
    from bot.config.checks import secrets_of
    from bot.observe.redaction import Redactor
    from tools.mcp.manager import render_status

    config = load_or_exit(config_path)
    app = App(config)
    _quiet_logs(config)

    async def listed() -> list[str]:
        async with app.mcp.running(settle=True):
            app.registry()  # names taken by the other tools: a clash with one shows as a tool left out
            return render_status(app.mcp.status())

    redactor = Redactor(secrets_of(config))
    for line in asyncio.run(listed()):
        click.echo(redactor.redact(line))


@cli.group()
def skills() -> None:
    """Skills: folders with a SKILL.md that teach an agent a procedure."""


@skills.command("list")
@CONFIG_OPTION
@STATE_OPTION
@click.option("--agent", default=None, help="The agent (default: the default agent).")
def skills_list(config_path: str, state_dir: str | None, agent: str | None) -> None:
    """Show every skill found for the agent, its source (workspace, dirs, shipped), and why one is not offered."""
    from bot.app import App

    config = load_or_exit(config_path)
    agent_id = _agent(config, agent)
    report = App(config, state_dir_for(config_path, state_dir)).skills(agent_id)
    offered = len(report.eligible)
    click.echo(f"agent: {agent_id}  {offered} skill{'s' if offered != 1 else ''} offered")
    width = max((len(entry.name) for entry in report.entries), default=0)
    for entry in report.entries:
        status = "offered" if entry.skill else "not offered"
        click.echo(f"{entry.name:<{width}}  {entry.source:<9}  {status:<11}  {entry.file}")
        if entry.reason:
            click.echo(f"    {entry.reason}")
        for problem in entry.problems:
            click.echo(f"    {problem.render()}")
    for note in report.notes:
        click.echo(f"note: {note}")


@cli.group()
def pairing() -> None:
    """Approve people who asked to talk to the bot (dm_policy: pairing)."""


@pairing.command("list")
@CONFIG_OPTION
@STATE_OPTION
@click.argument("channel", required=False)
def pairing_list(config_path: str, state_dir: str | None, channel: str | None) -> None:
    """Show pending pairing requests, then the senders already approved."""
    import asyncio

    async def pending() -> list[str]:
        async with cli_state(config_path, state_dir) as store:
            rows = await store.pending_pairings(channel.strip().lower() if channel else None)
        return [f"{r.channel}/{r.account}  {r.code}  {r.sender_name or ''} ({r.sender_id})" for r in rows]

    lines = asyncio.run(pending())
    click.echo("\n".join(lines) if lines else "No pending pairing requests.")
    from bot.cli.manage import approved_lines

    if approved := approved_lines(config_path, state_dir, channel):
        click.echo("Approved (`bot pairing revoke <channel> <sender_id>` takes one back):")
        click.echo("\n".join(approved))


@pairing.command("approve")
@CONFIG_OPTION
@STATE_OPTION
@click.argument("channel")
@click.argument("code")
def pairing_approve(config_path: str, state_dir: str | None, channel: str, code: str) -> None:
    """Let the sender who got CODE on CHANNEL talk to the bot; they are told so (by the running bot within seconds,
    or by the bot when it starts)."""
    import asyncio
    import time

    from bot.delivery.outbox import Delivery
    from bot.intake.welcome import welcome

    async def approve() -> str | None:
        async with cli_state(config_path, state_dir) as store:
            record = await store.approve_pairing(channel.strip().lower(), code, "cli")
            if record is not None:  # recorded in the outbox here; the bot that serves the account sends it
                await welcome(Delivery(store, {}, time.time), record)
        return None if record is None else (record.sender_name or record.sender_id)

    who = asyncio.run(approve())
    if who is None:
        click.echo(f"No pending request on {channel} has the code {code} (it may have expired).", err=True)
        sys.exit(1)
    click.echo(f"Approved {who}: the bot tells them they may talk now.")


@cli.group()
def approvals() -> None:
    """Decide on commands waiting for approval (the running bot picks the decision up within a second)."""


@approvals.command("list")
@CONFIG_OPTION
@STATE_OPTION
@click.option("--all", "show_all", is_flag=True, help="Also show decided and expired requests.")
def approvals_list(config_path: str, state_dir: str | None, show_all: bool) -> None:
    """Show pending approval requests, each whole command with its hidden characters escaped."""
    import asyncio
    from datetime import datetime

    from bot.approvals.text import shown_command

    async def rows() -> list[str]:
        async with cli_state(config_path, state_dir) as store:
            found = await store.find_approvals("", pending_only=not show_all)
        lines = []
        for r in found:
            shown, agent = shown_command(r.command), shown_command(r.agent).text
            expires = datetime.fromtimestamp(r.expires)
            lines.append(f"{r.id}  {r.status:<8} {agent}  expires {expires:%H:%M}  {shown.text}")
            warning = shown.plain_warning()
            if warning is not None:
                lines.append(f"    {warning}")
        return lines

    lines = asyncio.run(rows())
    click.echo("\n".join(lines) if lines else "No pending approval requests.")


def _decide_from_cli(config_path: str, state_dir: str | None, approval_id: str, decision: ApprovalDecision) -> None:
    import asyncio

    async def decide() -> str:
        async with cli_state(config_path, state_dir) as store:
            found = await store.find_approvals(approval_id.strip().lower())
            if len(found) != 1:
                return "none" if not found else "ambiguous"
            status: ApprovalStatus = "denied" if decision == "deny" else "allowed"
            settled = await store.decide_approval(found[0].id, status, decision, "cli")
            return "none" if settled is None else settled.id

    outcome = asyncio.run(decide())
    if outcome == "none":
        click.echo(f"No pending approval request starts with {approval_id}.", err=True)
        sys.exit(1)
    if outcome == "ambiguous":
        click.echo(f"More than one pending request starts with {approval_id}: give more of the id.", err=True)
        sys.exit(1)
    click.echo(f"{decision}: {outcome}")


@approvals.command("approve")
@CONFIG_OPTION
@STATE_OPTION
@click.argument("approval_id")
@click.option("--always", is_flag=True, help="Allow this exact command from now on (where it was offered).")
def approvals_approve(config_path: str, state_dir: str | None, approval_id: str, always: bool) -> None:
    """Allow the command waiting under APPROVAL_ID (a prefix is enough when it is unambiguous)."""
    _decide_from_cli(config_path, state_dir, approval_id, "allow-always" if always else "allow-once")


@approvals.command("deny")
@CONFIG_OPTION
@STATE_OPTION
@click.argument("approval_id")
def approvals_deny(config_path: str, state_dir: str | None, approval_id: str) -> None:
    """Deny the command waiting under APPROVAL_ID."""
    _decide_from_cli(config_path, state_dir, approval_id, "deny")


from bot.cli.cron import cron  # noqa: E402 - it builds on the options above

cli.add_command(cron)

from bot.cli.sessions import sessions  # noqa: E402 - it builds on the options above

cli.add_command(sessions)

from bot.cli.init import init  # noqa: E402 - kept with the other commands' modules

cli.add_command(init)

from bot.cli.doctor import doctor  # noqa: E402 - it builds on the options above

cli.add_command(doctor)

from bot.cli.status import status  # noqa: E402 - it builds on the options above

cli.add_command(status)

from bot.cli.owners import owners  # noqa: E402 - it builds on the options above

cli.add_command(owners)

from bot.cli.web import web  # noqa: E402 - it builds on the options above

cli.add_command(web)

from bot.cli.manage import approval_rules, config_show, pairing_revoke, service  # noqa: E402 - builds on the above

config.add_command(config_show)
pairing.add_command(pairing_revoke)
approvals.add_command(approval_rules)
cli.add_command(service)


def exit_code(error: SwitchboardError) -> int:
    """The exit status for an error of the tree (routing.errors): 1 the config or setup, 3 a model provider,
    4 a channel, 5 a tool, 6 the state store (2 is a usage error, as click has it)."""
    from agent.providers.base import ProviderError
    from bot.store import StoreError
    from routing.errors import ChannelError, ToolError

    kinds: tuple[tuple[type[SwitchboardError], int], ...] = (
        (ProviderError, 3), (ChannelError, 4), (ToolError, 5), (StoreError, 6),
    )  # fmt: skip
    return next((code for kind, code in kinds if isinstance(error, kind)), 1)


def main() -> None:
    """Console-script entry point: an error of the tree ends the command with one line and its exit status."""
    from routing.errors import SwitchboardError

    try:
        cli(prog_name="bot")
    except SwitchboardError as error:
        lines = str(error).strip().splitlines() or [type(error).__name__]
        more = f" (and {len(lines) - 1} more lines)" if len(lines) > 1 else ""
        click.echo(f"bot: {lines[0]}{more}", err=True)
        sys.exit(exit_code(error))
