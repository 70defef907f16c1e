"""The `tools:` section of bindings.yaml and `agents[].tools`: the settings of the tool policy pipeline
(tools.policy), checked as they are read."""

from __future__ import annotations

import fnmatch
from functools import partial
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from tools.registry import BUILTIN_GROUPS, BUILTIN_TOOL_NAMES, is_group_entry

ProfileName = Literal["minimal", "messaging", "coding", "full"]
_GLOB_CHARS = frozenset("*?[")


def _entry(value: object) -> object:
    if not isinstance(value, str):
        return value
    text = value.strip().lower()
    if not text:
        raise ValueError("must be a tool name, a glob such as web_*, or a group such as group:fs or mcp:github")
    return text


def lower(value: object) -> object:
    """Text trimmed and lowercased (anything else as it is)."""
    return value.strip().lower() if isinstance(value, str) else value


def _group_key(value: object) -> object:
    """A `by_group` key that can match something: `<channel>:<kind>:<peer id>`, or a glob such as `discord:*`."""
    if not isinstance(value, str):
        return value
    parts = value.strip().split(":", 2)
    kind_ok = len(parts) == 3 and (
        parts[1].lower() in ("direct", "group", "channel") or bool(_GLOB_CHARS & set(parts[1]))
    )
    if not (kind_ok or (len(parts) < 3 and "*" in value)):
        raise ValueError(
            f"{value!r} must be <channel>:<direct|group|channel>:<peer id>, e.g. telegram:group:-100123 or discord:*"
        )
    return value.strip()


Entry = Annotated[str, BeforeValidator(_entry)]
Profile = Annotated[ProfileName, BeforeValidator(lower)]
GroupKey = Annotated[str, BeforeValidator(_group_key)]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _empty_keys_are_absent(cls, data: Any) -> Any:
        # `deny:` with every entry commented out reads as null; treat it as not written.
        if isinstance(data, dict):
            return {key: value for key, value in data.items() if value is not None}
        return data


class ToolPolicy(_Section):
    """One layer's lists. Entries are names, `*`, globs (`web_*`) or groups (`group:fs`, `mcp:<server>`); deny wins."""

    allow: list[Entry] = Field(
        default_factory=list,
        description="Tools this layer keeps; a non-empty list removes every tool it does not name; empty: no limit.",
    )
    deny: list[Entry] = Field(default_factory=list, description="Tools this layer removes; deny wins over allow.")


class ProviderToolPolicy(ToolPolicy):
    """`tools.by_provider.<key>`: a profile and lists for one provider or one provider/model."""

    profile: Profile | None = Field(
        default=None,
        description="A profile that also applies for this provider or model: `minimal`, `messaging`, `coding` or "
        "`full`; none: no further limit.",
    )


# What runs started by someone who is not an owner may never use unless `tools.non_owner.allow` lifts it: commands,
# writing the workspace's files (which include the notes and bootstrap files every session reads), MCP servers'
# tools (they act with the credentials the owner gave the server), and other sessions (other people's conversations).
NON_OWNER_DENY: tuple[str, ...] = (
    "group:runtime",
    "write",
    "edit",
    "memory_write",
    "group:mcp",
    "group:automation",  # a job runs unattended with the agent's powers
    "group:sessions",
)

# What a child of `sessions_spawn` may not use unless `tools.subagent.allow` lifts it: scheduling (a job would outlive
# the child and run unattended).
SUBAGENT_DENY: tuple[str, ...] = ("group:automation",)


def builtin_groups(name: str) -> frozenset[str]:
    """The built-in groups the tool `name` is in."""
    return frozenset(group for group, members in BUILTIN_GROUPS.items() if name in members)


def _lifts_something(default: tuple[str, ...], who: str, entry: str) -> str:
    """An `allow` entry of a layer with a default deny list, refused when it surely lifts nothing: a built-in tool
    or group that the default does not deny. Before the lists merged, `allow` limited the layer to what it named;
    such an entry is the mark of a config written then, which would now give more than it did (hence an error)."""
    if entry == "*" or _GLOB_CHARS & set(entry):
        return entry
    if is_group_entry(entry):
        if entry not in BUILTIN_GROUPS or entry == "group:mcp":  # other tools may join any group: it may lift them
            return entry
        members = BUILTIN_GROUPS[entry]
    elif entry in BUILTIN_TOOL_NAMES:
        members = (entry,)
    else:
        return entry  # a plugin's or an MCP server's tool, whose groups only the registry knows
    if any(matches(denied, name, builtin_groups(name)) for denied in default for name in members):
        return entry
    raise ValueError(
        f"{entry!r} is not in the {who} default deny list ({', '.join(default)}), so allowing it changes nothing: "
        f"allow only lifts entries of that list; to limit {who}s to some tools, as allow did before, list them "
        "under only:"
    )


NonOwnerLift = Annotated[
    str, BeforeValidator(_entry), AfterValidator(partial(_lifts_something, NON_OWNER_DENY, "non-owner"))
]
SubagentLift = Annotated[
    str, BeforeValidator(_entry), AfterValidator(partial(_lifts_something, SUBAGENT_DENY, "subagent"))
]


class DefaultedPolicy(_Section):
    """A layer with a built-in deny list (`default`) that the config changes rather than replaces: `allow` lifts
    from the default what it names (a tool, glob or group: `allow: [cron]` lifts cron out of `group:automation`, and
    nothing else of that group), `deny` adds to it, `only` limits the layer to what it names (it lifts nothing).
    `deny` wins over `allow`. Whatever the config does not name stays as the default has it."""

    default: ClassVar[tuple[str, ...]] = ()
    allow: list[Entry] = Field(
        default_factory=list,
        description="Entries lifted out of the default deny list, and only what they name (`[cron]` lifts `cron` "
        "out of `group:automation`, nothing else); it limits nothing.",
    )
    deny: list[Entry] = Field(
        default_factory=list, description="Entries added to the default deny list; deny wins over allow."
    )
    only: list[Entry] = Field(
        default_factory=list,
        description="Limits the layer to the tools it names; it lifts nothing from the default deny list; empty: "
        "no limit.",
    )


class NonOwnerPolicy(DefaultedPolicy):
    """`tools.non_owner`: runs started by anyone not in `owners`, over NON_OWNER_DENY."""

    default: ClassVar[tuple[str, ...]] = NON_OWNER_DENY
    allow: list[NonOwnerLift] = Field(
        default_factory=list,
        description="Entries lifted out of the default deny list (`group:runtime`, `write`, `edit`, `memory_write`, "
        "`group:mcp`, `group:automation`, `group:sessions`), and only what they name; an entry the default does not "
        "deny is an error (list it under `only`).",
    )


class SubagentPolicy(DefaultedPolicy):
    """`tools.subagent`: runs of a child `sessions_spawn` started, over SUBAGENT_DENY."""

    default: ClassVar[tuple[str, ...]] = SUBAGENT_DENY
    allow: list[SubagentLift] = Field(
        default_factory=list,
        description="Entries lifted out of the default deny list (`group:automation`), and only what they name; an "
        "entry the default does not deny is an error (list it under `only`).",
    )


def _pair(value: object) -> object:
    if isinstance(value, str):
        value = [part.strip() for part in value.split(",")]
    if not isinstance(value, list | tuple) or len(value) != 2 or not all(isinstance(v, str) and v for v in value):
        raise ValueError("must be a pair of agent ids, e.g. [main, research] (or [main, '*'])")
    return tuple(value)


AgentPair = Annotated[tuple[str, str], BeforeValidator(_pair)]


class AgentToAgent(_Section):
    """`tools.agent_to_agent`: which pairs of agents may see and message each other's sessions (an agent always may
    its own), and how many messages may go back and forth in one exchange before `sessions_send` refuses."""

    allow: list[AgentPair] = Field(
        default_factory=list,
        description="Pairs of agent ids whose sessions may see and message each other, both ways (`[main, research]`; "
        "`*` matches any agent); an agent always may its own.",
    )
    max_exchanges: int = Field(
        default=5,
        ge=1,
        le=20,
        description="Messages `sessions_send` may pass back and forth in one exchange before it refuses (1 to 20).",
    )

    def allows(self, one: str, other: str) -> bool:
        """Whether agents `one` and `other` may reach each other's sessions (either order; `*` matches any)."""
        if one == other:
            return True
        return any(
            (a in (one, "*") and b in (other, "*")) or (a in (other, "*") and b in (one, "*")) for a, b in self.allow
        )


class ToolsConfig(_Section):
    """The `tools:` section: the global profile and lists, and the layers that apply per provider, chat and run."""

    profile: Profile | None = Field(
        default=None,
        description="The tools every agent starts from, unless it sets its own: `minimal` (session_status), "
        "`messaging`, `coding` or `full`; none: `full`.",
    )
    allow: list[Entry] = Field(
        default_factory=list,
        description="Tools every run may keep; a non-empty list removes every tool it does not name; empty: no limit.",
    )
    deny: list[Entry] = Field(default_factory=list, description="Tools no run gets; deny wins over allow.")
    by_provider: dict[str, ProviderToolPolicy] = Field(
        default_factory=dict,
        description="A profile and lists for the runs of one provider (`openrouter`) or one of its models "
        "(`openrouter/some-model`, which wins over the provider's key).",
    )
    by_group: dict[GroupKey, ToolPolicy] = Field(
        default_factory=dict,
        description="Lists for the runs in some chats, keyed `<channel>:<kind>:<peer id>` (globs allowed, such as "
        "`discord:*`); the first key that matches applies.",
    )
    non_owner: NonOwnerPolicy = Field(
        default_factory=NonOwnerPolicy,
        description="Runs started by anyone not in `owners`; what it says changes the default deny list, never "
        "replaces it.",
    )
    sandbox: ToolPolicy | None = Field(
        default=None, description="Lists for sandboxed runs; none: no further limit there."
    )
    subagent: SubagentPolicy = Field(
        default_factory=SubagentPolicy,
        description="Runs of a child `sessions_spawn` started; what it says changes the default deny list. Beyond "
        "it, a child at `subagents.max_depth` never has `sessions_spawn`.",
    )
    agent_to_agent: AgentToAgent = Field(
        default_factory=lambda: AgentToAgent(),
        description="Which agents may see and message each other's sessions, and how long an exchange may go on.",
    )


class AgentToolsConfig(_Section):
    """`agents[].tools`: the agent's own profile (it replaces the global one) and lists."""

    profile: Profile | None = Field(
        default=None, description="The agent's tool profile, replacing `tools.profile`; none: `tools.profile`."
    )
    allow: list[Entry] = Field(
        default_factory=list,
        description="Tools this agent's runs may keep; a non-empty list removes every tool it does not name.",
    )
    deny: list[Entry] = Field(default_factory=list, description="Tools this agent's runs never get.")


def matches(entry: str, name: str, groups: frozenset[str]) -> bool:
    """Whether a policy entry (a name, `*`, a glob or a group) matches the tool `name` of `groups`."""
    if entry == "*":
        return True
    if is_group_entry(entry):
        return any(fnmatch.fnmatchcase(group, entry) for group in groups)
    if _GLOB_CHARS & set(entry):
        return fnmatch.fnmatchcase(name, entry)
    return entry == name
