"""What the settings models cannot see alone: checks across sections, secrets, readiness to run, workspaces."""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any, TypeVar

from pydantic import (
    BaseModel,
    ValidationError,
)

from agent.keys import key_variable
from agent.providers.config import providers_from_env, split_model
from bot.config.agents import AgentConfig
from bot.config.env import Substitution
from bot.config.errors import ConfigIssue, Loc, format_path
from bot.config.settings import BindingConfig, Config, user_ref
from bot.config.web import host_port, is_loopback
from bot.plugins import Plugins
from tools.mcp.settings import secret_entries
from tools.policy import unknown_config_entries
from tools.sandbox import BotFolders

_M = TypeVar("_M", bound=BaseModel)


def _valid_items(model: type[_M], items: Any) -> list[tuple[int, _M]]:
    """The list items that validate on their own, with their index (errors are reported elsewhere)."""
    valid = []
    for index, item in enumerate(items if isinstance(items, list) else []):
        try:
            valid.append((index, model.model_validate(item)))
        except ValidationError:
            continue
    return valid


def cross_checks(data: dict[str, Any], config: Config | None) -> list[tuple[Loc, str]]:
    """What one section cannot see: duplicate ids, several defaults, bindings naming missing agents.

    Without a valid `config`, runs on each list item that validates by itself, so these are found
    even when other parts of the file are broken.
    """
    problems: list[tuple[Loc, str]] = []
    if config is not None:
        agents, bindings = list(enumerate(config.agents)), list(enumerate(config.bindings))
    else:
        raw_agents = data.get("agents") or []
        agents = _valid_items(AgentConfig, raw_agents) if raw_agents else [(0, AgentConfig(id="main"))]
        bindings = _valid_items(BindingConfig, data.get("bindings")) if len(agents) == len(raw_agents or [0]) else []
    first_index: dict[str, int] = {}
    first_default: int | None = None
    for index, agent in agents:
        if agent.id in first_index:
            problems.append(
                (("agents", index, "id"), f"duplicate agent id {agent.id!r} (also agents[{first_index[agent.id]}])")
            )
        first_index.setdefault(agent.id, index)
        if agent.default and first_default is not None:
            problems.append(
                (("agents", index, "default"), f"only one agent may be the default (agents[{first_default}] is)")
            )
        if agent.default and first_default is None:
            first_default = index
    # (When an agent entry is broken, `bindings` is empty: that entry may be the one a binding names.)
    known = list(first_index)
    for index, binding in bindings:
        if binding.agent not in first_index:
            close = difflib.get_close_matches(binding.agent, known, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"agents are {', '.join(known)}"
            problems.append((("bindings", index, "agent"), f"no agent {binding.agent!r}; {hint}"))
    if config is not None and config.providers is not None:
        problems += _unknown_providers(config)
    if config is not None:
        problems += _unknown_mcp_agents(config, known)
        problems += _config_job_problems(config, known)
        problems += _web_problems(config)
    session = data.get("session")
    links = session.get("identity_links") if isinstance(session, dict) else None
    linked: dict[str, str] = {}
    for name, members in links.items() if isinstance(links, dict) else ():
        for index, member in enumerate(members if isinstance(members, list) else []):
            try:
                ref = user_ref(member)
            except ValueError:
                continue
            key = str(ref).lower()
            if key in linked and linked[key] != name:
                problems.append(
                    (("session", "identity_links", name, index), f"{ref} is already linked to {linked[key]!r}")
                )
            linked.setdefault(key, name)
    return problems


def _web_problems(config: Config) -> list[tuple[Loc, str]]:
    """`web`, `http_api` and `webhooks`: not facing the network unless `allow_remote` says so; each login's, key's and
    webhook's `owner` one of `owners` and `agent` one of the agents; the API and webhooks only with a listener."""
    problems: list[tuple[Loc, str]] = []
    web = config.web
    if web.listen is not None and not web.allow_remote and not is_loopback(host_port(web.listen)[0]):
        remote = f"{web.listen} is not a loopback address: set web.allow_remote: true (with TLS in front)"
        problems.append((("web", "listen"), remote))
    named: list[tuple[Loc, str | None]] = [
        (("web", "tokens", index, "owner"), login.owner) for index, login in enumerate(web.tokens)
    ]
    named += [(("http_api", "keys", index, "owner"), key.owner) for index, key in enumerate(config.http_api.keys)]
    named += [(("webhooks", index, "owner"), hook.owner) for index, hook in enumerate(config.webhooks)]
    owners = set(config.owners)  # as `user_ref` writes them
    for loc, owner in named:
        if owner is None:
            continue
        try:
            key = str(user_ref(owner))
        except ValueError as error:
            problems.append((loc, str(error)))
            continue
        if key not in owners:
            close = difflib.get_close_matches(key, sorted(owners), n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"owners are {', '.join(sorted(owners)) or 'none'}"
            problems.append((loc, f"{owner} is not one of `owners`; {hint}"))
    if web.listen is None and (config.http_api.keys or config.webhooks):
        section = "http_api" if config.http_api.keys else "webhooks"
        problems.append(((section,), "is served on the web listener: set web.listen (it is off)"))
    agents = [agent.id for agent in config.agents]
    sources: list[tuple[Loc, str | None]] = [
        (("http_api", "keys", index, "agent"), key.agent) for index, key in enumerate(config.http_api.keys)
    ]
    sources += [(("webhooks", index, "agent"), hook.agent) for index, hook in enumerate(config.webhooks)]
    for loc, agent in sources:
        if agent is not None and agent not in agents:
            problems.append((loc, f"no agent {agent!r}; agents are {', '.join(agents)}"))
    return problems


def _unknown_providers(config: Config) -> list[tuple[Loc, str]]:
    """Model names whose provider part is not configured (checked only when `providers:` exists)."""
    assert config.providers is not None
    refs: list[tuple[Loc, str]] = []
    if config.defaults.model:
        refs.append((("defaults", "model"), config.defaults.model))
    refs += [(("defaults", "fallbacks", index), ref) for index, ref in enumerate(config.defaults.fallbacks)]
    for number, agent in enumerate(config.agents):
        if agent.model:
            refs.append((("agents", number, "model"), agent.model))
        refs += [(("agents", number, "fallbacks", index), ref) for index, ref in enumerate(agent.fallbacks or [])]
    problems = []
    known = list(config.providers)
    for loc, ref in refs:
        name = split_model(ref)[0]
        if name not in config.providers:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"providers are {', '.join(known) or 'none'}"
            problems.append((loc, f"no provider {name!r}; {hint}"))
    return problems


SECRET_KEYS = frozenset({"token", "bot_token", "app_token", "signing_secret", "api_key", "api_keys", "webhook_secret"})


def secrets_of(config: Config) -> list[str]:
    """Every credential the config holds (channel tokens and secrets, provider keys): what the logs must not show."""
    providers = {name: provider.model_dump() for name, provider in (config.providers or {}).items()}
    found = [str(value) for _, value in _secrets({"channels": config.channels, "providers": providers})]
    database = [config.state.url] if config.state.url else []  # a database URL may hold its password
    logins = [login.token.get_secret_value() for login in config.web.tokens]
    logins += [key.key.get_secret_value() for key in config.http_api.keys]
    logins += [hook.secret.get_secret_value() for hook in config.webhooks]
    return found + database + logins + config._mcp_secrets


def mcp_secrets(env: Substitution) -> list[str]:
    """The MCP servers' credentials: their credential-looking `env` and `headers` values, and every value there that
    came from a ${VAR}."""
    section = env.data.get("mcp")
    found = [str(value) for _, value in secret_entries(section)]
    for path in env.from_env:
        if path[:2] == ("mcp", "servers") and len(path) == 5 and path[3] in ("env", "headers"):
            server = section["servers"][path[2]] if isinstance(section, dict) else None
            value = server[path[3]][path[4]] if isinstance(server, dict) else None
            found += [value] if isinstance(value, str) and value else []
    return found


def _config_job_problems(config: Config, known: list[str]) -> list[tuple[Loc, str]]:
    """`cron.jobs`: ids written once, agents that exist, and a `deliver` each (a file has no chat to answer in)."""
    problems: list[tuple[Loc, str]] = []
    seen: dict[str, int] = {}
    for index, job in enumerate(config.cron.jobs):
        if job.id in seen:
            problems.append(
                (("cron", "jobs", index, "id"), f"duplicate job id {job.id!r} (also cron.jobs[{seen[job.id]}])")
            )
        seen.setdefault(job.id, index)
        if job.id.startswith("heartbeat-"):
            problems.append((("cron", "jobs", index, "id"), "ids starting with heartbeat- are the agents' heartbeats'"))
        if job.agent is not None and known and job.agent not in known:
            close = difflib.get_close_matches(job.agent, known, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"agents are {', '.join(known)}"
            problems.append((("cron", "jobs", index, "agent"), f"no agent {job.agent!r}; {hint}"))
        if job.deliver is None:
            problems.append((("cron", "jobs", index), "a job in the file needs `deliver`, e.g. telegram:direct:12345"))
    return problems


def _unknown_mcp_agents(config: Config, known: list[str]) -> list[tuple[Loc, str]]:
    """`mcp.servers.<name>.agents` entries that name no agent."""
    problems: list[tuple[Loc, str]] = []
    for name, server in config.mcp.servers.items():
        for index, agent in enumerate(server.agents or []):
            if agent not in known:
                close = difflib.get_close_matches(agent, known, n=1)
                hint = f"did you mean {close[0]!r}?" if close else f"agents are {', '.join(known)}"
                problems.append((("mcp", "servers", name, "agents", index), f"no agent {agent!r}; {hint}"))
    return problems


def secret_paths(data: Any) -> list[Loc]:
    """Where the file holds a non-empty credential (under channels and providers)."""
    return [path for path, _ in _secrets(data)]


def _secrets(data: Any, path: Loc = ()) -> list[tuple[Loc, Any]]:
    """(where, value) of every non-empty credential under channels and providers; a list's items one by one."""
    found: list[tuple[Loc, Any]] = []
    if isinstance(data, dict):
        for key, value in data.items():
            here = (*path, key)
            if key in SECRET_KEYS and path[:1] in (("channels",), ("providers",)):
                values = value if isinstance(value, list) else [value]
                found += [((*here, i) if isinstance(value, list) else here, v) for i, v in enumerate(values) if v]
            else:
                found += _secrets(value, here)
    elif isinstance(data, list):
        for index, item in enumerate(data):
            found += _secrets(item, (*path, index))
    return found


def unreachable_bindings(config: Config) -> list[tuple[Loc, str]]:
    """Bindings without `account` on a channel that has accounts, none of them named `default`: they never match."""
    found: list[tuple[Loc, str]] = []
    for index, binding in enumerate(config.bindings):
        section = config.channels.get(binding.match.channel)
        accounts = section.get("accounts") if isinstance(section, dict) else None
        if binding.match.account is None and isinstance(accounts, dict) and accounts and "default" not in accounts:
            names = ", ".join(str(name) for name in accounts)
            found.append(
                (
                    ("bindings", index, "match"),
                    f"no account given, so it matches only the account `default`, which channels."
                    f"{binding.match.channel} does not have (accounts: {names}); add account: <id> or account: '*'",
                )
            )
    return found


def _issue_at(config: Config, loc: Loc, message: str, *, fatal: bool = True) -> ConfigIssue:
    line = config._line_of(loc) if config._line_of is not None else None
    return ConfigIssue(line, format_path(loc), message, fatal=fatal)


ENV_PROVIDERS = {"openrouter": "OPENROUTER_API_KEY", "openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}


def _model_locs(config: Config) -> list[tuple[Loc, str, bool]]:
    """(where, model ref, whether an agent starts with it) for every model the file names: defaults' and agents'."""
    refs: list[tuple[Loc, str, bool]] = []
    if config.defaults.model:
        used = any(agent.model is None for agent in config.agents)
        refs.append((("defaults", "model"), config.defaults.model, used))
    refs += [(("defaults", "fallbacks", index), ref, False) for index, ref in enumerate(config.defaults.fallbacks)]
    written = config._raw.get("agents") if isinstance(config._raw.get("agents"), list) else []
    for number, agent in enumerate(config.agents if written else []):
        if agent.model:
            refs.append((("agents", number, "model"), agent.model, True))
        refs += [
            (("agents", number, "fallbacks", index), ref, False) for index, ref in enumerate(agent.fallbacks or [])
        ]
        refs += [(("agents", number, "models", index), ref, False) for index, ref in enumerate(agent.models)]
    return refs


def _key_variables(config: Config, provider: str) -> list[str]:
    """The variables `providers.<name>.api_key` / `api_keys` read, as written (`${OPENROUTER_API_KEY:-}`)."""
    section = config._raw.get("providers")
    entry = section.get(provider) if isinstance(section, dict) else None
    found: list[str] = []
    for key in ("api_key", "api_keys"):
        value = entry.get(key) if isinstance(entry, dict) else None
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str):
                found += re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)", item)
    return found


def owner_channels(config: Config, channels: Collection[str]) -> list[ConfigIssue]:
    """Owners on a channel that is none of `channels` (the channels a file can serve): a mistyped one would make
    nobody an owner, so approvals would wait for no one."""
    found: list[ConfigIssue] = []
    for index, owner in enumerate(config.owners):
        channel = owner.partition(":")[0]
        if channel not in channels:
            close = difflib.get_close_matches(channel, sorted(channels), n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"channels are {', '.join(sorted(channels))}"
            found.append(_issue_at(config, ("owners", index), f"{owner}: there is no channel {channel!r}; {hint}"))
    return found


def readiness(config: Config, environ: Mapping[str, str]) -> list[ConfigIssue]:
    """What the schema cannot see but `bot run` meets: agents without a model, models of providers that do not
    exist, providers without their key, channel accounts without their token."""
    found: list[ConfigIssue] = []
    written = isinstance(config._raw.get("agents"), list) and bool(config._raw.get("agents"))
    for number, agent in enumerate(config.agents):
        if config.model_for(agent.id) is None:
            loc: Loc = ("agents", number) if written else ("defaults",)
            found.append(
                _issue_at(
                    config,
                    loc,
                    f"agent {agent.id!r} has no model: set model: <provider>/<model-id> here or defaults.model "
                    "(e.g. openrouter/anthropic/claude-sonnet-4)",
                )
            )
    from_env = providers_from_env(environ) if config.providers is None else {}
    keyless: dict[str, tuple[Loc, list[str]]] = {}
    for loc, ref, primary in _model_locs(config):
        name = split_model(ref)[0]
        if config.providers is None and name not in ENV_PROVIDERS:
            close = difflib.get_close_matches(name, list(ENV_PROVIDERS), n=1)
            hint = f"did you mean {close[0]!r}?" if close else "add it under providers:"
            message = (
                f"no provider {name!r}; {hint} (without a providers: section, openrouter, openai and anthropic "
                "come from their *_API_KEY variables)"
            )
            found.append(_issue_at(config, loc, message))
            continue
        provider = (config.providers or {}).get(name) or from_env.get(name)
        if provider is not None and (provider.keys() or not provider.wants_key()):
            continue
        if provider is None and config.providers is not None:
            continue  # no such provider: cross_checks reported it
        if config.providers is not None:
            variables = _key_variables(config, name) or [key_variable(name)]
            entry = (config._raw.get("providers") or {}).get(name)
            where: Loc = (
                ("providers", name, "api_key")
                if isinstance(entry, dict) and "api_key" in entry
                else ("providers", name)
            )
        else:
            variables, where = [ENV_PROVIDERS[name]], loc
        if primary:
            keyless.setdefault(name, (where, variables))
    for name, (where, variables) in keyless.items():
        users = [agent.id for agent in config.agents if (config.model_for(agent.id) or "/").split("/")[0] == name]
        names = " or ".join(variables)
        message = (
            f"provider {name!r} has no API key: set {names} (in the environment or .env beside this file); "
            f"{'agents' if len(users) > 1 else 'agent'} {', '.join(users)} cannot answer without it"
        )
        found.append(_issue_at(config, where, message, fatal=False))
    for loc, variables in config._unset_paths.items():
        unset = ", ".join(f"${{{name}}}" for name in variables)
        account = format_path(loc[:4]) if len(loc) >= 4 else format_path(loc[:2])
        message = (
            f"environment variable {unset} is not set: `bot run` skips {account} until it is (set it in the "
            "environment or in .env beside this file)"
        )
        found.append(_issue_at(config, loc, message, fatal=False))
    return found


def unmatched_names(config: Config, plugins: Plugins) -> list[ConfigIssue]:
    """Names that match nothing, so a line of the file silently does nothing: tool names and groups in the policy
    lists, and binding accounts that no channel defines."""
    from tools.builtins import NoChats, nobody_to_ask
    from tools.exec import ProcessTable
    from tools.registry import ToolRegistry, ToolSetup

    found: list[ConfigIssue] = []
    registry = ToolRegistry()
    setup = ToolSetup(NoChats(), nobody_to_ask, ProcessTable())
    for _, factory in plugins.tool_factories():
        try:
            for tool in factory(setup):
                registry.register(tool)
        except Exception:  # a plugin that cannot build its tools here is `bot tools`' to report
            continue
    groups = set(registry.group_names()) | {"group:mcp", *(f"mcp:{name}" for name in config.mcp.servers)}
    prefixes = [f"{name.lower()}__" for name in config.mcp.servers]
    agents = [(index, agent.tools) for index, agent in enumerate(config.agents)] if config._raw.get("agents") else []
    for entry in unknown_config_entries(registry.known_names(), groups, config.tools, agents, prefixes):
        found.append(_issue_at(config, entry.loc, entry.message))
    for index, binding in enumerate(config.bindings):
        account = binding.match.account
        section = config.channels.get(binding.match.channel)
        accounts = section.get("accounts") if isinstance(section, dict) else None
        here: Loc = ("bindings", index, "match", "account") if account is not None else ("bindings", index, "match")
        if binding.match.channel == "console" and account in (None, "default", "*"):
            continue  # `bot chat`, and `bot run` at a terminal without channels, serve it unconfigured
        if not isinstance(accounts, dict) or not accounts:
            message = (
                f"channels.{binding.match.channel} defines no account, so this binding matches nothing "
                f"(add channels.{binding.match.channel}.accounts)"
            )
            found.append(_issue_at(config, ("bindings", index, "match", "channel"), message))
        elif account is not None and account != "*" and account not in {str(name) for name in accounts}:
            names = [str(name) for name in accounts]
            close = difflib.get_close_matches(account, names, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"accounts are {', '.join(names)}"
            message = f"no account {account!r} under channels.{binding.match.channel}.accounts; {hint}"
            found.append(_issue_at(config, here, message))
    return found


def own_files(config: Config, state_dir: Path) -> list[str]:
    """The bot's own files, which no command may name: the config file and the state directory."""
    return [os.path.realpath(path) for path in (config.file, state_dir) if path is not None]


def bot_folders(config: Config, state_dir: Path) -> BotFolders:
    """The folders no command and no MCP server may see or move: the config's (the config, `.env`, whatever else
    the bot reads there) and the state directory."""
    folder = os.path.realpath(config.file.parent) if config.file is not None else None
    return BotFolders(config=folder, state=os.path.realpath(state_dir))


def workspace_conflicts(config: Config, state_dir: Path) -> list[ConfigIssue]:
    """Agents whose workspace holds the config file or the state directory, is the state directory or lies inside
    it (each worded as it is): the agent's own tools could rewrite its policy, its approvals or its transcripts
    there."""
    own = [("the state directory", Path(os.path.realpath(state_dir)))]
    if config.file is not None:
        own.insert(0, ("the config file", Path(os.path.realpath(config.file))))
    found = []
    for index, agent in enumerate(config.agents):
        workspace = Path(os.path.realpath(config.workspace(agent.id)))
        for what, path in own:
            if path == workspace:
                where = f"is {what}"
            elif path.is_relative_to(workspace):
                where = f"holds {what} {path}"
            elif workspace.is_relative_to(path):  # only a folder (the state directory) has an inside
                where = f"lies inside {what} {path}"
            else:
                continue
            loc: Loc = ("agents", index, "workspace") if agent.workspace else ("defaults", "workspace_root")
            message = (
                f"agent {agent.id!r}: the workspace {workspace} {where}, so the agent could rewrite its own rules; "
                "give it a folder of its own (e.g. workspace: workspaces/" + agent.id + ")"
            )
            line = config._line_of(loc) if config._line_of is not None else None
            found.append(ConfigIssue(line, format_path(loc), message))
    return found


def sandbox_warnings(config: Config) -> list[ConfigIssue]:
    """An agent whose commands are sandboxed but whose sandbox cannot run here: they would all be refused."""
    from tools.sandbox import process_limit_enforced, sandbox_problem_sync

    found = []
    for index, agent in enumerate(config.agents):
        settings = agent.sandbox
        if settings.mode == "off":
            continue
        problem = sandbox_problem_sync(settings)
        if problem is not None:
            message = f"agent {agent.id!r}: its sandboxed commands will be refused: {problem}"
            found.append(ConfigIssue(None, f"agents[{index}].sandbox", message))
        elif settings.backend == "bwrap" and not process_limit_enforced():
            message = (
                f"agent {agent.id!r}: max_processes cannot be enforced: the bot runs as root and cannot make a "
                "pids cgroup (run the bot as another user)"
            )
            found.append(ConfigIssue(None, f"agents[{index}].sandbox", message))
    return found
