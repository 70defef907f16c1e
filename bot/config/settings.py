"""`bindings.yaml` as typed settings: the models of its sections (the agents' in bot.config.agents), the whole
`Config`, and its router."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, Field, PrivateAttr, field_validator, model_validator

from agent.images import DEFAULT_IMAGE_TURNS
from agent.lanes import QueueSettings
from agent.providers.config import ProviderConfig, http_url, providers_from_env
from bot.config.agents import (
    AgentConfig,
    CommandAccess as CommandAccess,
    Defaults,
    ExecConfig,
    MessageConfig as MessageConfig,
)
from bot.config.errors import ConfigIssue, Loc
from bot.config.http_api import API_CHANNEL, HttpApiSettings, Webhook, distinct_webhooks
from bot.config.schedules import CronJob
from bot.config.values import (
    AccountMatch,
    ChannelName,
    Duration,
    Id,
    Name,
    PeerKindName,
    Section,
    UserRef,
    user_ref as user_ref,
)
from bot.config.web import WEB_CHANNEL, WebSettings
from routing import Binding as RoutingBinding, DmScope, Peer, Router, binding_tier
from tools.mcp.settings import McpSettings
from tools.policy_config import AgentToAgent, ToolsConfig

DEFAULT_CONFIG = "bindings.yaml"
_M = TypeVar("_M", bound=BaseModel)


class ApprovalsConfig(Section):
    """How approval requests are shown and how long they wait."""

    timeout_seconds: float = Field(
        default=1800, gt=0, description="Seconds a request waits for a decision; then it expires, which denies."
    )
    target: Literal["chat", "dm", "both"] = Field(
        default="chat",
        description="Where the request card goes: `chat`, the chat the run is in; `dm`, each approver's direct "
        "messages; `both`.",
    )


class StateConfig(Section):
    """`state`: where the state is kept — `state.db` in the state directory (sqlite, the default) or a PostgreSQL
    database (`url`, e.g. `${DATABASE_URL}`) — and how long finished records (the journal, sent replies, settled
    approvals) are kept."""

    backend: Literal["sqlite", "postgres"] = Field(
        default="sqlite",
        description="`sqlite`: `state.db` in the state directory (`--state-dir`, default `state` beside the config); "
        "`postgres`: the database at `url`, which several `bot run` processes may share.",
    )
    url: str | None = Field(
        default=None,
        repr=False,
        description="For `backend: postgres` (required there): a libpq URL, postgresql://user:pass@host/db, best "
        "written as `${DATABASE_URL}`.",
    )
    retention_days: float = Field(
        default=30,
        ge=1,
        description="Days finished records (journal rows, sent replies, settled approvals, ended job runs, usage) "
        "are kept before they are pruned, at start and daily; at least 1, since the journal also stops duplicate "
        "deliveries.",
    )

    @model_validator(mode="after")
    def _url_for_postgres(self) -> StateConfig:
        if self.backend == "postgres" and not self.url:
            raise ValueError("backend postgres needs url (e.g. url: ${DATABASE_URL})")
        return self


class LanesConfig(Section):
    """`lanes`: how run slots are shared between the people who talk to the bot, and how long running turns get to
    finish when the bot stops."""

    per_sender: int = Field(
        default=2, ge=1, description="Turns one person who is not an owner may run at once, across all chats."
    )
    stop_grace: Duration = Field(
        default=10.0,
        description="At SIGTERM or SIGINT, how long running turns get to finish before they are cancelled (a "
        "cancelled turn runs again at the next start); a duration: 30s, 10m, 1h or a number of seconds.",
    )


class SkillsConfig(Section):
    """`skills`: folders of skill folders (each holding a SKILL.md) offered after the workspace's own `skills/`,
    in this order; relative paths are taken from the config's folder."""

    dirs: list[str] = Field(
        default_factory=list,
        description="Folders of skill folders, offered after the workspace's own `skills/` and before the shipped "
        "skills, in this order; relative paths are taken from the config's folder, `~` is expanded.",
    )


class SubagentsConfig(Section):
    """`subagents`: how many children `sessions_spawn` may have running, how deep they may nest, how long each may
    take."""

    max_concurrent: int = Field(
        default=4, ge=1, description="Children running at once per parent session; beyond it nothing is started."
    )
    max_total: int = Field(
        default=8, ge=1, description="Children running at once in the whole bot; beyond it nothing is started."
    )
    max_depth: int = Field(
        default=1,
        ge=1,
        le=5,
        description="How deep children may nest: 1, a child cannot spawn; 2, its children cannot; and so on (at "
        "most 5).",
    )
    timeout_seconds: float = Field(
        default=600,
        gt=0,
        description="A child's time limit in seconds, unless the spawn asks for less (and never more than its "
        "agent's own).",
    )


class PeerMatch(Section):
    """`match.peer`: one chat, or (`id: "*"`) every chat of a kind."""

    kind: PeerKindName = Field(
        description="The kind of chat: `direct`, `group` or `channel` (`dm` is read as `direct`); `group` and "
        "`channel` match each other, never `direct`."
    )
    id: Id = Field(
        description="The chat's id exactly as the platform writes it (a Telegram forum topic is "
        '`<chat id>:topic:<thread id>`); `"*"`: any chat of that kind.'
    )


class Match(Section):
    """What a message must have for its binding to apply; every field set must match."""

    channel: ChannelName = Field(
        description="The channel the message came through: `telegram`, `discord`, `slack`, `console`, `loopback`, "
        "`web` (WebChat), `http` (the API), or a plugin's."
    )
    account: AccountMatch | None = Field(
        default=None,
        description="The channel account (its id under `channels.<channel>.accounts`); none: only the `default` "
        'account; `"*"`: any account of the channel.',
    )
    peer: PeerMatch | None = Field(
        default=None,
        description="The chat; a thread or forum topic matches the binding of its parent chat unless one names it.",
    )
    guild: Id | None = Field(default=None, description="A Discord server (guild) id; not with `team`.")
    team: Id | None = Field(default=None, description="A Slack team (workspace) id; not with `guild`.")
    roles: list[Id] | None = Field(
        default=None,
        description="Discord role ids: the binding matches a member with at least one of them (needs `guild`).",
    )

    @model_validator(mode="after")
    def _has_a_tier(self) -> Match:
        binding_tier(account=self.account, peer=self.peer_value, guild=self.guild, team=self.team, roles=self.roles)
        return self

    @property
    def peer_value(self) -> Peer | None:
        return Peer(self.peer.kind, self.peer.id) if self.peer else None


class BindingConfig(Section):
    """Route messages that match `match` to `agent`."""

    agent: Name = Field(description="The id of the agent that answers the messages this binding matches.")
    match: Match = Field(
        description="What a message must have for the binding to apply: every key set must match; among matching "
        "bindings the most specific tier wins, then the first in the file."
    )

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


class SessionConfig(Section):
    """How messages are grouped into conversations."""

    dm_scope: DmScope = Field(
        default="per-channel-peer",
        description="How direct messages are grouped into conversations: `main`, one for all of them; `per-peer`, one "
        "per person; `per-channel-peer`, one per person and channel (two people never share one); "
        "`per-account-channel-peer`, one per person, channel and account.",
    )
    identity_links: dict[Name, list[UserRef]] = Field(
        default_factory=dict,
        description="One name for a person's accounts (`alice: [telegram:111, discord:222]`): their direct messages "
        "share one conversation, keyed by that name, unless `dm_scope` is `main`.",
    )
    queue: QueueSettings = Field(
        default_factory=QueueSettings,
        description="What happens to messages that arrive while their conversation is busy with a turn.",
    )


class TranscriptionConfig(Section):
    """`media.transcription`: an OpenAI-compatible `/audio/transcriptions` endpoint for voice notes and audio."""

    base_url: Annotated[str, AfterValidator(http_url)] = Field(
        description="The endpoint's root, such as https://api.openai.com/v1; `/audio/transcriptions` is appended."
    )
    model: str = Field(default="whisper-1", description="The transcription model the endpoint is asked for.")
    api_key: str | None = Field(
        default=None,
        description="The key, written as `${VAR}`; sent as a bearer token, to this endpoint only; none: no key is "
        "sent.",
    )
    timeout_seconds: float = Field(
        default=120,
        gt=0,
        description="Seconds each step of the request (connecting, uploading, waiting for the answer) may take; a "
        "failed transcription leaves the file untranscribed.",
    )


class MediaConfig(Section):
    """`media`: what becomes of the files people send, beyond each account's limits."""

    transcription: TranscriptionConfig | None = Field(
        default=None,
        description="An OpenAI-compatible endpoint that transcribes voice notes and audio, the transcript following "
        "the file's line; none: they reach the agent as files, untranscribed.",
    )
    image_turns: int = Field(
        default=DEFAULT_IMAGE_TURNS,
        ge=0,
        description="The latest user turns whose images a model that can see is shown again; older images are "
        "named only.",
    )


class CronConfig(Section):
    """`cron`: jobs written in the file (each needs `deliver`), and how late a missed tick may still run at start."""

    catch_up: Duration = Field(
        default=3600.0,
        description="A tick missed while the bot was down runs once at start if it is younger than this, else it is "
        "skipped and logged; a duration: 30s, 10m, 1h or a number of seconds.",
    )
    jobs: list[CronJob] = Field(
        default_factory=list,
        description="Scheduled jobs written in the file, each with `deliver`; the `cron` tool cannot change or "
        "remove them (jobs made by the tool or `bot cron add` live in the state).",
    )


class HealthConfig(Section):
    """`health`: whether the owners hear of a channel that stays down, and after how long."""

    notify_owners: bool = Field(
        default=False,
        description="Whether each owner gets one direct message when a channel account stays degraded or stalled "
        "longer than `notify_after`, and one when it is connected again.",
    )
    notify_after: Duration = Field(
        default=300.0,
        description="How long a channel account stays down before the owners hear of it; a duration: 30s, 10m, 1h "
        "or a number of seconds.",
    )


class AdminConfig(Section):
    """`admin`: a listener for monitoring (`/healthz`, `/metrics` in Prometheus' format); off unless `listen` is set."""

    listen: str | None = Field(
        default=None,
        description="`host:port` of the monitoring listener, e.g. 127.0.0.1:9464 (keep it on loopback or behind a "
        "firewall; a taken port stops `bot run`); none: no listener.",
    )

    @field_validator("listen")
    @classmethod
    def _host_port(cls, value: str | None) -> str | None:
        if value is None:
            return None
        host, _, port = value.strip().rpartition(":")
        if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ValueError("must be host:port, e.g. 127.0.0.1:9464")
        return value.strip()


class RecoveryConfig(Section):
    """`recovery`: what a start does with work left from before. Replies still unsent and messages still unanswered
    older than `max_age` are not sent or run (a person gets one line saying the bot was offline)."""

    max_age: Duration = Field(
        default=3600.0,
        description="At start, unanswered messages and unsent replies older than this are dropped, and each direct "
        "chat they belong to gets one line saying the bot was offline; a duration: 30s, 10m, 1h or a number of "
        "seconds.",
    )


class Config(Section):
    """The whole of bindings.yaml, validated. Build it with `load_config`."""

    agents: list[AgentConfig] = Field(
        default_factory=list,
        description="The agents, each with an id and what it does not inherit from `defaults`; none listed: one "
        "agent, `main`.",
    )
    defaults: Defaults = Field(
        default_factory=Defaults, description="What every agent inherits unless it sets its own."
    )
    bindings: list[BindingConfig] = Field(
        default_factory=list,
        description="Routing rules: which agent answers which channel, account, chat, Discord server and roles, or "
        "Slack team; a message no binding matches goes to the default agent.",
    )
    session: SessionConfig = Field(
        default_factory=SessionConfig,
        description="How messages are grouped into conversations, and what happens to those that arrive while one "
        "is busy.",
    )
    owners: list[UserRef] = Field(
        default_factory=list,
        description="Who owns the bot, as `<channel>:<user id>` entries (`/whoami` shows yours; `bot owners add` "
        "writes one): owners approve commands and pairings, and the runs of anyone else get the `non_owner` "
        "limits.",
    )
    web: WebSettings = Field(
        default_factory=WebSettings,
        description="The Control UI and WebChat that `bot run` serves: where they listen and who logs in as whom.",
    )
    http_api: HttpApiSettings = Field(
        default_factory=HttpApiSettings,
        description="The OpenAI-compatible API on the web listener: its keys, each a sender like a person, and its "
        "limits.",
    )
    webhooks: Annotated[list[Webhook], AfterValidator(distinct_webhooks)] = Field(
        default_factory=list,
        description="Signed webhooks on the web listener: `POST /hooks/<name>` starts a turn whose answer goes to a "
        "configured chat; each has a name and a secret of its own.",
    )
    channels: dict[str, Any] = Field(
        default_factory=dict,
        description="The chat platform accounts, by channel name (`telegram`, `discord`, `slack`, `console`, "
        "`loopback`, or a plugin's), each under `accounts: {<id>: {...}}`; each account is checked by its "
        "channel's settings (below, for the built-in platforms).",
    )
    providers: dict[Name, ProviderConfig] | None = Field(
        default=None,
        description="The LLM endpoints by name, the `<provider>` of `<provider>/<model-id>`; none (or empty): "
        "`openrouter`, `openai` and `anthropic`, each set up by its `*_API_KEY` variable at run time.",
    )
    tools: ToolsConfig | None = Field(
        default=None,
        description="Which tools the agents' runs may use: the profile and the layers of the tool policy; none: "
        "owners get every tool, and non-owners and subagents the defaults of `non_owner` and `subagent`.",
    )
    approvals: ApprovalsConfig = Field(
        default_factory=ApprovalsConfig,
        description="How approval requests for commands are shown and how long they wait (who approves is "
        "`agents[].exec.approvers`).",
    )
    lanes: LanesConfig = Field(
        default_factory=LanesConfig,
        description="How run slots are shared between the people who talk to the bot, and how long running turns "
        "get to finish at a stop.",
    )
    state: StateConfig = Field(
        default_factory=StateConfig,
        description="Where the state (sessions, journal, outbox, approvals, jobs) is kept, SQLite or PostgreSQL, and "
        "how long finished records are kept; takes effect at the next start.",
    )
    media: MediaConfig = Field(
        default_factory=MediaConfig,
        description="What becomes of the files people send, beyond each channel account's `media` limits.",
    )
    mcp: McpSettings = Field(
        default_factory=McpSettings,
        description="MCP servers whose tools the agents get; takes effect at the next start.",
    )
    skills: SkillsConfig = Field(
        default_factory=SkillsConfig,
        description="Where skills are found besides each workspace's own `skills/` and the shipped ones.",
    )
    cron: CronConfig = Field(
        default_factory=CronConfig,
        description="Scheduled jobs written in the file, and how late a missed tick may still run at start.",
    )
    subagents: SubagentsConfig = Field(
        default_factory=SubagentsConfig,
        description="Limits of `sessions_spawn`: how many children may run, how deep they nest, how long each may "
        "take.",
    )
    health: HealthConfig = Field(
        default_factory=HealthConfig,
        description="Whether the owners hear of a channel account that stays down, and after how long.",
    )
    admin: AdminConfig = Field(
        default_factory=AdminConfig,
        description="The monitoring listener (`/healthz`, and `/metrics` in Prometheus' format); off unless `listen` "
        "is set; takes effect at the next start.",
    )
    recovery: RecoveryConfig = Field(
        default_factory=RecoveryConfig,
        description="What a start does with messages and replies left from before it.",
    )

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
