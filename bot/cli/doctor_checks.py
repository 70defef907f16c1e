"""`bot doctor`: `bot config check`'s verdict, then what needs the network or the machine: each channel account's
token against its platform, the state and the workspaces (and with `--models` each model), one line each, with a fix
for every failure."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import tempfile
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, ValidationError

from agent.messages import UserMessage
from agent.providers.base import Completed, ModelRequest, ProviderError
from bot.app import App
from bot.cli.common import checked_config
from bot.config.checks import secrets_of
from bot.config.settings import Config
from bot.observe.redaction import Redactor
from bot.runs.assemble import SetupError, choose_model, model_refs
from bot.store import DB_FILE
from bot.store.schema import SCHEMA_VERSION
from channels.accounts import DiscordAccount, SlackAccount, TelegramAccount

__all__ = [
    "DISCORD_ROOT",
    "MESSAGE_CONTENT_FLAGS",
    "SLACK_OPTIONAL_SCOPES",
    "SLACK_REQUIRED_SCOPES",
    "SLACK_ROOT",
    "TELEGRAM_ROOT",
    "Check",
    "Status",
    "diagnose",
    "mask",
    "render",
]

Status = Literal["ok", "warn", "FAIL"]

TELEGRAM_ROOT = "https://api.telegram.org"
DISCORD_ROOT = "https://discord.com"
SLACK_ROOT = "https://slack.com"
# Application flags GATEWAY_MESSAGE_CONTENT and GATEWAY_MESSAGE_CONTENT_LIMITED: either lets the bot read messages.
MESSAGE_CONTENT_FLAGS = (1 << 19) | (1 << 18)
# What the Slack adapter cannot work without (answers, DMs, channels, mentions), and what some of its features need:
# private channels, reactions, opening a DM, reading and sending files.
SLACK_REQUIRED_SCOPES = ("app_mentions:read", "channels:history", "chat:write", "im:history")
SLACK_OPTIONAL_SCOPES = ("files:read", "files:write", "groups:history", "im:write", "reactions:write")
TIMEOUT = httpx.Timeout(10.0, connect=5.0)
CONNECT_SECONDS = 5  # for the state database
MODEL_TIMEOUT = 60.0  # one tiny answer; a model that needs longer than this for "ping" is as good as down


class Check(BaseModel):
    """One line of the report: what was checked, how it went, and for a failure (or a warning) what to do."""

    model_config = ConfigDict(frozen=True)

    status: Status
    name: str
    detail: str
    fix: str | None = None


def _ok(name: str, detail: str) -> Check:
    return Check(status="ok", name=name, detail=detail)


def _fail(name: str, detail: str, fix: str) -> Check:
    return Check(status="FAIL", name=name, detail=detail, fix=fix)


def _warn(name: str, detail: str, fix: str | None = None) -> Check:
    return Check(status="warn", name=name, detail=detail, fix=fix)


def mask(secret: str) -> str:
    """A credential as it may be shown: its first four characters at most, never enough to use it."""
    return f"{secret[:4]}…" if len(secret) >= 16 else "…"


def render(checks: Iterable[Check], redactor: Redactor | None = None) -> list[str]:
    """The report's lines: `ok`/`warn`/`FAIL`, the check's name and what was found, then the fix (indented); every
    secret the redactor knows replaced, should an answer have echoed one."""
    items = list(checks)
    width = max((len(check.name) for check in items), default=0)
    lines: list[str] = []
    for check in items:
        first, *more = check.detail.splitlines() or [""]
        lines.append(f"{check.status:<4}  {check.name:<{width}}  {first}")
        lines += [f"      {line}" for line in more]
        if check.fix:
            lines.append(f"      fix: {check.fix}")
    counts = {status: sum(check.status == status for check in items) for status in ("ok", "warn", "FAIL")}
    lines.append(f"{counts['ok']} ok, {counts['warn']} warn, {counts['FAIL']} FAIL")
    return [redactor.redact(line) for line in lines] if redactor is not None else lines


# --- the config and its variables ---------------------------------------------------------------------------------


def _load(config_path: str, state_dir: Path) -> tuple[Config | None, bool, list[Check]]:
    """`bot config check`'s verdict as report lines (the same errors and warnings, never another opinion): the
    config (None when an error is fatal), whether it has any error, and the lines."""
    verdict = checked_config(config_path, state_dir)
    config, errors = verdict.config, verdict.errors
    if errors or config is None:
        detail = "\n".join([verdict.summary(config_path)] + [issue.render(config_path) for issue in errors])
        found = [_fail("config", detail, "each line says what to do (`bot config check` prints the same lines)")]
    else:
        found = [_ok("config", verdict.summary(config_path))]
    found += [_warn("config", warning.render(config_path)) for warning in verdict.warnings]
    return config, bool(errors), found


def _accounts(config: Config) -> list[tuple[str, str, dict[str, Any]]]:
    """(channel, account, raw settings) of every channel account in the config, in the file's order."""
    found = []
    for channel, section in config.channels.items():
        accounts = section.get("accounts") if isinstance(section, dict) else None
        for account, settings in (accounts or {}).items() if isinstance(accounts, dict) else ():
            found.append((channel, str(account), settings if isinstance(settings, dict) else {}))
    return found


def _mcp_variables(config: Config) -> list[Check]:
    """MCP servers whose ${VAR}s this environment lacks: the bot runs without them (no error for `config check`)."""
    found: list[Check] = []
    for server, wanted in sorted(config.mcp_unset().items()):
        unset = sorted(set(wanted))
        fix = f"set {', '.join(unset)} in the environment the bot runs with (until then the server does not start)"
        found.append(_warn(f"env mcp {server}", f"{', '.join(f'${{{n}}}' for n in unset)} not set", fix))
    return found


# --- the platforms ------------------------------------------------------------------------------------------------


class _Wire(BaseModel):
    model_config = ConfigDict(extra="ignore")


class TelegramUser(_Wire):
    id: int
    username: str | None = None


class TelegramAnswer(_Wire):
    ok: bool
    result: TelegramUser | None = None
    description: str | None = None


class DiscordUser(_Wire):
    id: str
    username: str


class DiscordApplication(_Wire):
    id: str
    name: str = ""
    flags: int = 0


class SlackAnswer(_Wire):
    ok: bool
    error: str | None = None
    user: str | None = None
    team: str | None = None


def _unreachable(name: str, root: str, error: httpx.HTTPError) -> Check:
    reason = "timed out" if isinstance(error, httpx.TimeoutException) else (str(error).splitlines() or [""])[0]
    detail = f"cannot reach {root}: {reason or type(error).__name__}"
    return _fail(name, detail, "check the network (and proxy) of this host, or the account's api_base_url")


def _status_text(response: httpx.Response) -> str:
    return f"HTTP {response.status_code}"


async def _telegram(client: httpx.AsyncClient, account: str, settings: TelegramAccount) -> list[Check]:
    name = f"telegram/{account}"
    root = (settings.api_base_url or TELEGRAM_ROOT).rstrip("/")
    try:
        response = await client.post(f"{root}/bot{settings.token}/getMe")
    except httpx.HTTPError as error:
        return [_unreachable(name, root, error)]
    if response.status_code == 401:
        fix = "get a new one from @BotFather (/token) and put it where the config reads it"
        return [_fail(name, f"token {mask(settings.token)} refused ({_status_text(response)})", fix)]
    if response.status_code == 404:
        detail = f"wrong api_base_url {root}: no Bot API there (HTTP 404), or a malformed token"
        fix = "api_base_url is the server's root (the bot adds /bot<token>); remove it for api.telegram.org"
        return [_fail(name, detail, fix)]
    try:
        answer = TelegramAnswer.model_validate_json(response.content)
    except ValidationError:
        return [_fail(name, f"{root} gave no Bot API answer ({_status_text(response)})", "check api_base_url")]
    if not answer.ok or answer.result is None:
        detail = f"getMe failed ({_status_text(response)}): {answer.description or 'no description'}"
        return [_fail(name, detail, "check the token with @BotFather")]
    return [_ok(name, f"@{answer.result.username or '?'} (id {answer.result.id}, {settings.mode})")]


async def _discord(client: httpx.AsyncClient, account: str, settings: DiscordAccount) -> list[Check]:
    name = f"discord/{account}"
    root = (settings.api_base_url or DISCORD_ROOT).rstrip("/")
    headers = {"Authorization": f"Bot {settings.token}"}
    try:
        response = await client.get(f"{root}/api/v10/users/@me", headers=headers)
    except httpx.HTTPError as error:
        return [_unreachable(name, root, error)]
    if response.status_code == 401:
        fix = "reset it in the Developer Portal (Bot page → Reset Token) and put it where the config reads it"
        return [_fail(name, f"token {mask(settings.token)} refused (HTTP 401)", fix)]
    if response.status_code == 429 or response.status_code >= 500:
        return [_fail(name, f"Discord answered {_status_text(response)}", "try again in a minute")]
    try:
        response.raise_for_status()
        user = DiscordUser.model_validate_json(response.content)
    except (httpx.HTTPStatusError, ValidationError):
        detail = f"{root}/api/v10/users/@me: no Discord answer ({_status_text(response)})"
        return [_fail(name, detail, "api_base_url is the server's root (the bot adds /api/v10); remove it for Discord")]
    found = [_ok(name, f"{user.username} (id {user.id})")]
    intent = f"{name} intent"
    try:
        response = await client.get(f"{root}/api/v10/applications/@me", headers=headers)
        response.raise_for_status()
        application = DiscordApplication.model_validate_json(response.content)
    except (httpx.HTTPError, ValidationError):
        return [*found, _warn(intent, "could not read the application's flags (GET /applications/@me)")]
    if application.flags & MESSAGE_CONTENT_FLAGS:
        return [*found, _ok(intent, "Message Content Intent is on")]
    detail = "Message Content Intent is off: the bot would see every message empty"
    fix = "enable Message Content Intent in the Developer Portal (Bot page → Privileged Gateway Intents)"
    return [*found, _fail(intent, detail, fix)]


async def _slack_call(
    client: httpx.AsyncClient, root: str, method: str, token: str
) -> tuple[SlackAnswer, httpx.Response]:
    response = await client.post(f"{root}/api/{method}", headers={"Authorization": f"Bearer {token}"})
    return SlackAnswer.model_validate_json(response.content), response


async def _slack(client: httpx.AsyncClient, account: str, settings: SlackAccount) -> list[Check]:
    name = f"slack/{account}"
    root = (settings.api_base_url or SLACK_ROOT).rstrip("/")
    bot_token = settings.bot_token.get_secret_value()
    try:
        auth, response = await _slack_call(client, root, "auth.test", bot_token)
    except httpx.HTTPError as error:
        return [_unreachable(name, root, error)]
    except ValidationError:
        return [_fail(name, f"{root}/api/auth.test: no Slack answer", "check api_base_url (the server's root)")]
    if not auth.ok:
        detail = f"bot token {mask(bot_token)} refused ({auth.error or 'no error given'})"
        fix = "copy the Bot User OAuth Token (xoxb-…) from OAuth & Permissions (reinstall the app if it was revoked)"
        return [_fail(name, detail, fix)]
    found = [_ok(name, f"{auth.user or '?'} in {auth.team or '?'}")]
    found.append(_scopes(f"{name} scopes", response.headers.get("x-oauth-scopes")))
    if settings.mode == "socket" and settings.app_token is not None:
        found.append(await _socket_mode(client, f"{name} socket", root, settings.app_token.get_secret_value()))
    return found


def _scopes(name: str, header: str | None) -> Check:
    if header is None:
        return _warn(name, "Slack did not say which scopes the bot token has (no x-oauth-scopes header)")
    granted = {scope.strip() for scope in header.split(",") if scope.strip()}
    required = [scope for scope in SLACK_REQUIRED_SCOPES if scope not in granted]
    optional = [scope for scope in SLACK_OPTIONAL_SCOPES if scope not in granted]
    fix = "add {} under OAuth & Permissions → Bot Token Scopes, then reinstall the app"
    if required:
        also = f" (and for some features {', '.join(optional)})" if optional else ""
        return _fail(name, f"missing scopes: {', '.join(required)}{also}", fix.format(", ".join(required + optional)))
    if optional:
        return _warn(name, f"missing scopes some features need: {', '.join(optional)}", fix.format(", ".join(optional)))
    return _ok(name, f"{len(granted)} scopes, all the adapter uses")


async def _socket_mode(client: httpx.AsyncClient, name: str, root: str, app_token: str) -> Check:
    try:
        answer, _ = await _slack_call(client, root, "apps.connections.open", app_token)
    except httpx.HTTPError as error:
        return _unreachable(name, root, error)
    except ValidationError:
        return _fail(name, f"{root}/api/apps.connections.open: no Slack answer", "check api_base_url")
    if answer.ok:
        return _ok(name, "Socket Mode: the app token opens a connection")
    detail = f"app token {mask(app_token)} refused ({answer.error or 'no error given'})"
    fix = "turn Socket Mode on, and make an app-level token (xapp-…) with connections:write under Basic Information"
    return _fail(name, detail, fix)


_Checker = Callable[[httpx.AsyncClient, str, Any], Awaitable[list[Check]]]
_PLATFORMS: dict[str, tuple[type[BaseModel], _Checker]] = {
    "telegram": (TelegramAccount, _telegram),
    "discord": (DiscordAccount, _discord),
    "slack": (SlackAccount, _slack),
}


async def _channels(config: Config, client: httpx.AsyncClient) -> list[Check]:
    pending: list[Awaitable[list[Check]]] = []
    for channel, account, raw in _accounts(config):
        if channel not in _PLATFORMS or config.unset_credentials(channel, account):
            continue  # another kind of channel has no token to check; an unset one is reported above
        model, check = _PLATFORMS[channel]
        try:
            settings = model.model_validate(raw)
        except ValidationError as error:
            detail = "invalid settings: " + "; ".join(item["msg"] for item in error.errors(include_url=False))
            pending.append(_done([_fail(f"{channel}/{account}", detail, "`bot config check` names the key")]))
            continue
        pending.append(check(client, account, settings))
    return [check for found in await asyncio.gather(*pending) for check in found]


async def _done(checks: list[Check]) -> list[Check]:
    return checks


# --- the state and the workspaces ---------------------------------------------------------------------------------


def _folder(name: str, path: Path) -> Check:
    """Whether `path` is a folder the bot can write in, or can be made as one."""
    if path.exists():
        if not path.is_dir():
            return _fail(name, f"{path} is not a folder", "move that file away, or point the setting elsewhere")
        try:
            with tempfile.TemporaryFile(dir=path):
                pass
        except OSError as error:
            fix = f"give the user the bot runs as write access to {path}"
            return _fail(name, f"{path}: cannot write ({error.strerror})", fix)
        return _ok(name, str(path))
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if parent.is_dir() and os.access(parent, os.W_OK | os.X_OK):
        return _ok(name, f"{path} (made at the first start)")
    fix = f"make {path} and let the user the bot runs as write there"
    return _fail(name, f"{path} does not exist and cannot be made ({parent} is not writable)", fix)


def _database(path: Path) -> Check:
    name = "state.db"
    if not path.exists():
        return _ok(name, f"{path} (made at the first start)")
    fix = (
        "stop the bot, move state.db (and state.db-wal, state.db-shm) aside, and restore a backup or start with a "
        "new one (sessions, pairing and pending work are lost)"
    )
    try:
        with contextlib.closing(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True, timeout=5)) as db:
            rows = db.execute("PRAGMA quick_check").fetchall()
            version = db.execute("PRAGMA user_version").fetchone()[0]
    except sqlite3.Error as error:
        return _fail(name, f"{path}: {error}", fix)
    problems = [str(row[0]) for row in rows if row[0] != "ok"]
    if problems:
        return _fail(name, f"{path}: quick_check found {len(problems)} problems: {problems[0]}", fix)
    if version > SCHEMA_VERSION:
        detail = f"{path}: schema version {version} is newer than this Switchboard ({SCHEMA_VERSION})"
        return _fail(name, detail, "upgrade Switchboard to the version that wrote it")
    return _ok(name, f"{path}: quick_check ok (schema {version})")


def _postgres(url: str) -> Check:
    """The PostgreSQL database of `state.url`: reachable, and its schema not newer than this Switchboard's."""
    import psycopg  # only for a config that keeps its state there

    from bot.store.postgres import SCHEMA_VERSION as PG_SCHEMA

    name = "state database"
    try:
        with psycopg.connect(url, connect_timeout=CONNECT_SECONDS) as db:
            found = db.execute("SELECT to_regclass('schema_version') IS NOT NULL").fetchone()
            row = db.execute("SELECT version FROM schema_version").fetchone() if found and found[0] else None
    except psycopg.Error as error:
        detail = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return _fail(name, f"cannot use PostgreSQL: {detail}", "check state.url (host, port, user, password, database)")
    version = int(row[0]) if row else 0
    if version > PG_SCHEMA:
        detail = f"schema version {version} is newer than this Switchboard ({PG_SCHEMA})"
        return _fail(name, detail, "upgrade Switchboard to the version that wrote it")
    return _ok(name, f"PostgreSQL reachable (schema {version}{'' if version else ': made at the first start'})")


def _storage(config: Config, state_dir: Path) -> list[Check]:
    if config.state.backend == "postgres" and config.state.url is not None:
        found = [_folder("state dir", state_dir), _postgres(config.state.url)]
    else:
        found = [_folder("state dir", state_dir), _database(state_dir / DB_FILE)]
    found += [_folder(f"workspace {agent.id}", config.workspace(agent.id)) for agent in config.agents]
    return found


# --- the models ---------------------------------------------------------------------------------------------------


def _model_refs(config: Config) -> list[str]:
    """Every model the agents use, without repeats (an agent without a usable model is a `config check` error)."""
    refs: list[str] = []
    for agent in config.agents:
        with contextlib.suppress(SetupError):
            refs += model_refs(config, agent.id)
    return list(dict.fromkeys(refs))


async def _ping(app: App, ref: str) -> Check:
    name = f"model {ref}"
    try:
        candidate = choose_model(app.config, ref)
    except SetupError as error:
        return _fail(name, str(error), "add the provider, or its key variable")
    provider = app.build_provider(candidate.provider_name, candidate.provider)
    request = ModelRequest(model=candidate.model_id, messages=[UserMessage.of("ping")], max_tokens=16)
    try:
        async with asyncio.timeout(MODEL_TIMEOUT):
            async for event in provider.stream(request):
                if isinstance(event, Completed):
                    return _ok(name, "answered")
        return _fail(name, "the stream ended without an answer", "check the provider's base_url")
    except ProviderError as error:
        return _model_error(name, candidate.provider_name, error)
    except TimeoutError:
        return _fail(name, f"no answer within {MODEL_TIMEOUT:.0f} s", "check the provider's base_url and status")
    finally:
        await provider.aclose()


def _model_error(name: str, provider: str, error: ProviderError) -> Check:
    first = (str(error).strip().splitlines() or [error.kind])[0]
    detail = f"{error.kind}{f' (HTTP {error.status})' if error.status else ''}: {first}"
    if error.kind == "rate_limit":
        return _warn(name, detail + " (the key was accepted)")
    fixes = {
        "auth": f"the key was refused: check providers.{provider}.api_key (or the variable it names)",
        "network": f"cannot reach providers.{provider}.base_url: check it and the network",
        "timeout": f"providers.{provider}.base_url did not answer in time",
        "bad_request": "check the model id (the part after the provider's name)",
    }
    return _fail(name, detail, fixes.get(error.kind, "see the provider's status page, then try again"))


async def _models(app: App, refs: list[str]) -> list[Check]:
    return list(await asyncio.gather(*(_ping(app, ref) for ref in refs)))


# --- all of it ----------------------------------------------------------------------------------------------------


async def diagnose(config_path: str, state_dir: Path, *, models: bool = False) -> tuple[list[Check], Redactor]:
    """Every check, in order: `bot config check`'s verdict (the same lines), then only what needs the network or
    this machine: MCP servers' variables this environment lacks, the channel accounts against their platforms (at
    once), the state and workspaces, the models (with `models`: one tiny request each). The Redactor knows every
    secret of the config, for what is printed."""
    config, errors, found = _load(config_path, state_dir)
    if config is None:
        return found, Redactor()
    redactor = Redactor(secrets_of(config))
    found += _mcp_variables(config)
    refs = _model_refs(config)
    async with httpx.AsyncClient(timeout=TIMEOUT) as client:
        channels = asyncio.create_task(_channels(config, client))
        storage = asyncio.create_task(asyncio.to_thread(_storage, config, state_dir))
        if models:
            found_models = await _models(App(config, state_dir), refs)
        elif errors:
            found_models = []  # the config's errors say what is missing; `ok models` would contradict them
        else:
            found_models = [_ok("models", f"{len(refs)} configured, each with its provider and key: {', '.join(refs)}")]
        found += await channels
        found += await storage
    return found + found_models, redactor
