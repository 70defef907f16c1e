"""`bot init`: write a commented bindings.yaml for the chosen platforms and model provider, tokens as ${VAR}
references, optionally checking a pasted token with its platform first."""

from __future__ import annotations

import asyncio
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import click

from routing.errors import ChannelError

__all__ = [
    "PLATFORMS", "PROVIDERS", "Platform", "ProviderChoice", "TokenRefused", "check_token", "init", "render_config",
]  # fmt: skip


@dataclass(frozen=True)
class Platform:
    """A chat platform `bot init` can set up: its account settings as written, the variables they read, where its
    API is, and how to get a token."""

    name: str
    title: str
    account: str  # the account's settings, in YAML flow style
    variables: tuple[str, ...]  # the first is the token that is checked
    base_url: str
    how: str


@dataclass(frozen=True)
class ProviderChoice:
    """A model provider `bot init` can set up."""

    name: str
    kind: str
    base_url: str
    variable: str
    model: str
    fallbacks: tuple[str, ...] = ()


PLATFORMS: dict[str, Platform] = {
    "telegram": Platform(
        "telegram", "Telegram", '{ token: "${TELEGRAM_BOT_TOKEN}" }', ("TELEGRAM_BOT_TOKEN",),
        "https://api.telegram.org", "talk to @BotFather on Telegram: /newbot gives the token",
    ),
    "discord": Platform(
        "discord", "Discord", '{ token: "${DISCORD_BOT_TOKEN}" }', ("DISCORD_BOT_TOKEN",),
        "https://discord.com", "Developer Portal > your application > Bot > Reset Token (enable Message Content)",
    ),
    "slack": Platform(
        "slack", "Slack", '{ bot_token: "${SLACK_BOT_TOKEN}", app_token: "${SLACK_APP_TOKEN}" }',
        ("SLACK_BOT_TOKEN", "SLACK_APP_TOKEN"), "https://slack.com",
        "api.slack.com/apps > your app: OAuth (xoxb- bot token) and Socket Mode (xapp- app token)",
    ),
}  # fmt: skip

PROVIDERS: dict[str, ProviderChoice] = {
    "openrouter": ProviderChoice(
        "openrouter", "openai", "https://openrouter.ai/api/v1", "OPENROUTER_API_KEY",
        "openrouter/anthropic/claude-sonnet-4", ("openrouter/openai/gpt-4.1-mini",),
    ),
    "openai": ProviderChoice(
        "openai", "openai", "https://api.openai.com/v1", "OPENAI_API_KEY", "openai/gpt-4.1", ("openai/gpt-4.1-mini",)
    ),
    "anthropic": ProviderChoice("anthropic", "anthropic", "https://api.anthropic.com", "ANTHROPIC_API_KEY",
                          "anthropic/claude-sonnet-4"),
}  # fmt: skip

_OWNER = re.compile(r"^[a-z][a-z0-9_-]*:\S+$")


class TokenRefused(ChannelError):
    """The platform did not accept the token (or could not be asked); the message never holds the token."""


def render_config(platforms: list[str], provider: str, model: str | None, owners: list[str]) -> str:
    """The bindings.yaml text: commented, every secret a ${VAR} reference."""
    chosen = PROVIDERS[provider]
    model = model or chosen.model
    fallbacks = [ref for ref in chosen.fallbacks if ref != model] if model == chosen.model else []
    lines = [
        "# Switchboard's config, written by `bot init`. `bot config check` validates it; README.md describes every",
        "# section (the example bindings.yaml in the repository shows them all).",
        "#",
        "# Secrets stay in the environment: ${VAR} reads one (an unset variable skips the account that needs it).",
        "",
        "defaults:",
        f"  model: {model}   # <provider>/<model-id>",
        f"  fallbacks: [{', '.join(fallbacks)}]   # tried in order when the model fails",
        "  workspace_root: workspaces        # each agent's files: workspaces/<agent id>",
        "",
        "# One agent answers every chat; add more and route them with bindings: (see README.md).",
        "agents:",
        "  - id: main",
        "    default: true",
        "",
        "# Who owns the bot (<channel>:<user id>): owners use every tool and approve risky commands. Strangers who",
        "# write to the bot get a pairing code; `bot pairing approve <channel> <code>` lets them in.",
    ]
    if owners:
        lines += ["owners:", *(f'  - "{owner}"' for owner in owners)]
    else:
        lines += ['owners: []                         # e.g. - "telegram:111111111"']
    lines += [
        "",
        "# Chat platforms, one account each; `make run` serves them (with none, the console in the terminal).",
    ]
    if platforms:
        lines.append("channels:")
        for name in platforms:
            platform = PLATFORMS[name]
            lines += [
                f"  # {platform.title}: {platform.how}",
                f"  {name}:",
                "    accounts:",
                f"      default: {platform.account}",
            ]
    else:
        lines += [
            "channels: {}",
            "#  telegram:",
            "#    accounts:",
            '#      default: { token: "${TELEGRAM_BOT_TOKEN}" }',
        ]
    lines += [
        "",
        "# The model provider: model ids name it first (openrouter/anthropic/claude-sonnet-4).",
        "providers:",
        f"  {chosen.name}:",
        f"    kind: {chosen.kind}",
        f"    base_url: {chosen.base_url}",
        f"    api_key: ${{{chosen.variable}:-}}",
        "",
    ]
    return "\n".join(lines)


async def check_token(platform: str, token: str, base_url: str | None = None) -> str:
    """Ask the platform who the token belongs to (Telegram getMe, Discord users/@me, Slack auth.test): the bot's
    name. TokenRefused when it says no or cannot be reached."""
    import httpx  # here: `bot --help` loads this module

    spec = PLATFORMS[platform]
    root = (base_url or spec.base_url).rstrip("/")
    try:
        async with httpx.AsyncClient(timeout=30) as client:
            if platform == "telegram":
                response = await client.get(f"{root}/bot{token}/getMe")
            elif platform == "discord":
                response = await client.get(f"{root}/api/v10/users/@me", headers={"Authorization": f"Bot {token}"})
            else:
                response = await client.post(f"{root}/api/auth.test", headers={"Authorization": f"Bearer {token}"})
            body = response.json() if response.headers.get("content-type", "").startswith("application/json") else {}
    except (httpx.HTTPError, ValueError) as error:  # the error's text may hold the URL, and with it the token
        raise TokenRefused(f"{spec.title} could not be asked about the token ({type(error).__name__})") from None
    if platform == "telegram" and response.status_code == 200 and body.get("ok"):
        return "@" + str(body["result"].get("username", ""))
    if platform == "discord" and response.status_code == 200 and "id" in body:
        return str(body.get("username", body["id"]))
    if platform == "slack" and response.status_code == 200 and body.get("ok"):
        return f"{body.get('user', '?')} in {body.get('team', '?')}"
    said = body.get("description") or body.get("message") or body.get("error") or response.reason_phrase
    raise TokenRefused(f"{spec.title} refused the token: {str(said).replace(token, '***')} ({response.status_code})")


def _interactive() -> bool:
    try:
        return sys.stdin.isatty()
    except ValueError:
        return False


def _read_token(platform: Platform, environ: dict[str, str]) -> str:
    """The token to check: from its variable when set, else pasted (hidden at a terminal; one line on stdin)."""
    variable = platform.variables[0]
    if environ.get(variable, "").strip():
        click.echo(f"Checking the token in ${variable} with {platform.title}…", err=True)
        return environ[variable].strip()
    if _interactive():
        return str(click.prompt(f"Paste the {platform.title} bot token (not shown, not written)", hide_input=True))
    line = sys.stdin.readline().strip()
    if not line:
        raise click.UsageError(f"--check-token: set {variable} or give the token on stdin")
    return line


def _ask(config_path: Path) -> tuple[list[str], str, str | None, list[str], bool]:
    """The interactive questions: platforms, provider, model, owners, whether to check the tokens."""
    click.echo(f"Writing {config_path}. Press Enter for the [default].", err=True)
    names = click.prompt(
        "Chat platforms (telegram, discord, slack; comma separated; none: the console only)", default="telegram"
    )
    platforms = [name.strip().lower() for name in str(names).split(",") if name.strip() and name.strip() != "none"]
    unknown = [name for name in platforms if name not in PLATFORMS]
    if unknown:
        raise click.UsageError(f"unknown platform {unknown[0]!r} (known: {', '.join(PLATFORMS)})")
    provider = click.prompt("Model provider", type=click.Choice(list(PROVIDERS)), default="openrouter")
    model = click.prompt("Model", default=PROVIDERS[provider].model)
    owners = []
    for name in platforms:
        own = str(click.prompt(f"Your {PLATFORMS[name].title} user id (an owner; empty to skip)", default="")).strip()
        if own:
            owners.append(f"{name}:{own}")
    check = bool(platforms) and click.confirm("Check the tokens with the platforms now?", default=True)
    return platforms, provider, None if model == PROVIDERS[provider].model else str(model), owners, check


@click.command()
@click.option(
    "--config",
    "config_path",
    default="bindings.yaml",
    show_default=True,
    type=click.Path(dir_okay=False),
    help="The file to write.",
)
@click.option("--telegram", is_flag=True, help="Add a Telegram bot account.")
@click.option("--discord", is_flag=True, help="Add a Discord bot account.")
@click.option("--slack", is_flag=True, help="Add a Slack app account (Socket Mode).")
@click.option("--provider", type=click.Choice(list(PROVIDERS)), default=None, help="The model provider [openrouter].")
@click.option("--model", default=None, help="The model, <provider>/<model-id> (default: the provider's usual one).")
@click.option("--owner", "owners", multiple=True, metavar="CHANNEL:ID", help="An owner, e.g. telegram:111111111.")
@click.option(
    "--check-token", "check", is_flag=True, help="Check each token with its platform (from $VAR, else stdin)."
)
@click.option("--api-base-url", default=None, help="The platform API's root for --check-token (a proxy, a test).")
@click.option("--force", is_flag=True, help="Overwrite the file if it exists.")
def init(
    config_path: str, telegram: bool, discord: bool, slack: bool, provider: str | None, model: str | None,
    owners: tuple[str, ...], check: bool, api_base_url: str | None, force: bool,
) -> None:  # fmt: skip
    """Write a bindings.yaml: asks at a terminal, or takes the flags (any platform flag or --provider: no questions).
    Tokens are written as ${VAR} references; the lines to set them are printed, never the tokens."""
    import os

    path = Path(config_path)
    if path.exists() and not force:
        raise click.ClickException(f"{path} exists; --force overwrites it")
    flagged = telegram or discord or slack or provider is not None or model is not None or bool(owners)
    if not flagged and _interactive():
        platforms, provider, model, owner_list, check = _ask(path)
    else:
        platforms = [name for name, on in (("telegram", telegram), ("discord", discord), ("slack", slack)) if on]
        owner_list = list(owners)
    provider = provider or "openrouter"
    for owner in owner_list:
        if not _OWNER.match(owner):
            raise click.BadParameter(
                f"{owner!r} must be <channel>:<user id>, e.g. telegram:111111111", param_hint="--owner"
            )
    if model is not None and not model.startswith(f"{provider}/"):
        raise click.BadParameter(f"{model!r} must start with {provider}/ (the provider)", param_hint="--model")
    if check:
        environ = dict(os.environ)
        for name in platforms:
            token = _read_token(PLATFORMS[name], environ)
            who = asyncio.run(check_token(name, token, api_base_url))
            click.echo(f"{PLATFORMS[name].title} accepted the token: {who}", err=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_config(platforms, provider, model, owner_list))
    click.echo(f"Wrote {path}. Set these in the environment (your shell profile, or the service's environment):")
    for name in platforms:
        for variable in PLATFORMS[name].variables:
            what = variable.split("_", 1)[1].lower().replace("_", " ")
            click.echo(f"  export {variable}=<your {PLATFORMS[name].title} {what}>")
    click.echo(f"  export {PROVIDERS[provider].variable}=<your {provider} API key>")
    click.echo(f"Then: bot config check --config {path}; make run (or bot run --config {path}).")
