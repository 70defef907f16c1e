"""The tool policy pipeline: which registered tools a run may use, and why each other one was removed."""

from __future__ import annotations

import difflib
import fnmatch
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Literal, get_args

from pydantic import BaseModel, BeforeValidator, ConfigDict

from tools.base import Tool
from tools.policy_config import (
    AgentToAgent as AgentToAgent,
    AgentToolsConfig,
    DefaultedPolicy,
    NonOwnerPolicy,
    ProfileName,
    SubagentPolicy,
    ToolPolicy,
    ToolsConfig,
    builtin_groups as _builtin_groups,
    lower as _lower,
    matches as _matches,
)
from tools.registry import BUILTIN_TOOL_NAMES, ToolRegistry, is_group_entry

Layer = Literal["owner_only", "profile", "global", "provider", "agent", "non_owner", "group", "sandbox", "subagent"]
LAYERS: tuple[Layer, ...] = get_args(Layer)

# What each profile allows, as policy entries; None allows everything.
PROFILES: dict[ProfileName, tuple[str, ...] | None] = {
    "minimal": ("session_status",),
    "messaging": ("group:messaging", "session_status"),
    "coding": ("group:fs", "group:runtime", "group:web", "group:memory", "session_status"),
    "full": None,
}
DEFAULT_PROFILE: ProfileName = "full"


class Selection(BaseModel):
    """What the policy needs to know about a run: who asks, which model, which chat, and what kind of run."""

    model_config = ConfigDict(frozen=True)

    is_owner: bool = False
    agent: str | None = None  # named in reasons; a tool with `agents` (an MCP server's) is kept only for those
    provider: str | None = None
    model: str | None = None  # the provider's model id; a `provider/model` ref is accepted too
    channel: str | None = None
    peer_kind: Annotated[Literal["direct", "group", "channel"] | None, BeforeValidator(_lower)] = None
    peer_id: str | None = None
    sandboxed: bool = False
    depth: int = 0  # 0: not a subagent; 1: a child of sessions_spawn; 2: its child …
    max_depth: int = 1  # `subagents.max_depth`: a child this deep may not spawn


@dataclass(frozen=True)
class Removed:
    """A tool the run may not use: the first layer that removed it, and why."""

    tool: Tool
    layer: Layer
    reason: str

    @property
    def name(self) -> str:
        return self.tool.name


@dataclass(frozen=True)
class UnknownEntry:
    """A policy entry that names no known tool or group: most likely a typo."""

    where: str  # e.g. "tools.deny"
    entry: str


@dataclass(frozen=True)
class PolicyResult:
    """The kept tools in registry order, the removed ones with their layer and reason, and suspicious entries."""

    kept: list[Tool]
    removed: list[Removed]
    unknown: list[UnknownEntry]
    profile: ProfileName
    profile_source: str  # where the profile came from: "agents.<id>.tools.profile", "tools.profile" or "default"
    # For each kept tool, the entries that kept it where a layer would otherwise not have (an allow list naming it,
    # an `allow` lifting it out of a default deny list): what `bot tools --explain` shows.
    kept_by: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def names(self) -> list[str]:
        return [tool.name for tool in self.kept]


@dataclass(frozen=True)
class _Rule:
    """One allow/deny check inside a layer; `allow` None means the rule does not restrict by allow. A tool that
    a `lift` entry matches is exempt from `deny` (a default deny list with the config's `allow` over it)."""

    layer: Layer
    deny_label: str
    allow_label: str
    allow: tuple[str, ...] | None
    deny: tuple[str, ...]
    lift: tuple[str, ...] = ()
    lift_label: str = ""


def _first(entries: Iterable[str], name: str, groups: frozenset[str]) -> str | None:
    return next((entry for entry in entries if _matches(entry, name, groups)), None)


def _verdict(rule: _Rule, name: str, groups: frozenset[str]) -> str | None:
    """Why `rule` removes the tool, or None if it keeps it."""
    denied = _first(rule.deny, name, groups)
    if denied is not None and _first(rule.lift, name, groups) is None:
        return f"denied by {rule.deny_label} {denied!r}"
    if rule.allow is not None and _first(rule.allow, name, groups) is None:
        return f"not in {rule.allow_label}"
    return None


def _kept_note(rule: _Rule, name: str, groups: frozenset[str]) -> str | None:
    """For a tool `rule` keeps: the entry that kept it where the rule would otherwise not have, or None."""
    denied = _first(rule.deny, name, groups)
    if denied is not None:  # kept all the same, so lifted
        return f"{rule.lift_label} {_first(rule.lift, name, groups)!r} lifts {rule.deny_label} {denied!r}"
    if rule.allow is not None:
        return f"{rule.allow_label} has {_first(rule.allow, name, groups)!r}"
    return None


def _lists(layer: Layer, where: str, policy: ToolPolicy | AgentToolsConfig | ToolsConfig) -> _Rule:
    return _Rule(layer, f"{where}.deny", f"{where}.allow", tuple(policy.allow) or None, tuple(policy.deny))


DefaultedLayer = Literal["non_owner", "subagent"]


def _defaulted(layer: DefaultedLayer, policy: DefaultedPolicy) -> list[_Rule]:
    """The checks of a layer over a default deny list: the config's own deny and only, then the default with the
    config's allow lifting what it names."""
    where = f"tools.{layer}"
    return [
        _Rule(layer, f"{where}.deny", f"{where}.only", tuple(policy.only) or None, tuple(policy.deny)),
        _Rule(layer, f"{where} default", "", None, policy.default, tuple(policy.allow), f"{where}.allow"),
    ]


def defaulted_policies(tools: ToolsConfig | None) -> list[tuple[DefaultedLayer, DefaultedPolicy]]:
    """`tools.non_owner` and `tools.subagent` as the config has them (the defaults alone when it has no `tools:`)."""
    if tools is None:
        return [("non_owner", NonOwnerPolicy()), ("subagent", SubagentPolicy())]
    return [("non_owner", tools.non_owner), ("subagent", tools.subagent)]


def _profile_rule(layer: Layer, label: str, profile: ProfileName) -> _Rule | None:
    entries = PROFILES[profile]
    return None if entries is None else _Rule(layer, label, label, entries, ())


def _agent_where(agent_id: str | None) -> str:
    return f"agents.{agent_id}.tools" if agent_id else "agent tools"


def _provider_key(tools: ToolsConfig, selection: Selection) -> str | None:
    """The `by_provider` key that applies: `provider/model` if configured, else `provider` (any case)."""
    if not selection.provider:
        return None
    provider = selection.provider.lower()
    wanted = [provider]
    if selection.model:
        model = selection.model.lower()
        wanted.insert(0, model if model.startswith(provider + "/") else f"{provider}/{model}")
    keys = {key.lower(): key for key in tools.by_provider}
    return next((keys[key] for key in wanted if key in keys), None)


def _room_kind(key: str) -> str:
    """A `by_group` key with `channel` written as `group`: group and channel peers are one kind, as in routing."""
    parts = key.lower().split(":", 2)
    if len(parts) == 3 and parts[1] == "channel":
        parts[1] = "group"
    return ":".join(parts)


def _by_group_key(tools: ToolsConfig, selection: Selection) -> str | None:
    """The first `by_group` key, in config order, whose glob matches `<channel>:<kind>:<peer id>`; `group` and
    `channel` name the same kind of chat (a Telegram channel or supergroup, a Discord or Slack channel)."""
    if not (selection.channel and selection.peer_kind and selection.peer_id):
        return None
    target = _room_kind(f"{selection.channel}:{selection.peer_kind}:{selection.peer_id}")
    return next((key for key in tools.by_group if fnmatch.fnmatchcase(target, _room_kind(key))), None)


def _effective_profile(
    tools: ToolsConfig | None, agent: AgentToolsConfig | None, where: str
) -> tuple[ProfileName, str]:
    if agent is not None and agent.profile is not None:
        return agent.profile, f"{where}.profile"
    if tools is not None and tools.profile is not None:
        return tools.profile, "tools.profile"
    return DEFAULT_PROFILE, "default"


def _rules(
    tools: ToolsConfig | None, agent: AgentToolsConfig | None, selection: Selection, profile: ProfileName
) -> list[_Rule]:
    """Every allow/deny check this run is subject to, in layer order (owner-only is checked apart)."""
    rules: list[_Rule | None] = [_profile_rule("profile", f"profile {profile!r}", profile)]
    if tools is not None:
        rules.append(_lists("global", "tools", tools))
        key = _provider_key(tools, selection)
        if key is not None:
            by_provider = tools.by_provider[key]
            where = f"tools.by_provider[{key}]"
            if by_provider.profile is not None:
                rules.append(_profile_rule("provider", f"{where}.profile {by_provider.profile!r}", by_provider.profile))
            rules.append(_lists("provider", where, by_provider))
    if agent is not None:
        rules.append(_lists("agent", _agent_where(selection.agent), agent))
    defaulted = dict(defaulted_policies(tools))
    if not selection.is_owner:
        rules += _defaulted("non_owner", defaulted["non_owner"])
    if tools is not None:
        group_key = _by_group_key(tools, selection)
        if group_key is not None:
            rules.append(_lists("group", f"tools.by_group[{group_key}]", tools.by_group[group_key]))
        if selection.sandboxed and tools.sandbox is not None:
            rules.append(_lists("sandbox", "tools.sandbox", tools.sandbox))
    if selection.depth > 0:
        rules += _defaulted("subagent", defaulted["subagent"])
        if selection.depth >= selection.max_depth:
            where = f"subagents.max_depth ({selection.max_depth})"
            rules.append(_Rule("subagent", where, where, None, ("sessions_spawn",)))
    return [rule for rule in rules if rule is not None]


def select_tools(
    registry: ToolRegistry,
    selection: Selection,
    tools: ToolsConfig | None = None,
    agent: AgentToolsConfig | None = None,
) -> PolicyResult:
    """Run every policy layer over the registered tools; a tool is kept only if it passes them all.

    Pure: no I/O. With no `tools` and no `agent` config, the profile is full and every tool is kept
    (owner-only tools still only for owners).
    """
    profile, profile_source = _effective_profile(tools, agent, _agent_where(selection.agent))
    rules = _rules(tools, agent, selection, profile)
    kept: list[Tool] = []
    removed: list[Removed] = []
    kept_by: dict[str, tuple[str, ...]] = {}
    for tool in registry:
        groups = registry.groups_of(tool)
        verdict = _removal(tool, groups, rules, selection)
        if verdict is None:
            kept.append(tool)
            kept_by[tool.name] = _kept_notes(tool.name.lower(), groups, rules)
        else:
            removed.append(Removed(tool, *verdict))
    unknown = unknown_entries(registry, tools, agent, selection.agent)
    return PolicyResult(kept, removed, unknown, profile, profile_source, kept_by)


def _kept_notes(name: str, groups: frozenset[str], rules: Iterable[_Rule]) -> tuple[str, ...]:
    return tuple(note for rule in rules if (note := _kept_note(rule, name, groups)) is not None)


def _removal(tool: Tool, groups: frozenset[str], rules: list[_Rule], selection: Selection) -> tuple[Layer, str] | None:
    if tool.owner_only and not selection.is_owner:
        return "owner_only", "owner-only"
    if tool.agents is not None and selection.agent not in tool.agents:
        return "agent", f"only for the agents {', '.join(sorted(tool.agents)) or '(none)'}"
    name = tool.name.lower()
    for rule in rules:
        reason = _verdict(rule, name, groups)
        if reason is not None:
            return rule.layer, reason
    return None


def _layer_sections(tools: ToolsConfig) -> list[tuple[str, ToolPolicy | DefaultedPolicy | None]]:
    return [("non_owner", tools.non_owner), ("sandbox", tools.sandbox), ("subagent", tools.subagent)]


def _keyed_lists(policy: ToolPolicy | DefaultedPolicy | None) -> list[tuple[str, list[str]]]:
    """A layer's lists by key: allow and deny, and only where the layer has a default."""
    if policy is None:
        return []
    lists = [("allow", policy.allow), ("deny", policy.deny)]
    return [*lists, ("only", policy.only)] if isinstance(policy, DefaultedPolicy) else lists


def _policy_entries(
    tools: ToolsConfig | None, agent: AgentToolsConfig | None, agent_id: str | None
) -> Iterable[tuple[str, list[str]]]:
    """Every list of entries in the config, with where it is written."""
    if tools is not None:
        yield "tools.allow", tools.allow
        yield "tools.deny", tools.deny
        for key, by_provider in tools.by_provider.items():
            yield f"tools.by_provider[{key}].allow", by_provider.allow
            yield f"tools.by_provider[{key}].deny", by_provider.deny
        for key, by_group in tools.by_group.items():
            yield f"tools.by_group[{key}].allow", by_group.allow
            yield f"tools.by_group[{key}].deny", by_group.deny
        for name, policy in _layer_sections(tools):
            for key, entries in _keyed_lists(policy):
                yield f"tools.{name}.{key}", entries
    if agent is not None:
        yield f"{_agent_where(agent_id)}.allow", agent.allow
        yield f"{_agent_where(agent_id)}.deny", agent.deny


def unknown_entries(
    registry: ToolRegistry,
    tools: ToolsConfig | None = None,
    agent: AgentToolsConfig | None = None,
    agent_id: str | None = None,
) -> list[UnknownEntry]:
    """Entries that match no known tool name or group, in every layer (applying to this run or not)."""
    names = registry.known_names()
    groups = registry.group_names()
    unknown = []
    for where, entries in _policy_entries(tools, agent, agent_id):
        for entry in entries:
            if is_group_entry(entry):
                known = any(fnmatch.fnmatchcase(group, entry) for group in groups)
            else:
                known = any(_matches(entry, name, frozenset()) for name in names)
            if not known:
                unknown.append(UnknownEntry(where, entry))
    return unknown


EntryLoc = tuple[str | int, ...]


def _config_lists(
    tools: ToolsConfig | None, agents: Sequence[tuple[int, AgentToolsConfig | None]]
) -> Iterable[tuple[EntryLoc, list[str]]]:
    """Every list of entries in the config, with its key path in the file (`("tools", "by_group", key, "deny")`)."""
    if tools is not None:
        yield ("tools", "allow"), tools.allow
        yield ("tools", "deny"), tools.deny
        for kind, table in (("by_provider", tools.by_provider), ("by_group", tools.by_group)):
            for key, policy in table.items():
                yield ("tools", kind, key, "allow"), policy.allow
                yield ("tools", kind, key, "deny"), policy.deny
        for name, section in _layer_sections(tools):
            for key, entries in _keyed_lists(section):
                yield ("tools", name, key), entries
    for index, agent in agents:
        if agent is not None:
            yield ("agents", index, "tools", "allow"), agent.allow
            yield ("agents", index, "tools", "deny"), agent.deny


@dataclass(frozen=True)
class UnknownConfigEntry:
    """A policy entry written in the config that names no tool or group, where it is, and the likely meant name."""

    loc: EntryLoc  # the key path of the list item, e.g. ("tools", "allow", 0)
    entry: str
    suggestion: str | None

    @property
    def message(self) -> str:
        hint = f"; did you mean {self.suggestion!r}?" if self.suggestion else ""
        return f"{self.entry!r} names no known tool or group, so it matches nothing{hint}"


def unknown_config_entries(
    names: Iterable[str],
    groups: Iterable[str],
    tools: ToolsConfig | None,
    agents: Sequence[tuple[int, AgentToolsConfig | None]],
    tool_prefixes: Iterable[str] = (),
) -> list[UnknownConfigEntry]:
    """Entries in `tools:` and `agents[].tools` that match none of `names` (tools) or `groups`: a typo there leaves
    an agent without the tools it was meant to have, or keeps one it was meant to lose. A name starting with one of
    `tool_prefixes` (an MCP server's `<server>__`, whose tools are known only once it runs) is taken as known."""
    known_names, known_groups, prefixes = frozenset(names), frozenset(groups), tuple(tool_prefixes)
    candidates = sorted(known_names | known_groups)
    found = []
    for loc, entries in _config_lists(tools, agents):
        for index, entry in enumerate(entries):
            if is_group_entry(entry):
                known = any(fnmatch.fnmatchcase(group, entry) for group in known_groups)
            else:
                known = entry.startswith(prefixes) if prefixes else False
                known = known or any(_matches(entry, name, frozenset()) for name in known_names)
            if not known:
                close = difflib.get_close_matches(entry, candidates, n=1)
                found.append(UnknownConfigEntry((*loc, index), entry, close[0] if close else None))
    return found


def render_policy(result: PolicyResult, *, explain: bool = False) -> list[str]:
    """The result as plain text lines for `bot tools`: profile, kept names, removed ones with layer and reason; with
    `explain`, each kept tool also with the entries that kept it (`bot tools --explain`)."""
    lines = [f"profile: {result.profile} ({result.profile_source})", f"kept ({len(result.kept)}):"]
    lines += _kept_lines(result, explain) or ["  (none)"]
    if result.removed:
        width = max(len(item.name) for item in result.removed)
        layer_width = max(len(item.layer) for item in result.removed)
        lines.append(f"removed ({len(result.removed)}):")
        lines += [f"  {item.name:<{width}}  {item.layer:<{layer_width}}  {item.reason}" for item in result.removed]
    for item in result.unknown:
        lines.append(f"warning: {item.where} entry {item.entry!r} names no known tool or group")
    return lines


def _kept_lines(result: PolicyResult, explain: bool) -> list[str]:
    if not explain:
        return [f"  {tool.name}" for tool in result.kept]
    width = max((len(tool.name) for tool in result.kept), default=0)
    return [f"  {tool.name:<{width}}  {'; '.join(result.kept_by.get(tool.name, ()))}".rstrip() for tool in result.kept]


_WHO: dict[DefaultedLayer, str] = {
    "non_owner": "runs started by anyone not in owners",
    "subagent": "runs of a child sessions_spawn started",
}


def explain_defaulted(registry: ToolRegistry, tools: ToolsConfig | None) -> list[str]:
    """`tools.non_owner` and `tools.subagent` merged with their default deny lists, as plain text lines for `bot
    tools --explain`: what each denies (and from where), lifts and limits to, then every tool the layer removes or
    keeps only thanks to an entry, with that entry."""
    lines: list[str] = []
    for layer, policy in defaulted_policies(tools):
        where = f"tools.{layer}"
        denies = f"{', '.join(policy.default)} (default)"
        if policy.deny:
            denies += f"; {', '.join(policy.deny)} ({where}.deny)"
        lines += [
            f"{where} ({_WHO[layer]}), merged with its default:",
            f"  denies: {denies}",
            f"  except: {', '.join(policy.allow) + f' ({where}.allow)' if policy.allow else '(nothing)'}",
            f"  only:   {', '.join(policy.only) + f' ({where}.only)' if policy.only else '(no limit)'}",
        ]
        lines += _layer_rows(registry, _defaulted(layer, policy))
    return lines


def _explained_tools(registry: ToolRegistry) -> list[tuple[str, frozenset[str]]]:
    """The registry's tools with their groups, then the built-in ones it lacks (cron and the session tools exist
    only in a running gateway), so that what a layer does to them shows too."""
    tools = [(tool.name, registry.groups_of(tool)) for tool in registry]
    missing = sorted(BUILTIN_TOOL_NAMES - {name.lower() for name, _ in tools})
    return tools + [(name, _builtin_groups(name)) for name in missing]


def _layer_rows(registry: ToolRegistry, rules: list[_Rule]) -> list[str]:
    """Each tool `rules` remove, or keep only thanks to an entry, with the entry that does it."""
    rows: list[tuple[str, str, str]] = []
    for tool, groups in _explained_tools(registry):
        name = tool.lower()
        reason = next((why for rule in rules if (why := _verdict(rule, name, groups)) is not None), None)
        if reason is not None:
            rows.append((tool, "removed", reason))
        elif notes := _kept_notes(name, groups, rules):
            rows.append((tool, "kept", "; ".join(notes)))
    width = max((len(name) for name, _, _ in rows), default=0)
    return [f"  {name:<{width}}  {verdict:<7}  {why}" for name, verdict, why in rows]
