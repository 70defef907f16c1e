"""`bindings.yaml` as typed settings: one pydantic model per section, the whole `Config`, and its router."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    field_validator,
    model_validator,
)

from agent.images import DEFAULT_IMAGE_TURNS
from agent.lanes import QueueSettings
from agent.providers.config import ProviderConfig, http_url, providers_from_env, split_model
from bot.config.errors import ConfigIssue, Loc
from bot.config.http_api import API_CHANNEL, HttpApiSettings, Webhook
from bot.config.schedules import CronJob, HeartbeatConfig, duration_seconds
from bot.config.web import WEB_CHANNEL, WebSettings
from routing import (
    Binding as RoutingBinding,
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
from tools.mcp.settings import McpSettings
from tools.policy import AgentToAgent, AgentToolsConfig, ToolsConfig
from tools.sandbox import SandboxSettings

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


def user_ref(value: object) -> object:
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
UserRef = Annotated[str, BeforeValidator(user_ref)]


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
    jobs: list[CronJob] = Field(default_factory=list)


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
    web: WebSettings = Field(default_factory=WebSettings)
    http_api: HttpApiSettings = Field(default_factory=HttpApiSettings)
    webhooks: list[Webhook] = Field(default_factory=list)
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

    def owner_keys(self) -> list[str]:
        """Everyone who is an owner: `owners`, and the web logins and API keys that name one."""
        keys = [key.identity for key in self.http_api.keys if key.owner is not None]
        return [*self.owners, *self.web.owner_logins(), *keys]

    def router(self) -> Router:
        """A resolver indexed over every binding, built once per loaded config."""
        # After the file's own: agent X's WebChat page and API model (web and http account X) talk to X unless a
        # binding says otherwise.
        web = [
            RoutingBinding(agent=agent.id, channel=channel, account=agent.id)
            for channel in (WEB_CHANNEL, API_CHANNEL)
            for agent in self.agents
        ]
        return Router(
            [*(binding.to_routing() for binding in self.bindings), *web],
            default_agent=self.default_agent,
            dm_scope=self.session.dm_scope,
            identity_links=self.session.identity_links,
        )
