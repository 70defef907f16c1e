"""`bindings.yaml`: the one config file, read, checked and turned into typed settings and a router."""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from agent.images import DEFAULT_IMAGE_TURNS
from agent.keys import key_variable
from agent.lanes import QueueSettings
from agent.providers.config import ProviderConfig, http_url, providers_from_env, split_model
from bot.config_errors import ConfigError, ConfigIssue, Loc, format_path, issues_from_validation
from bot.config_plugins import check_channels, check_providers
from bot.env_vars import Substitution, load_env_file, substitute_env, with_env_file
from bot.heartbeats import HeartbeatConfig
from bot.plugins import Plugins
from bot.redaction import Redactor
from bot.schedules import Job as ScheduledJob
from bot.schedules import duration_seconds
from routing import Binding as RoutingBinding
from routing import (
    DmScope,
    Peer,
    Router,
    binding_tier,
    normalize_account,
    normalize_agent_id,
    normalize_peer_kind,
)
from tools.base import CrossChat
from tools.clock import zone
from tools.exec_policy import ExecSettings
from tools.mcp.settings import McpSettings, secret_entries
from tools.policy import AgentToAgent, AgentToolsConfig, ToolsConfig, unknown_config_entries
from tools.sandbox import BotFolders, SandboxSettings
from tools.yaml_tree import parse_yaml

DEFAULT_CONFIG = "bindings.yaml"
_CHANNEL = re.compile(r"^[a-z0-9][a-z0-9_-]*$")


def _id(value: object) -> object:
    if isinstance(value, bool):
        raise ValueError("must be an id (text or a number), not true/false")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        text = value.strip()
        if not text:
            raise ValueError("must not be empty")
        return text
    raise ValueError("must be an id (text or a number)")


def _name(value: object) -> object:
    text = _id(value)
    return normalize_agent_id(text) if isinstance(text, str) else text


def _channel(value: object) -> object:
    if not isinstance(value, str):
        return value
    text = value.strip().lower()
    if not _CHANNEL.match(text):
        raise ValueError("must be a channel name such as telegram, discord or slack")
    return text


def _account(value: object) -> object:
    text = _id(value)
    if not isinstance(text, str) or text == "*":
        return text
    return normalize_account(text)


def _peer_kind(value: object) -> object:
    if isinstance(value, str):
        try:
            return normalize_peer_kind(value)
        except ValueError:
            return value  # the Literal check below reports it with the valid choices
    return value


def _user_ref(value: object) -> object:
    if not isinstance(value, str):
        return value
    channel, sep, user = value.strip().partition(":")
    if not sep or not channel.strip() or not user.strip():
        raise ValueError("must be <channel>:<user id>, e.g. telegram:123456789")
    return f"{channel.strip().lower()}:{user.strip()}"


def _model_ref(value: object) -> object:
    if not isinstance(value, str):
        return value
    split_model(value)  # ValueError names the expected shape
    return value.strip()


def _time_zone(value: object) -> object:
    if not isinstance(value, str):
        return value
    zone(value.strip())  # ValueError names an unknown zone
    return value.strip()


Id = Annotated[str, BeforeValidator(_id)]
# An IANA time zone name (Europe/Berlin, UTC): the zone an agent's message stamps and prompt are written in.
TimeZone = Annotated[str, BeforeValidator(_time_zone)]
ModelRef = Annotated[str, BeforeValidator(_model_ref)]
# Agent ids and identity names: lowercase, and safe inside session keys and file paths.
Name = Annotated[str, BeforeValidator(_name)]
ChannelName = Annotated[str, BeforeValidator(_channel)]
AccountMatch = Annotated[str, BeforeValidator(_account)]
PeerKindName = Annotated[Literal["direct", "group", "channel"], BeforeValidator(_peer_kind)]
UserRef = Annotated[str, BeforeValidator(_user_ref)]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


_M = TypeVar("_M", bound=BaseModel)


class ExecConfig(ExecSettings):
    """`agents[].exec`: when the agent's shell commands run at once, need a person's approval, or never run."""

    approvers: list[UserRef] | None = None  # `channel:sender_id`; None: the config's owners


class ApprovalsConfig(_Section):
    """How approval requests are shown and how long they wait."""

    timeout_seconds: float = Field(default=1800, gt=0)  # then the request expires, which denies
    target: Literal["chat", "dm", "both"] = "chat"  # the chat the run is in, each approver's DM, or both


class LimitsConfig(_Section):
    """`agents[].limits`: how long a run someone who is not an owner started may take."""

    non_owner_timeout_seconds: float = Field(default=120, gt=0)


class StateConfig(_Section):
    """`state`: where the state is kept — `state.db` in the state directory (sqlite, the default) or a PostgreSQL
    database (`url`, e.g. `${DATABASE_URL}`) — and how long finished records (the journal, sent replies, settled
    approvals) are kept."""

    backend: Literal["sqlite", "postgres"] = "sqlite"
    url: str | None = Field(default=None, repr=False)  # postgres: a libpq URL, postgresql://user:pass@host/db
    retention_days: float = Field(default=30, ge=1)  # at least a day: the journal also stops duplicate deliveries

    @model_validator(mode="after")
    def _url_for_postgres(self) -> StateConfig:
        if self.backend == "postgres" and not self.url:
            raise ValueError("backend postgres needs url (e.g. url: ${DATABASE_URL})")
        return self


class LanesConfig(_Section):
    """`lanes`: how run slots are shared between the people who talk to the bot, and how long running turns get to
    finish when the bot stops."""

    per_sender: int = Field(default=2, ge=1)  # runs at once for one non-owner, across all chats
    stop_grace: Duration = 10.0  # at SIGTERM/SIGINT, running turns get this long to finish before they are cancelled


class MessageConfig(_Section):
    """`agents[].message`: where the message tool may act. `cross_chat`: whose runs may act in another chat than
    the one (and thread) they were started from: the owners' (default), everyone's, or nobody's."""

    cross_chat: CrossChat = "owners"


class MemoryConfig(_Section):
    """`agents[].memory`: what a non-owner's run sees of the agent's files and memory."""

    # sender: a non-owner's run works in its own folder, <workspace>/senders/<channel>-<id>/, and sees nothing
    # else; agent: non-owners share the whole workspace with the owners. Either way, what non-owners wrote reaches
    # an owner's run only wrapped as untrusted content naming them (tools.provenance).
    scope: Literal["agent", "sender"] = "sender"


def _skill_glob(value: object) -> object:
    if isinstance(value, str) and not value.strip():
        raise ValueError("must be a skill name or a glob such as git-*")
    return value.strip() if isinstance(value, str) else value


SkillGlob = Annotated[str, BeforeValidator(_skill_glob)]


class SkillsConfig(_Section):
    """`skills`: folders of skill folders (each holding a SKILL.md) offered after the workspace's own `skills/`,
    in this order; relative paths are taken from the config's folder."""

    dirs: list[str] = Field(default_factory=list)


class AgentSubagentsConfig(_Section):
    """`agents[].subagents`: which other agents this agent's `sessions_spawn` may start (`*`: any); it may always
    start itself."""

    allow: list[Name] = Field(default_factory=list)


class SubagentsConfig(_Section):
    """`subagents`: how many children `sessions_spawn` may have running, how deep they may nest, how long each may
    take."""

    max_concurrent: int = Field(default=4, ge=1)  # children running at once per parent session
    max_total: int = Field(default=8, ge=1)  # children running at once in the whole bot
    max_depth: int = Field(default=1, ge=1, le=5)  # 1: a child cannot spawn; 2: its children can't, and so on
    timeout_seconds: float = Field(default=600, gt=0)  # a child's time limit unless the spawn asks for less


CommandAccess = Literal["owners", "own", "everyone"]


class CommandsConfig(_Section):
    """`agents[].commands`: who may use the chat commands that change a conversation. `owners`: only the bot's
    owners; `own`: the owners, and anyone else for what is theirs alone (`/stop` their own running answer and queued
    messages; `/new` and `/queue` a conversation only they have talked in, such as their DM); `everyone`: anyone the
    bot answers. The ones that change what a conversation costs (`model`, `think`) are the owners' by default."""

    stop: CommandAccess = "own"
    new: CommandAccess = "own"  # /new and /reset
    queue: CommandAccess = "own"
    model: CommandAccess = "owners"
    think: CommandAccess = "owners"


class AgentConfig(_Section):
    """One agent: an id, and what it does not inherit from `defaults`."""

    id: Name
    default: bool = False
    model: ModelRef | None = None
    fallbacks: list[ModelRef] | None = None
    models: list[ModelRef] = Field(default_factory=list)  # more models `/model` may switch a session to
    workspace: str | None = None
    tools: AgentToolsConfig | None = None
    timeout_seconds: float | None = Field(default=None, gt=0)
    timezone: TimeZone | None = None
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    exec: ExecConfig = Field(default_factory=ExecConfig)
    sandbox: SandboxSettings = Field(default_factory=SandboxSettings)
    message: MessageConfig = Field(default_factory=MessageConfig)
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    skills: list[SkillGlob] | None = None  # the skills offered, by name or glob; None: all of them
    heartbeat: HeartbeatConfig | None = None  # a periodic turn that speaks up only when something needs a person
    subagents: AgentSubagentsConfig = Field(default_factory=AgentSubagentsConfig)
    commands: CommandsConfig = Field(default_factory=CommandsConfig)


class Defaults(_Section):
    """What every agent inherits unless it sets its own."""

    model: ModelRef | None = None
    fallbacks: list[ModelRef] = Field(default_factory=list)
    workspace_root: str = "workspaces"
    max_tool_iterations: int = Field(default=50, ge=1)
    max_concurrent: int = Field(default=4, ge=1)  # runs at once across all sessions
    timeout_seconds: float = Field(default=600, gt=0)  # a run is cancelled after this long
    timezone: TimeZone | None = None  # IANA name for message stamps and the prompt; default: the host's zone


class PeerMatch(_Section):
    kind: PeerKindName
    id: Id


class Match(_Section):
    """What a message must have for its binding to apply; every field set must match."""

    channel: ChannelName
    account: AccountMatch | None = None
    peer: PeerMatch | None = None
    guild: Id | None = None
    team: Id | None = None
    roles: list[Id] | None = None

    @model_validator(mode="after")
    def _has_a_tier(self) -> Match:
        binding_tier(account=self.account, peer=self.peer_value, guild=self.guild, team=self.team, roles=self.roles)
        return self

    @property
    def peer_value(self) -> Peer | None:
        return Peer(self.peer.kind, self.peer.id) if self.peer else None


class BindingConfig(_Section):
    """Route messages that match `match` to `agent`."""

    agent: Name
    match: Match

    def to_routing(self) -> RoutingBinding:
        match = self.match
        return RoutingBinding(
            agent=self.agent,
            channel=match.channel,
            account=match.account,
            peer=match.peer_value,
            guild=match.guild,
            team=match.team,
            roles=tuple(match.roles or ()),
        )


class SessionConfig(_Section):
    """How messages are grouped into conversations."""

    dm_scope: DmScope = "per-channel-peer"
    identity_links: dict[Name, list[UserRef]] = Field(default_factory=dict)
    queue: QueueSettings = Field(default_factory=QueueSettings)


class TranscriptionConfig(_Section):
    """`media.transcription`: an OpenAI-compatible `/audio/transcriptions` endpoint for voice notes and audio."""

    base_url: Annotated[str, AfterValidator(http_url)]
    model: str = "whisper-1"
    api_key: str | None = None  # `${VAR}`; sent as a bearer token, to this endpoint only
    timeout_seconds: float = Field(default=120, gt=0)


class MediaConfig(_Section):
    """`media`: what becomes of the files people send, beyond each account's limits."""

    transcription: TranscriptionConfig | None = None  # None: voice notes reach the agent as files, untranscribed
    image_turns: int = Field(default=DEFAULT_IMAGE_TURNS, ge=0)  # the latest user turns whose images are shown


def _duration(value: object) -> object:
    if isinstance(value, bool):
        raise ValueError("must be a duration such as 30s, 10m or 1h")
    if isinstance(value, str):  # the file's scalars arrive as text: `90` and `0.5` are seconds too
        text = value
        try:
            value = float(text)
        except ValueError:
            return float(duration_seconds(text))
    if isinstance(value, int | float):
        if not math.isfinite(value):
            raise ValueError("must be a duration such as 30s, 10m or 1h")
        if value < 0:
            raise ValueError("must not be negative")
        return float(value)
    return value


Duration = Annotated[float, BeforeValidator(_duration)]  # seconds; written as 30s, 10m, 1h (or a number)


class CronConfig(_Section):
    """`cron`: jobs written in the file (each needs `deliver`), and how late a missed tick may still run at start."""

    catch_up: Duration = 3600.0  # a tick missed while the bot was down runs once at start if younger than this
    jobs: list[ScheduledJob] = Field(default_factory=list)


class HealthConfig(_Section):
    """`health`: whether the owners hear of a channel that stays down, and after how long."""

    notify_owners: bool = False  # one DM to each owner when a channel stays down past `notify_after`, one on recovery
    notify_after: Duration = 300.0


class AdminConfig(_Section):
    """`admin`: a listener for monitoring (`/healthz`, `/metrics` in Prometheus' format); off unless `listen` is set."""

    listen: str | None = None  # host:port, e.g. 127.0.0.1:9464 (keep it on loopback or behind a firewall)

    @field_validator("listen")
    @classmethod
    def _host_port(cls, value: str | None) -> str | None:
        if value is None:
            return None
        host, _, port = value.strip().rpartition(":")
        if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ValueError("must be host:port, e.g. 127.0.0.1:9464")
        return value.strip()


class RecoveryConfig(_Section):
    """`recovery`: what a start does with work left from before. Replies still unsent and messages still unanswered
    older than `max_age` are not sent or run (a person gets one line saying the bot was offline)."""

    max_age: Duration = 3600.0


class Config(_Section):
    """The whole of bindings.yaml, validated. Build it with `load_config`."""

    agents: list[AgentConfig] = Field(default_factory=list)
    defaults: Defaults = Field(default_factory=Defaults)
    bindings: list[BindingConfig] = Field(default_factory=list)
    session: SessionConfig = Field(default_factory=SessionConfig)
    owners: list[UserRef] = Field(default_factory=list)
    channels: dict[str, Any] = Field(default_factory=dict)
    providers: dict[Name, ProviderConfig] | None = None  # None: taken from *_API_KEY variables at run time
    tools: ToolsConfig | None = None  # None: the full profile, nothing removed
    approvals: ApprovalsConfig = Field(default_factory=ApprovalsConfig)
    lanes: LanesConfig = Field(default_factory=LanesConfig)
    state: StateConfig = Field(default_factory=StateConfig)
    media: MediaConfig = Field(default_factory=MediaConfig)
    mcp: McpSettings = Field(default_factory=McpSettings)
    skills: SkillsConfig = Field(default_factory=SkillsConfig)
    cron: CronConfig = Field(default_factory=CronConfig)
    subagents: SubagentsConfig = Field(default_factory=SubagentsConfig)
    health: HealthConfig = Field(default_factory=HealthConfig)
    admin: AdminConfig = Field(default_factory=AdminConfig)
    recovery: RecoveryConfig = Field(default_factory=RecoveryConfig)

    _base_dir: Path = PrivateAttr(default_factory=Path.cwd)
    _written: dict[str, Any] = PrivateAttr(default_factory=dict)  # the file's data as written (${VAR} replaced)
    # Channel credentials whose ${VAR} is unset: that account is skipped at run time, not a config error.
    _unset_credentials: dict[tuple[str, str], list[str]] = PrivateAttr(default_factory=dict)
    # MCP servers whose `env` or `headers` name an unset ${VAR}: they do not start (`bot mcp list` says why).
    _unset_mcp: dict[str, list[str]] = PrivateAttr(default_factory=dict)
    _mcp_secrets: list[str] = PrivateAttr(default_factory=list)  # their credentials, kept out of the logs
    # Secrets written into the file instead of `${VAR}`: `bot config check` warns about each.
    _warnings: list[ConfigIssue] = PrivateAttr(default_factory=list)
    _workspaces: dict[str, Path] = PrivateAttr(default_factory=dict)
    _file: Path | None = PrivateAttr(default=None)  # the file it was loaded from
    _line_of: Callable[[Loc], int | None] | None = PrivateAttr(default=None)  # where each key is written
    _unset_paths: dict[Loc, list[str]] = PrivateAttr(default_factory=dict)  # channel settings lacking their ${VAR}
    _raw: dict[str, Any] = PrivateAttr(default_factory=dict)  # the file's data before ${VAR} substitution

    @model_validator(mode="before")
    @classmethod
    def _empty_sections_are_absent(cls, data: Any) -> Any:
        # `bindings:` with every entry commented out reads as null; treat it as not written.
        if isinstance(data, dict):
            return {key: value for key, value in data.items() if value is not None}
        return data

    @model_validator(mode="after")
    def _implicit_defaults(self) -> Config:
        if not self.agents:
            self.agents = [AgentConfig(id="main", default=True)]
        if not self.providers:
            self.providers = None  # `providers: {}` is the same as no section: keys come from the environment
        return self

    @property
    def default_agent(self) -> str:
        """The agent marked `default: true`, else the first agent."""
        return next((agent.id for agent in self.agents if agent.default), self.agents[0].id)

    def agent(self, agent_id: str) -> AgentConfig:
        """The agent with this id; KeyError if there is none."""
        for agent in self.agents:
            if agent.id == agent_id:
                return agent
        raise KeyError(agent_id)

    def workspace(self, agent_id: str) -> Path:
        """The agent's workspace: its own, else `<defaults.workspace_root>/<id>`, from the config's folder."""
        if agent_id not in self._workspaces:  # resolving costs syscalls, and every turn asks
            own = self.agent(agent_id).workspace
            path = Path(own) if own else Path(self.defaults.workspace_root) / agent_id
            self._workspaces[agent_id] = (self._base_dir / path.expanduser()).resolve()
        return self._workspaces[agent_id]

    def skill_dirs(self) -> list[Path]:
        """`skills.dirs`, each taken from the config's folder (`~` expanded)."""
        return [(self._base_dir / Path(folder).expanduser()).resolve() for folder in self.skills.dirs]

    def has_setting(self, key: str) -> bool:
        """Whether the dotted `key` (`channels.slack`, `media.transcription.model`) is written in the file with a
        value that is not empty, null or false: what a skill's `requires.config` asks for."""
        value: Any = self._written
        for part in key.split("."):
            if isinstance(value, list) and part.isdigit() and int(part) < len(value):
                value = value[int(part)]
            elif isinstance(value, dict) and part in value:
                value = value[part]
            else:
                return False
        if isinstance(value, str):
            return value.strip().lower() not in ("", "false", "no", "off", "0")
        return value not in (None, False, [], {})

    @property
    def file(self) -> Path | None:
        """The file the config was loaded from (None when it was parsed from text)."""
        return self._file

    @property
    def warnings(self) -> list[ConfigIssue]:
        """What is allowed but unwise, such as a secret written into the file."""
        return list(self._warnings)

    @property
    def agent_to_agent(self) -> AgentToAgent:
        """`tools.agent_to_agent`, its defaults when the file has no `tools` section."""
        return self.tools.agent_to_agent if self.tools is not None else AgentToAgent()

    def exec_for(self, agent_id: str) -> ExecConfig:
        """The agent's exec policy (`agents[].exec`)."""
        return self.agent(agent_id).exec

    def timeout_for(self, agent_id: str, *, owner: bool = True) -> float:
        """Seconds a run of this agent may take before it is cancelled; a run a non-owner started gets at most
        `agents[].limits.non_owner_timeout_seconds`."""
        timeout = self.agent(agent_id).timeout_seconds or self.defaults.timeout_seconds
        return timeout if owner else min(timeout, self.agent(agent_id).limits.non_owner_timeout_seconds)

    def unset_credentials(self, channel: str, account: str) -> list[str]:
        """The environment variables a channel account needs that are not set (empty: the account can start)."""
        return self._unset_credentials.get((channel, account), []) + self._unset_credentials.get((channel, "*"), [])

    def mcp_unset(self) -> dict[str, list[str]]:
        """For each MCP server that cannot start for it, the environment variables its `env` or `headers` lack."""
        return {name: list(names) for name, names in self._unset_mcp.items()}

    def timezone_for(self, agent_id: str) -> str | None:
        """The agent's IANA time zone, else the default one; None: the host's zone."""
        return self.agent(agent_id).timezone or self.defaults.timezone

    def model_for(self, agent_id: str) -> str | None:
        """The agent's model, else the default model."""
        return self.agent(agent_id).model or self.defaults.model

    def fallbacks_for(self, agent_id: str) -> list[str]:
        """The models to try, in order, when the agent's model fails: its own list, else the default list."""
        own = self.agent(agent_id).fallbacks
        return list(own if own is not None else self.defaults.fallbacks)

    def provider(self, name: str, environ: Mapping[str, str] | None = None) -> ProviderConfig:
        """The named provider from `providers:`, or from the environment when there is no such section.

        KeyError with a message that says how to configure it.
        """
        if self.providers is not None:
            if name in self.providers:
                return self.providers[name]
            known = ", ".join(self.providers) or "none"
            raise KeyError(f"no provider {name!r} in bindings.yaml (providers: {known})")
        found = providers_from_env(os.environ if environ is None else environ)
        if name in found:
            return found[name]
        hint = {"openrouter": "OPENROUTER_API_KEY", "openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
        if name in hint:
            raise KeyError(f"provider {name!r} needs {hint[name]} in the environment, or a providers: section")
        raise KeyError(f"no provider {name!r}: add it under providers: in bindings.yaml")

    def router(self) -> Router:
        """A resolver indexed over every binding, built once per loaded config."""
        return Router(
            (binding.to_routing() for binding in self.bindings),
            default_agent=self.default_agent,
            dm_scope=self.session.dm_scope,
            identity_links=self.session.identity_links,
        )


def _valid_items(model: type[_M], items: Any) -> list[tuple[int, _M]]:
    """The list items that validate on their own, with their index (errors are reported elsewhere)."""
    valid = []
    for index, item in enumerate(items if isinstance(items, list) else []):
        try:
            valid.append((index, model.model_validate(item)))
        except ValidationError:
            continue
    return valid


def _cross_checks(data: dict[str, Any], config: Config | None) -> list[tuple[Loc, str]]:
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
    session = data.get("session")
    links = session.get("identity_links") if isinstance(session, dict) else None
    linked: dict[str, str] = {}
    for name, members in links.items() if isinstance(links, dict) else ():
        for index, member in enumerate(members if isinstance(members, list) else []):
            try:
                ref = _user_ref(member)
            except ValueError:
                continue
            key = str(ref).lower()
            if key in linked and linked[key] != name:
                problems.append(
                    (("session", "identity_links", name, index), f"{ref} is already linked to {linked[key]!r}")
                )
            linked.setdefault(key, name)
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
    return found + database + config._mcp_secrets


def _mcp_secrets(env: Substitution) -> list[str]:
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


def _secret_paths(data: Any) -> list[Loc]:
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


def _unreachable_bindings(config: Config) -> list[tuple[Loc, str]]:
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


def parse_config(
    text: str, file: str = DEFAULT_CONFIG, environ: Mapping[str, str] | None = None, plugins: Plugins | None = None
) -> Config:
    """Validate config text; raises ConfigError listing every problem with its line and key path. Channel accounts
    and providers are checked by their plugins (`plugins`, else the installed ones)."""
    config, issues = _parse(text, file, environ, plugins)
    if config is None:
        raise ConfigError(file, issues)
    return config


def _parse(
    text: str, file: str, environ: Mapping[str, str] | None, plugins: Plugins | None
) -> tuple[Config | None, list[ConfigIssue]]:
    """The config and no issues, or None and every issue found (each with its line and key path)."""
    tree = parse_yaml(text)
    issues = [ConfigIssue(p.line, format_path(p.path), p.message) for p in tree.problems]
    issues = [_yaml_syntax(text) or issue if issue.message.startswith("invalid YAML") else issue for issue in issues]
    if tree.data is None and not issues:
        tree.data = {}
    if not isinstance(tree.data, dict):
        if not issues:
            issues.append(
                ConfigIssue(tree.line_of(()), "", "the config must be a mapping of sections (agents, bindings, ...)")
            )
        return None, issues
    env = substitute_env(tree.data, os.environ if environ is None else environ)
    unset_credentials: dict[tuple[str, str], list[str]] = {}
    unset_paths: dict[Loc, list[str]] = {}
    unset_mcp: dict[str, list[str]] = {}
    for path, names in list(env.missing.items()):
        if path[:2] == ("mcp", "servers") and len(path) == 5 and path[3] in ("env", "headers"):
            # Like a channel's token: that server does not start, and the rest of the bot does.
            unset_mcp.setdefault(str(path[2]), []).extend(names)
            del env.missing[path]
            continue
        if path[:1] == ("channels",) and len(path) >= 2:
            unset_paths[path] = list(names)
            # A channel account without its token is skipped when the bot starts, so one missing
            # variable does not stop every other channel.
            account = str(path[3]) if len(path) >= 4 and path[2] == "accounts" else "*"
            unset_credentials.setdefault((str(path[1]), account), []).extend(names)
            del env.missing[path]
            continue
        unset = ", ".join(f"${{{name}}}" for name in names)
        message = f"environment variable {unset} is not set (give it a value, or a default: ${{{names[0]}:-value}})"
        issues.append(ConfigIssue(tree.line_of(path), format_path(path), message))
    plugins = plugins or Plugins()
    issues += check_channels(env.data.get("channels"), plugins, tree.line_of, set(unset_paths))
    providers, found = check_providers(env.data.get("providers"), plugins, tree.line_of)
    issues += found
    if providers is not None:
        env.data["providers"] = providers
    config: Config | None = None
    try:
        config = Config.model_validate(env.data)
    except ValidationError as error:
        found = issues_from_validation(error, Config, tree.line_of)
        # A value that lost its variable fails validation too; the variable is the real problem.
        missing = {format_path(path) for path in env.missing}
        issues += [issue for issue in found if issue.path not in missing]
    issues += [ConfigIssue(tree.line_of(loc), format_path(loc), text) for loc, text in _cross_checks(env.data, config)]
    if issues or config is None:
        return None, _without_env_values(issues, env)
    config._unset_credentials = unset_credentials
    config._unset_paths = unset_paths
    config._unset_mcp = unset_mcp
    config._mcp_secrets = _mcp_secrets(env)
    config._written = env.data
    config._raw = tree.data
    config._line_of = tree.line_of
    config._warnings = _without_env_values(
        [
            ConfigIssue(tree.line_of(path), format_path(path), "a secret written into the file; use ${VAR} instead")
            for path in _secret_paths(tree.data) + [("mcp", *loc) for loc, _ in secret_entries(tree.data.get("mcp"))]
            if path not in env.from_env
        ]
        + [ConfigIssue(tree.line_of(loc), format_path(loc), text) for loc, text in _unreachable_bindings(config)],
        env,
    )
    return config, []


# What PyYAML's complaints usually mean, for someone who has never read the YAML spec.
_YAML_HINTS: tuple[tuple[str, str], ...] = (
    ("mapping values are not allowed", "a value holding ': ' needs quotes, or this line is indented too far"),
    ("could not find expected ':'", "a key needs ':' after it, or a line above is indented differently"),
    ("did not find expected key", "the lines of one mapping or list must start in the same column"),
    ("expected <block end>", "the lines of one mapping or list must start in the same column"),
    ("did not find expected '-' indicator", "the items of one list must start in the same column"),
    ("found unexpected end of stream", "a quote or bracket is not closed"),
    ("found '<stream end>'", "a bracket or quote is not closed"),
    ("while scanning a quoted scalar", "a quote is not closed"),
    ("found undefined alias", "an *alias names an &anchor that is not defined above it"),
)


def _yaml_syntax(text: str) -> ConfigIssue | None:
    """A YAML syntax error with its line, column and a hint at the usual cause (None if the text parses)."""
    try:
        yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        problem = str(error.problem or error.context or "not valid YAML")
        if mark is None:
            return ConfigIssue(1, "", f"invalid YAML: {problem}")
        lines = text.splitlines()
        line_text = lines[mark.line] if mark.line < len(lines) else ""
        indent = line_text[: len(line_text) - len(line_text.lstrip(" \t"))]
        if "\t" in indent or line_text[mark.column : mark.column + 1] == "\t":
            hint = "YAML does not allow tabs for indentation; use spaces"
        else:
            wording = f"{error.context or ''} {problem}"
            hint = next((advice for words, advice in _YAML_HINTS if words in wording), "")
        message = f"invalid YAML: {problem}" + (f" ({hint})" if hint else "")
        return ConfigIssue(mark.line + 1, "", message, column=mark.column + 1)
    except yaml.YAMLError as error:
        return ConfigIssue(1, "", f"invalid YAML: {error}")
    return None


def _without_env_values(issues: list[ConfigIssue], env: Substitution) -> list[ConfigIssue]:
    """The issues, with any value the environment supplied replaced: a message must not repeat a secret."""
    redactor = Redactor(env.values)
    return [dataclasses.replace(issue, message=redactor.redact(issue.message)) for issue in issues]


def load_config(
    path: str | Path = DEFAULT_CONFIG, environ: Mapping[str, str] | None = None, plugins: Plugins | None = None
) -> Config:
    """Read and validate a config file; relative paths in it are taken from the file's folder."""
    file = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(file, [ConfigIssue(None, "", "file not found")]) from None
    except UnicodeDecodeError as error:
        raise ConfigError(file, [ConfigIssue(None, "", f"not UTF-8 text ({error.reason})")]) from None
    except OSError as error:
        raise ConfigError(file, [ConfigIssue(None, "", f"cannot read: {error.strerror}")]) from None
    config = parse_config(text, file, environ, plugins)
    config._file = Path(path).resolve()
    config._base_dir = config._file.parent
    return config


ValidationResult = tuple["Config | None", list[ConfigIssue], list[ConfigIssue]]


def validate_config(
    path: str | Path = DEFAULT_CONFIG,
    environ: Mapping[str, str] | None = None,
    plugins: Plugins | None = None,
    state_dir: Path | None = None,
    *,
    env_file: bool = True,
) -> ValidationResult:
    """The one validation `bot config check`, `bot run`, `bot chat` and a reload share: `(config, errors, warnings)`,
    each issue with its file, line, key path and message (with "did you mean" for a typo).

    `config` is None when an error is fatal (the bot refuses the file); errors that are not fatal (`fatal` False: a
    channel account whose token variable is unset, which is skipped; a model provider without its key) come with the
    config, since the bot can start without them. `.env` beside the file fills in variables the environment lacks:
    with `environ` None it is loaded into this process's environment (see `bot.env_vars.load_env_file`), else
    `environ` is read over it; with `env_file` False it is not read at all (a live reload: `.env` applies from the
    next start). With `state_dir`, a workspace holding it or the config file is an error too."""
    file = str(path)
    if not env_file:
        environment: Mapping[str, str] = os.environ if environ is None else environ
    elif environ is None:
        load_env_file(path)
        environment = os.environ
    else:
        environment = with_env_file(path, environ)
    try:
        config = load_config(path, environment, plugins)
    except ConfigError as error:
        return None, _in_file(error.issues, file), []
    errors = _readiness(config, environment)
    if state_dir is not None:
        errors += workspace_conflicts(config, state_dir)
    warnings = config.warnings + _unmatched_names(config, plugins or Plugins())
    errors, warnings = _in_file(errors, file), _in_file(warnings, file)
    return (None if any(issue.fatal for issue in errors) else config), errors, warnings


def _in_file(issues: list[ConfigIssue], file: str) -> list[ConfigIssue]:
    """The issues in file order, each naming `file`."""
    placed = [dataclasses.replace(issue, file=file) for issue in issues]
    return sorted(placed, key=lambda issue: (issue.line or 0, issue.path))


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


def _readiness(config: Config, environ: Mapping[str, str]) -> list[ConfigIssue]:
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
            continue  # no such provider: _cross_checks reported it
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


def _unmatched_names(config: Config, plugins: Plugins) -> list[ConfigIssue]:
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
