"""`agents` and `defaults` of bindings.yaml: one agent's settings, and what every agent inherits."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from bot.config.schedules import HeartbeatConfig
from bot.config.values import ModelRef, Name, Section, SkillGlob, TimeZone, UserRef
from tools.base import CrossChat
from tools.exec_policy import ExecSettings
from tools.policy_config import AgentToolsConfig
from tools.sandbox import SandboxSettings


class ExecConfig(ExecSettings):
    """`agents[].exec`: when the agent's shell commands run at once, need a person's approval, or never run."""

    approvers: list[UserRef] | None = Field(
        default=None,
        description="Who may decide this agent's approval requests (tap Allow or Deny, or `/approve`), as "
        "`<channel>:<user id>` entries; none: the config's `owners` (with no owners, a command that would ask is "
        "refused).",
    )


class LimitsConfig(Section):
    """`agents[].limits`: how long a run someone who is not an owner started may take."""

    non_owner_timeout_seconds: float = Field(
        default=120,
        gt=0,
        description="The longest, in seconds, a run that someone who is not an owner started may take (at most the "
        "agent's own `timeout_seconds`); then it is cancelled.",
    )


class MessageConfig(Section):
    """`agents[].message`: where the message tool may act. `cross_chat`: whose runs may act in another chat than
    the one (and thread) they were started from: the owners' (default), everyone's, or nobody's."""

    cross_chat: CrossChat = Field(
        default="owners",
        description="Whose runs may use the `message` tool in another chat or thread than their own: `owners`, "
        "runs an owner started; `all`, every run; `none`, no run, an owner's neither.",
    )


class MemoryConfig(Section):
    """`agents[].memory`: what a non-owner's run sees of the agent's files and memory."""

    # Either way, what non-owners wrote reaches an owner's run only wrapped as untrusted content naming them
    # (tools.provenance).
    scope: Literal["agent", "sender"] = Field(
        default="sender",
        description="`sender`: a non-owner's run works in its own folder, `<workspace>/senders/<channel>-<id>/`, "
        "and sees nothing else; `agent`: non-owners share the whole workspace with the owners.",
    )


class AgentSubagentsConfig(Section):
    """`agents[].subagents`: which other agents this agent's `sessions_spawn` may start (`*`: any); it may always
    start itself."""

    allow: list[Name] = Field(
        default_factory=list,
        description="Ids of the other agents this agent's `sessions_spawn` may start children of (`*`: any); "
        "empty: only itself.",
    )


CommandAccess = Literal["owners", "own", "everyone"]


class CommandsConfig(Section):
    """`agents[].commands`: who may use the chat commands that change a conversation. `owners`: only the bot's
    owners; `own`: the owners, and anyone else for what is theirs alone (`/stop` their own running answer and queued
    messages; `/new` and `/queue` a conversation only they have talked in, such as their DM); `everyone`: anyone the
    bot answers. The ones that change what a conversation costs (`model`, `think`) are the owners' by default."""

    stop: CommandAccess = Field(
        default="own", description="Who may use `/stop` (cancel the answer being written and drop queued messages)."
    )
    new: CommandAccess = Field(
        default="own", description="Who may use `/new` and `/reset` (start a fresh session; the old transcript stays)."
    )
    queue: CommandAccess = Field(
        default="own", description="Who may change a conversation's queue mode with `/queue` (anyone may look)."
    )
    model: CommandAccess = Field(
        default="owners", description="Who may switch a conversation's model with `/model` (anyone may list them)."
    )
    think: CommandAccess = Field(
        default="owners", description="Who may change a conversation's thinking level with `/think` (anyone may look)."
    )


class AgentConfig(Section):
    """One agent: an id, and what it does not inherit from `defaults`."""

    id: Name = Field(
        description="The agent's id, lowercased: 1 to 64 of a-z, 0-9, `_` and `-`, starting with a letter or digit; "
        "it names the agent in bindings, session keys and its default workspace folder."
    )
    default: bool = Field(
        default=False,
        description="Whether this is the default agent: the one messages no binding matches go to, and the agent "
        "of cron jobs and webhooks that name none; at most one agent has it, and without one the first agent is the "
        "default.",
    )
    model: ModelRef | None = Field(
        default=None,
        description="The model, as `<provider>/<model-id>` (split at the first `/`); none: `defaults.model` (an "
        "agent with neither is an error).",
    )
    fallbacks: list[ModelRef] | None = Field(
        default=None,
        description="Models tried in order when `model` fails (every key cooling down, server errors, timeouts, "
        "bad requests); none: `defaults.fallbacks`; `[]`: no fallbacks.",
    )
    models: list[ModelRef] = Field(
        default_factory=list,
        description="More models `/model` may switch one conversation to, besides `model` and `fallbacks`.",
    )
    workspace: str | None = Field(
        default=None,
        description="The agent's folder, where its file tools and commands work (relative paths are taken from the "
        "config's folder); none: `<defaults.workspace_root>/<id>`.",
    )
    tools: AgentToolsConfig | None = Field(
        default=None,
        description="The agent's own tool profile and allow/deny lists (the `agent` layer of the tool policy); none: "
        "only the `tools` section applies.",
    )
    timeout_seconds: float | None = Field(
        default=None,
        gt=0,
        description="Seconds one run of this agent may take before it is cancelled; none: `defaults.timeout_seconds`.",
    )
    timezone: TimeZone | None = Field(
        default=None,
        description="IANA time zone (such as `Europe/Berlin`) of the stamps on messages and the prompt; none: "
        "`defaults.timezone`, else the host's zone.",
    )
    limits: LimitsConfig = Field(
        default_factory=LimitsConfig, description="Limits on runs that someone who is not an owner started."
    )
    exec: ExecConfig = Field(
        default_factory=ExecConfig,
        description="When the agent's shell commands (`exec`) run at once, ask an approver first, or never run.",
    )
    sandbox: SandboxSettings = Field(
        default_factory=SandboxSettings,
        description="Which runs' commands run in a sandbox, with which backend, network and limits.",
    )
    message: MessageConfig = Field(
        default_factory=MessageConfig,
        description="Where the `message` tool may act: only in the run's own chat, or elsewhere.",
    )
    memory: MemoryConfig = Field(
        default_factory=MemoryConfig, description="What a non-owner's run sees of the agent's files and memory."
    )
    skills: list[SkillGlob] | None = Field(
        default=None,
        description="The skills offered to this agent, by name or glob (`git-*`); none: all of them; `[]`: none.",
    )
    heartbeat: HeartbeatConfig | None = Field(
        default=None,
        description="A periodic turn in a chat that speaks up only when something needs a person; none: no heartbeat.",
    )
    subagents: AgentSubagentsConfig = Field(
        default_factory=AgentSubagentsConfig,
        description="Which other agents this agent's `sessions_spawn` may start children of.",
    )
    commands: CommandsConfig = Field(
        default_factory=CommandsConfig,
        description="Who may use the chat commands that change a conversation (`/stop`, `/new`, `/queue`, `/model`, "
        "`/think`).",
    )


class Defaults(Section):
    """What every agent inherits unless it sets its own."""

    model: ModelRef | None = Field(
        default=None,
        description="The model of every agent that names none, as `<provider>/<model-id>`; none: each agent must "
        "name its own.",
    )
    fallbacks: list[ModelRef] = Field(
        default_factory=list,
        description="Models tried in order when an agent's model fails, for agents that do not list their own.",
    )
    workspace_root: str = Field(
        default="workspaces",
        description="The folder that holds each agent's workspace, `<workspace_root>/<id>`, unless the agent sets "
        "`workspace`; relative paths are taken from the config's folder.",
    )
    max_tool_iterations: int = Field(
        default=50,
        ge=1,
        description="Rounds of tool calls one turn may make; at the limit the turn stops and says so.",
    )
    max_concurrent: int = Field(default=4, ge=1, description="Runs at once across all sessions of the bot.")
    timeout_seconds: float = Field(
        default=600, gt=0, description="Seconds a run may take before it is cancelled, unless its agent sets its own."
    )
    timezone: TimeZone | None = Field(
        default=None,
        description="IANA time zone (such as `Europe/Berlin`) of the stamps on messages and the prompt, unless an "
        "agent sets its own; none: the host's zone.",
    )
