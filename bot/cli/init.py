"""`bot init`: ask at a terminal (or take flags), check pasted tokens with their platforms, write a commented
bindings.yaml (bot/cli/init_render.py) and, when told to, the secrets into .env beside it; then the next commands."""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import click

from bot.cli.init_render import COMPATIBLE, PLATFORMS, PROVIDERS, Platform, ProviderChoice, compatible, render_config
from routing.errors import ChannelError

__all__ = [
    "COMPATIBLE", "PLATFORMS", "PROVIDERS", "Platform", "ProviderChoice", "TokenRefused", "check_token", "init",
    "render_config",
]  # fmt: skip

_OWNER = re.compile(r"^[a-z][a-z0-9_-]*:\S+$")
LOCAL_SERVER = "http://127.0.0.1:11434/v1"  # Ollama's, the default answer for an OpenAI-compatible endpoint
# What Telegram (404 for a malformed token), Discord and Slack answer a token they do not take.
_REFUSALS = (401, 403, 404)


class TokenRefused(ChannelError):
    """The platform did not accept the token (`refused`), or could not be asked or did not say (not `refused`); the
    message never holds the token."""

    def __init__(self, message: str, *, refused: bool = True) -> None:
        super().__init__(message)
        self.refused = refused


async def check_token(platform: str, token: str, base_url: str | None = None) -> str:
    """Ask the platform who the token belongs to (Telegram getMe, Discord users/@me, Slack auth.test): the bot's
    name. TokenRefused when it says no, cannot be reached or gives no clear answer."""
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
        message = f"{spec.title} could not be asked about the token ({type(error).__name__})"
        raise TokenRefused(message, refused=False) from None
    if platform == "telegram" and response.status_code == 200 and body.get("ok"):
        return "@" + str(body["result"].get("username", ""))
    if platform == "discord" and response.status_code == 200 and "id" in body:
        return str(body.get("username", body["id"]))
    if platform == "slack" and response.status_code == 200 and body.get("ok"):
        return f"{body.get('user', '?')} in {body.get('team', '?')}"
    said = str(body.get("description") or body.get("message") or body.get("error") or response.reason_phrase)
    said = f"{said.replace(token, '***')} ({response.status_code})"
    if response.status_code in _REFUSALS or (platform == "slack" and response.status_code == 200):
        raise TokenRefused(f"{spec.title} refused the token: {said}")
    raise TokenRefused(f"{spec.title} did not say whether it takes the token: {said}", refused=False)


def _interactive() -> bool:
    try:
        return sys.stdin.isatty()
    except ValueError:
        return False


@dataclass
class Choices:
    """What the file is written from: the answers, or the flags."""

    platforms: list[str]
    provider: ProviderChoice
    model: str | None  # None: the provider's usual model
    owners: list[str]
    check: bool
    write_env: bool | None  # None: ask at a terminal once secrets are given, else no
    api_base_url: str | None = None
    secrets: dict[str, str] = field(default_factory=dict)


def _ask(config_path: Path) -> Choices:
    """The interactive questions: platforms, provider (and endpoint), model, owners."""
    click.echo(f"Writing {config_path}. Press Enter for the [default]; an empty answer skips what is optional.")
    names = click.prompt(
        "Chat platforms (telegram, discord, slack; comma separated; none: the console only)", default="telegram"
    )
    platforms = [name.strip().lower() for name in str(names).split(",") if name.strip() and name.strip() != "none"]
    unknown = [name for name in platforms if name not in PLATFORMS]
    if unknown:
        raise click.UsageError(f"unknown platform {unknown[0]!r} (known: {', '.join(PLATFORMS)})")
    kind = click.prompt("Model provider", type=click.Choice([*PROVIDERS, COMPATIBLE]), default="openrouter")
    if kind == COMPATIBLE:
        base_url = str(click.prompt("The endpoint's base URL (Chat Completions)", default=LOCAL_SERVER)).strip()
        model = str(click.prompt("The model, as that server names it (e.g. llama3.1)")).strip()
        provider, model_choice = compatible(base_url, model), None
    else:
        provider = PROVIDERS[kind]
        model = str(click.prompt("Model", default=provider.model)).strip()
        model_choice = None if model == provider.model else model
    owners = []
    for name in platforms:
        own = str(click.prompt(f"Your {PLATFORMS[name].title} user id (an owner; empty to skip)", default="")).strip()
        if own:
            owners.append(f"{name}:{own}")
    return Choices(platforms, provider, model_choice, owners, check=False, write_env=None)


def _secret_of(platform: Platform, variable: str) -> str:
    """What a platform's variable holds, as init names it: `Slack app token` for SLACK_APP_TOKEN."""
    return f"{platform.title} {variable.split('_', 1)[1].lower().replace('_', ' ')}"


def _wanted(choices: Choices, *, everything: bool) -> list[tuple[str, str]]:
    """(variable, what it holds) of the secrets to ask for, in order: each platform's token(s), then the model key;
    only the tokens that are checked unless `everything`."""
    wanted = []
    for name in choices.platforms:
        platform = PLATFORMS[name]
        for index, variable in enumerate(platform.variables):
            if everything or (choices.check and index == 0):
                wanted.append((variable, _secret_of(platform, variable)))
    if everything:
        wanted.append((choices.provider.variable, f"{choices.provider.title} API key"))
    return wanted


def _gather(wanted: list[tuple[str, str]], known: Mapping[str, str]) -> dict[str, str]:
    """Each secret: from its variable when set (the environment, or .env beside the config), else pasted: hidden at a
    terminal, one line each on stdin for a script; an empty answer skips it. Never echoed."""
    found: dict[str, str] = {}
    for variable, what in wanted:
        value = known.get(variable, "").strip()
        if value:
            click.echo(f"The {what}: from ${variable}.", err=True)
        elif _interactive():
            prompt = f"Paste the {what} (not shown; Enter skips)"
            value = str(click.prompt(prompt, default="", show_default=False, hide_input=True)).strip()
        else:
            value = sys.stdin.readline().strip()
        if value:
            found[variable] = value
    return found


def _check(choices: Choices) -> list[TokenRefused]:
    """Check each given token with its platform; a refused one is dropped from the secrets (never written). The
    refusals, for the exit status; a platform that could not be asked is only a warning."""
    refused = []
    for name in choices.platforms:
        platform = PLATFORMS[name]
        variable = platform.variables[0]
        token = choices.secrets.get(variable)
        if token is None:
            click.echo(
                f"warning: no {platform.title} token given (${variable} unset, none pasted): not checked", err=True
            )
            continue
        try:
            who = asyncio.run(check_token(name, token, choices.api_base_url))
        except TokenRefused as error:
            if error.refused:
                del choices.secrets[variable]
                refused.append(error)
                click.echo(f"warning: {error}; the file is written anyway, without it in .env", err=True)
            else:
                click.echo(f"warning: {error}; not checked (`bot doctor` checks it later), kept", err=True)
            continue
        click.echo(f"{platform.title} accepted the token: {who}", err=True)
    return refused


def _shown(path: Path) -> str:
    """`path` as the next commands should name it: relative to this folder when inside it, quoted for a shell when
    it needs it."""
    absolute = path.resolve()
    try:
        return shlex.quote(str(absolute.relative_to(Path.cwd().resolve())))
    except ValueError:
        return shlex.quote(str(absolute))


def _bot_command() -> str:
    """How to run `bot` from here: `bot` when it is on PATH, else the script beside this Python (`.venv/bin/bot`)."""
    script = Path(sys.executable).parent / "bot"
    if not script.is_file():
        return f"{sys.executable} -m bot"
    on_path = shutil.which("bot")
    if on_path and Path(on_path).resolve() == script.resolve():
        return "bot"
    return _shown(script)


def _make_line(path: Path) -> str | None:
    """`make run` (with CONFIG= unless it is the default file) when this folder is the checkout, whose Makefile runs
    the bot; None elsewhere."""
    checkout = Path(__file__).resolve().parents[2]
    if Path.cwd().resolve() != checkout or not (checkout / "Makefile").is_file():
        return None
    if path.resolve() == checkout / "bindings.yaml":
        return "make run"
    return f"make run CONFIG={_shown(path)}"


def _next_steps(path: Path, choices: Choices, written: list[str], known: Mapping[str, str]) -> None:
    env_path = path.parent / ".env"
    click.echo(f"Wrote {_shown(path)}.")
    if written:
        click.echo(f"Wrote {', '.join(written)} to {_shown(env_path)} (mode 0600; the values are not shown).")
    variables = [variable for name in choices.platforms for variable in PLATFORMS[name].variables]
    if choices.provider.name != "local":
        variables.append(choices.provider.variable)
    missing = [variable for variable in variables if variable not in written and not known.get(variable, "").strip()]
    if missing:
        click.echo(f"Still to set, in {_shown(env_path)} (or the environment the bot runs with):")
        for variable in missing:
            click.echo(f"  {variable}=<{_what(choices, variable)}>")
    bot = _bot_command()
    config = _shown(path)
    click.echo("Next:")
    click.echo(f"  {bot} config check --config {config}")
    if choices.platforms:
        click.echo(f"  {bot} doctor --config {config}")
    make = _make_line(path)
    click.echo(f"  {make}" if make else f"  {bot} run --config {config}")


def _what(choices: Choices, variable: str) -> str:
    if variable == choices.provider.variable:
        return f"your {choices.provider.title} API key"
    for platform in PLATFORMS.values():
        if variable in platform.variables:
            return f"your {_secret_of(platform, variable)}"
    return variable


def _from_flags(provider: str | None, base_url: str | None, model: str | None) -> tuple[ProviderChoice, str | None]:
    """The provider and model the flags name; BadParameter for a combination that cannot be written."""
    if provider == COMPATIBLE:
        if not base_url or not model:
            raise click.UsageError(
                f"--provider {COMPATIBLE} needs --base-url (e.g. {LOCAL_SERVER}) and --model (the server's model id)"
            )
        return compatible(base_url, model), None
    if base_url is not None:
        raise click.BadParameter(f"goes with --provider {COMPATIBLE}", param_hint="--base-url")
    chosen = PROVIDERS[provider or "openrouter"]
    if model is not None and not model.startswith(f"{chosen.name}/"):
        raise click.BadParameter(f"{model!r} must start with {chosen.name}/ (the provider)", param_hint="--model")
    return chosen, model


def _url(value: str | None, flag: str) -> None:
    if value is not None and not re.match(r"^https?://[^/\s]+", value):
        raise click.BadParameter(f"{value!r} must be an http:// or https:// URL", param_hint=flag)


@click.command()
@click.option(
    "--config",
    "config_path",
    default="bindings.yaml",
    show_default=True,
    type=click.Path(dir_okay=False),
    help="The file to write (.env goes beside it).",
)
@click.option("--telegram", is_flag=True, help="Add a Telegram bot account.")
@click.option("--discord", is_flag=True, help="Add a Discord bot account.")
@click.option("--slack", is_flag=True, help="Add a Slack app account (Socket Mode).")
@click.option(
    "--provider",
    type=click.Choice([*PROVIDERS, COMPATIBLE]),
    default=None,
    help=f"The model provider [openrouter]; {COMPATIBLE}: any Chat Completions endpoint (with --base-url).",
)
@click.option(
    "--base-url",
    default=None,
    metavar="URL",
    help=f"The {COMPATIBLE} endpoint, e.g. {LOCAL_SERVER} (named `local` on this machine or network, else `custom`).",
)
@click.option(
    "--model",
    default=None,
    help=f"The model: <provider>/<model-id> (default: the provider's usual one); for {COMPATIBLE} the server's id.",
)
@click.option("--owner", "owners", multiple=True, metavar="CHANNEL:ID", help="An owner, e.g. telegram:111111111.")
@click.option("--check-token", "check", is_flag=True, help="Check each token with its platform before writing.")
@click.option(
    "--write-env/--no-write-env",
    "write_env",
    default=None,
    help="Write the tokens and the model key into .env beside the file (mode 0600). Each comes from its variable, "
    "else is asked (hidden) at a terminal, else read as one line of stdin each in order (an empty line skips it). "
    "At a terminal without flags init asks.",
)
@click.option(
    "--api-base-url",
    default=None,
    metavar="URL",
    help="The platform API's root (a local Bot API server, a proxy, a test): written into the account and used by "
    "--check-token. With one platform flag.",
)
@click.option("--force", is_flag=True, help="Overwrite the file if it exists.")
def init(
    config_path: str, telegram: bool, discord: bool, slack: bool, provider: str | None, base_url: str | None,
    model: str | None, owners: tuple[str, ...], check: bool, write_env: bool | None, api_base_url: str | None,
    force: bool,
) -> None:  # fmt: skip
    """Write a bindings.yaml: asks at a terminal, or takes the flags (any platform, provider, model or owner flag: no
    questions). Secrets are written as ${VAR} references, and their values into .env only when told (--write-env or
    yes at the prompt), never shown. A platform that cannot be reached only warns; a refused token is not written,
    and init exits 4 after writing the file."""
    from bot.config.env import with_env_file

    path = Path(config_path)
    if path.exists() and not force:
        raise click.ClickException(f"{path} exists; --force overwrites it")
    flagged = telegram or discord or slack or provider is not None or model is not None or bool(owners)
    asking = not flagged and base_url is None and _interactive()
    if asking:
        choices = _ask(path)
        choices.write_env = write_env
    else:
        platforms = [name for name, on in (("telegram", telegram), ("discord", discord), ("slack", slack)) if on]
        chosen, model_choice = _from_flags(provider, base_url, model)
        choices = Choices(platforms, chosen, model_choice, list(owners), check, write_env)
    _url(api_base_url, "--api-base-url")
    _url(choices.provider.base_url, "--base-url")
    if api_base_url is not None and len(choices.platforms) != 1:
        raise click.BadParameter(
            "is one platform's API root: give it with one platform flag", param_hint="--api-base-url"
        )
    choices.api_base_url = api_base_url
    for owner in choices.owners:
        if not _OWNER.match(owner):
            raise click.BadParameter(
                f"{owner!r} must be <channel>:<user id>, e.g. telegram:111111111", param_hint="--owner"
            )

    known = with_env_file(path, dict(os.environ))
    choices.secrets = _gather(_wanted(choices, everything=bool(choices.write_env) or asking), known)
    if asking and any(PLATFORMS[name].variables[0] in choices.secrets for name in choices.platforms):
        choices.check = click.confirm("Check the tokens with the platforms now?", default=True)
    refused = _check(choices) if choices.check else []
    if choices.write_env is None and asking and choices.secrets:
        where = _shown(path.parent / ".env")
        choices.write_env = click.confirm(f"Write {', '.join(choices.secrets)} to {where} (mode 0600)?", default=True)

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_config(choices.platforms, choices.provider, choices.model, choices.owners, api_base_url))
    written: list[str] = []
    if choices.write_env and choices.secrets:
        from bot.cli.init_env import write_env as write_env_file

        write_env_file(path.parent / ".env", choices.secrets)
        written = list(choices.secrets)
    _next_steps(path, choices, written, known)
    if refused:
        raise refused[0]
