"""Tool registry and policy pipeline: every layer, how entries match, profiles, and the `bot tools` rendering."""

from __future__ import annotations

import re
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from tools.base import Tool, ToolContext, ToolResult, json_result
from tools.policy import (
    LAYERS,
    AgentToolsConfig,
    PolicyResult,
    Selection,
    ToolsConfig,
    UnknownEntry,
    explain_defaulted,
    render_policy,
    select_tools,
)
from tools.registry import ToolRegistry


class NoArgs(BaseModel):
    pass


def make_tool(name: str, *, group: str | None = None, owner_only: bool = False) -> Tool:
    """A do-nothing tool called `name`."""

    async def execute(self: Tool, call_id: str, args: Any, ctx: ToolContext) -> ToolResult:
        return json_result(name)

    attributes = {
        "name": name,
        "description": f"The {name} tool.",
        "parameters": NoArgs,
        "group": group,
        "owner_only": owner_only,
        "execute": execute,
    }
    tool_class: type[Tool] = type(f"{name.title()}Tool", (Tool,), attributes)
    return tool_class()


ALL = [
    "read",
    "write",
    "exec",
    "process",
    "web_fetch",
    "web_search",
    "message",
    "memory_get",
    "session_status",
    "calendar",
    "gateway",
]


def registry() -> ToolRegistry:
    """Built-in names, a plugin tool in a group of its own, and an owner-only tool."""
    tools = ToolRegistry()
    for name in ALL[:-2]:
        tools.register(make_tool(name))
    tools.register(make_tool("calendar", group="group:office"))
    tools.register(make_tool("gateway", owner_only=True))
    return tools


def select(
    tools: dict[str, Any] | None = None, agent_tools: dict[str, Any] | None = None, **selection: Any
) -> PolicyResult:
    """The policy result for the test registry; `selection` defaults to an owner, so owner-only tools stay."""
    selection.setdefault("is_owner", True)
    return select_tools(
        registry(),
        Selection(**selection),
        ToolsConfig.model_validate(tools) if tools is not None else None,
        AgentToolsConfig.model_validate(agent_tools) if agent_tools is not None else None,
    )


def kept(tools: dict[str, Any] | None = None, agent_tools: dict[str, Any] | None = None, **selection: Any) -> list[str]:
    return select(tools, agent_tools, **selection).names


def removed(result: PolicyResult) -> dict[str, tuple[str, str]]:
    """Each removed tool's name, with the layer that removed it and why."""
    return {item.name: (item.layer, item.reason) for item in result.removed}


def without(*names: str) -> list[str]:
    return [name for name in ALL if name not in names]


# --- the registry ---------------------------------------------------------------------------------


def test_the_registry_lists_tools_in_registration_order_and_finds_them_by_name() -> None:
    tools = registry()
    assert tools.names() == ALL
    assert [tool.name for tool in tools.tools()] == ALL
    assert tools["exec"].name == "exec"
    assert tools.get("EXEC") is tools["exec"]
    assert tools.get("nope") is None
    assert "read" in tools
    assert "nope" not in tools
    assert len(tools) == len(ALL)
    with pytest.raises(KeyError):
        tools["nope"]


def test_a_duplicate_tool_name_is_an_error() -> None:
    tools = ToolRegistry([make_tool("read")])
    with pytest.raises(ValueError, match="a tool named 'Read' is already registered"):
        tools.register(make_tool("Read"))
    assert tools.names() == ["read"]


@pytest.mark.parametrize("name", ["", "has space", "group:fs", "x" * 65])
def test_a_tool_name_providers_would_reject_is_an_error(name: str) -> None:
    with pytest.raises(ValueError, match="must be 1-64 letters, digits, _ or -"):
        ToolRegistry([make_tool(name)])


def test_a_tool_group_must_be_spelled_like_a_group() -> None:
    with pytest.raises(ValueError, match="must look like 'group:<name>'"):
        ToolRegistry([make_tool("calendar", group="office")])


def test_group_members_come_from_the_builtin_table_and_each_tools_own_group() -> None:
    tools = registry()
    tools.register(make_tool("shell", group="group:runtime"))
    assert tools.members("group:runtime") == ["exec", "process", "shell"]
    assert tools.members("group:fs") == ["read", "write"]
    assert tools.members("group:office") == ["calendar"]
    assert tools.groups_of(tools["shell"]) == {"group:runtime"}
    assert tools.groups_of(tools["gateway"]) == frozenset()
    assert "group:office" in tools.group_names()
    assert "group:memory" in tools.group_names()


# --- every layer, and the name it is reported under -----------------------------------------------

# For each layer: the tools config, agent config and selection under which that layer alone removes exec.
LAYER_CASES: dict[str, tuple[dict[str, Any] | None, dict[str, Any] | None, dict[str, Any], str]] = {
    "owner_only": (None, None, {"is_owner": False}, "owner-only"),
    "profile": ({"profile": "messaging"}, None, {}, "not in profile 'messaging'"),
    "global": ({"deny": ["exec"]}, None, {}, "denied by tools.deny 'exec'"),
    "provider": (
        {"by_provider": {"openai": {"deny": ["exec"]}}},
        None,
        {"provider": "openai", "model": "gpt-4o"},
        "denied by tools.by_provider[openai].deny 'exec'",
    ),
    "agent": (None, {"deny": ["exec"]}, {"agent": "coder"}, "denied by agents.coder.tools.deny 'exec'"),
    "non_owner": (None, None, {"is_owner": False}, "denied by tools.non_owner default 'group:runtime'"),
    "group": (
        {"by_group": {"telegram:group:-100123": {"deny": ["exec"]}}},
        None,
        {"channel": "telegram", "peer_kind": "group", "peer_id": "-100123"},
        "denied by tools.by_group[telegram:group:-100123].deny 'exec'",
    ),
    "sandbox": ({"sandbox": {"deny": ["exec"]}}, None, {"sandboxed": True}, "denied by tools.sandbox.deny 'exec'"),
    "subagent": ({"subagent": {"deny": ["exec"]}}, None, {"depth": 1}, "denied by tools.subagent.deny 'exec'"),
}


def test_every_layer_has_a_case() -> None:
    assert list(LAYER_CASES) == list(LAYERS)


@pytest.mark.parametrize("layer", LAYERS)
def test_each_layer_removes_a_tool_and_is_named_in_the_result(layer: str) -> None:
    tools, agent, selection, reason = LAYER_CASES[layer]
    if layer == "owner_only":
        owner_only = ToolRegistry([make_tool("exec", owner_only=True), make_tool("message")])
        result = select_tools(owner_only, Selection(**selection))
    else:
        result = select(tools, agent, **selection)
    assert removed(result)["exec"] == (layer, reason)
    assert "exec" not in result.names
    assert "message" in result.names  # the layer removed exec, not everything


# --- runs started by someone who is not an owner --------------------------------------------------


@pytest.mark.parametrize("tools", [None, {}, {"profile": "full"}, {"deny": ["web_*"]}])
def test_a_non_owner_run_gets_no_commands_and_no_file_writes_by_default(tools: dict[str, Any] | None) -> None:
    stranger = select(tools, is_owner=False)
    owner = select(tools, is_owner=True)
    for name in ("exec", "process", "write"):
        assert removed(stranger)[name][0] == "non_owner", name
        assert name in owner.names
    assert "read" in stranger.names  # reading the workspace stays


# --- tools.non_owner and tools.subagent change their default deny lists ---------------------------------------------

GATEWAY_ONLY = ["cron", "sessions_list", "sessions_send"]  # in group:automation and group:sessions by name


def gateway_registry() -> ToolRegistry:
    """The test registry with the tools a running gateway adds: scheduling and the session tools."""
    tools = registry()
    for name in GATEWAY_ONLY:
        tools.register(make_tool(name))
    return tools


def gateway_select(tools: dict[str, Any], **selection: Any) -> PolicyResult:
    """The policy result for the gateway's registry; `selection` defaults to a non-owner."""
    return select_tools(gateway_registry(), Selection(**selection), ToolsConfig.model_validate(tools))


def test_allowing_one_tool_to_non_owners_lifts_it_and_keeps_the_rest_of_the_default() -> None:
    result = gateway_select({"non_owner": {"allow": ["cron"]}})
    assert result.names == ["read", "web_fetch", "web_search", "message", "memory_get", "session_status", "calendar",
                            "cron"]  # fmt: skip
    assert removed(result)["sessions_list"] == ("non_owner", "denied by tools.non_owner default 'group:sessions'")
    assert removed(result)["exec"] == ("non_owner", "denied by tools.non_owner default 'group:runtime'")
    assert removed(result)["write"] == ("non_owner", "denied by tools.non_owner default 'write'")
    assert result.kept_by["cron"] == ("tools.non_owner.allow 'cron' lifts tools.non_owner default 'group:automation'",)


@pytest.mark.parametrize(
    ("allow", "lifted", "still_denied"),
    [
        (["sessions_list"], ["sessions_list"], ["sessions_send", "cron", "exec"]),  # one tool out of its group
        (["group:sessions"], ["sessions_list", "sessions_send"], ["cron", "exec"]),  # the group, nothing else
        (["sessions_*"], ["sessions_list", "sessions_send"], ["cron"]),
        (["group:fs"], ["write"], ["exec", "cron"]),  # the group's members the default names
        (["*"], ["exec", "process", "write", *GATEWAY_ONLY], []),  # the whole default: what `deny: []` used to do
    ],
)
def test_non_owner_allow_lifts_exactly_what_it_names(
    allow: list[str], lifted: list[str], still_denied: list[str]
) -> None:
    result = gateway_select({"non_owner": {"allow": allow}})
    assert set(lifted) <= set(result.names)
    assert all(removed(result)[name][0] == "non_owner" for name in still_denied)
    assert "read" in result.names and "message" in result.names  # nothing the default gives is taken


def test_non_owner_deny_adds_to_the_default() -> None:
    result = gateway_select({"non_owner": {"deny": ["web_fetch"]}})
    assert removed(result)["web_fetch"] == ("non_owner", "denied by tools.non_owner.deny 'web_fetch'")
    assert removed(result)["exec"] == ("non_owner", "denied by tools.non_owner default 'group:runtime'")
    assert removed(result)["cron"][0] == removed(result)["sessions_send"][0] == "non_owner"
    assert "web_search" in result.names


def test_a_deny_list_written_to_replace_the_default_now_keeps_least_privilege() -> None:
    # Written when the section replaced the default, to let strangers write files: now it only adds.
    result = gateway_select({"non_owner": {"deny": ["group:runtime"]}})
    assert not {"exec", "write", "cron", "sessions_list"} & set(result.names)
    assert gateway_select({"non_owner": {"deny": []}}).names == gateway_select({}).names


def test_non_owner_deny_wins_over_allow() -> None:
    result = gateway_select({"non_owner": {"allow": ["group:sessions"], "deny": ["sessions_send"]}})
    assert "sessions_list" in result.names
    assert removed(result)["sessions_send"] == ("non_owner", "denied by tools.non_owner.deny 'sessions_send'")


def test_non_owner_only_limits_and_lifts_nothing() -> None:
    assert gateway_select({"non_owner": {"only": ["read", "exec"]}}).names == ["read"]  # exec: still the default's
    result = gateway_select({"non_owner": {"only": ["read", "cron"], "allow": ["cron"]}})
    assert result.names == ["read", "cron"]
    assert removed(result)["message"] == ("non_owner", "not in tools.non_owner.only")
    assert result.kept_by["read"] == ("tools.non_owner.only has 'read'",)


@pytest.mark.parametrize("entry", ["read", "session_status", "group:web", "group:messaging", " Message "])
def test_an_allow_entry_the_default_does_not_deny_is_an_error(entry: str) -> None:
    # Such an entry is the mark of the old `allow`, which limited non-owners to a list: read now, it would give more.
    with pytest.raises(ValidationError, match="is not in the non-owner default deny list") as caught:
        ToolsConfig.model_validate({"non_owner": {"allow": ["exec", entry]}})
    [error] = caught.value.errors()
    assert error["loc"] == ("non_owner", "allow", 1)  # the key path `bot config check` names with its line
    assert "list them under only:" in str(caught.value)


@pytest.mark.parametrize("entry", ["exec", "group:runtime", "group:fs", "group:memory", "cron", "mcp:github",
                                   "group:mcp", "web_*", "*", "calendar", "github__search"])  # fmt: skip
def test_an_allow_entry_that_may_lift_something_is_accepted(entry: str) -> None:
    assert ToolsConfig.model_validate({"non_owner": {"allow": [entry]}}).non_owner.allow == [entry]


def test_tools_subagent_changes_its_default_the_same_way() -> None:
    child = {"is_owner": True, "depth": 1, "max_depth": 2}
    default = removed(gateway_select({}, **child))
    assert default["cron"] == ("subagent", "denied by tools.subagent default 'group:automation'")
    assert "cron" in gateway_select({"subagent": {"allow": ["cron"]}}, **child).names
    result = gateway_select({"subagent": {"deny": ["exec"]}}, **child)
    assert removed(result)["exec"] == ("subagent", "denied by tools.subagent.deny 'exec'")
    assert removed(result)["cron"][0] == "subagent"  # the default stays
    assert gateway_select({"subagent": {"only": ["read", "cron"]}}, **child).names == ["read"]
    with pytest.raises(ValidationError, match="'read' is not in the subagent default deny list"):
        ToolsConfig.model_validate({"subagent": {"allow": ["read"]}})


def test_entries_of_only_are_checked_for_typos_too() -> None:
    result = gateway_select({"non_owner": {"only": ["raed"]}, "subagent": {"only": ["exce"]}})
    assert result.unknown == [UnknownEntry("tools.non_owner.only", "raed"), UnknownEntry("tools.subagent.only", "exce")]


def test_explain_shows_both_layers_merged_with_their_defaults() -> None:
    tools = ToolsConfig.model_validate({"non_owner": {"allow": ["cron"], "deny": ["web_fetch"]}})
    assert explain_defaulted(gateway_registry(), tools) == [
        "tools.non_owner (runs started by anyone not in owners), merged with its default:",
        "  denies: group:runtime, write, edit, memory_write, group:mcp, group:automation, group:sessions (default); "
        "web_fetch (tools.non_owner.deny)",
        "  except: cron (tools.non_owner.allow)",
        "  only:   (no limit)",
        "  write             removed  denied by tools.non_owner default 'write'",
        "  exec              removed  denied by tools.non_owner default 'group:runtime'",
        "  process           removed  denied by tools.non_owner default 'group:runtime'",
        "  web_fetch         removed  denied by tools.non_owner.deny 'web_fetch'",
        "  cron              kept     tools.non_owner.allow 'cron' lifts tools.non_owner default 'group:automation'",
        "  sessions_list     removed  denied by tools.non_owner default 'group:sessions'",
        "  sessions_send     removed  denied by tools.non_owner default 'group:sessions'",
        "  edit              removed  denied by tools.non_owner default 'edit'",
        "  memory_write      removed  denied by tools.non_owner default 'memory_write'",
        "  sessions_history  removed  denied by tools.non_owner default 'group:sessions'",
        "  sessions_spawn    removed  denied by tools.non_owner default 'group:sessions'",
        "  subagents         removed  denied by tools.non_owner default 'group:sessions'",
        "tools.subagent (runs of a child sessions_spawn started), merged with its default:",
        "  denies: group:automation (default)",
        "  except: (nothing)",
        "  only:   (no limit)",
        "  cron  removed  denied by tools.subagent default 'group:automation'",
    ]


def test_an_owner_is_never_subject_to_tools_non_owner() -> None:
    result = select({"non_owner": {"deny": ["*"]}}, is_owner=True)
    assert "exec" in result.names and "read" in result.names


# --- group and channel peers are one kind, as in routing ------------------------------------------


@pytest.mark.parametrize("key", ["telegram:group:*", "telegram:channel:*", "telegram:GROUP:-100123", "*:group:*"])
@pytest.mark.parametrize("kind", ["group", "channel"])
def test_by_group_treats_group_and_channel_peers_alike(key: str, kind: str) -> None:
    result = select({"by_group": {key: {"deny": ["exec"]}}}, channel="telegram", peer_kind=kind, peer_id="-100123")
    assert removed(result)["exec"] == ("group", f"denied by tools.by_group[{key}].deny 'exec'")


@pytest.mark.parametrize("key", ["telegram:group:*", "telegram:channel:*"])
def test_by_group_never_reaches_a_direct_chat(key: str) -> None:
    result = select({"by_group": {key: {"deny": ["exec"]}}}, channel="telegram", peer_kind="direct", peer_id="-100123")
    assert "exec" in result.names


def test_a_tool_removed_by_several_layers_is_reported_under_the_first() -> None:
    result = select({"profile": "minimal", "deny": ["exec"]}, {"deny": ["exec"]})
    assert removed(result)["exec"] == ("profile", "not in profile 'minimal'")


def test_a_tool_must_pass_every_layer() -> None:
    result = select({"allow": ["read", "write"]}, {"allow": ["write", "exec"]})
    assert result.names == ["write"]
    assert removed(result)["read"] == ("agent", "not in agent tools.allow")
    assert removed(result)["exec"] == ("global", "not in tools.allow")


# --- how entries match ----------------------------------------------------------------------------


def test_deny_wins_over_allow() -> None:
    result = select({"allow": ["exec", "read"], "deny": ["exec"]})
    assert result.names == ["read"]
    assert removed(result)["exec"] == ("global", "denied by tools.deny 'exec'")


def test_a_non_empty_allow_list_removes_what_it_does_not_name() -> None:
    result = select({"allow": ["read"]})
    assert result.names == ["read"]
    assert removed(result)["write"] == ("global", "not in tools.allow")
    assert len(result.removed) == len(ALL) - 1


def test_an_empty_allow_list_allows_everything() -> None:
    assert kept({"allow": [], "deny": []}) == ALL


def test_globs_match_tool_names() -> None:
    result = select({"deny": ["web_*", "mem?ry_get"]})
    assert result.names == without("web_fetch", "web_search", "memory_get")
    assert removed(result)["web_search"] == ("global", "denied by tools.deny 'web_*'")
    assert removed(result)["memory_get"] == ("global", "denied by tools.deny 'mem?ry_get'")


def test_star_allows_or_denies_everything() -> None:
    assert kept({"allow": ["*"]}) == ALL
    result = select({"deny": ["*"]})
    assert result.names == []
    assert {reason for _, reason in removed(result).values()} == {"denied by tools.deny '*'"}


def test_groups_name_their_builtin_members() -> None:
    result = select({"deny": ["group:runtime"]})
    assert result.names == without("exec", "process")
    assert removed(result)["process"] == ("global", "denied by tools.deny 'group:runtime'")


def test_a_tool_joins_a_group_through_its_own_group_attribute() -> None:
    assert kept({"allow": ["group:office"]}) == ["calendar"]
    tools = registry()
    tools.register(make_tool("shell", group="group:runtime"))
    result = select_tools(tools, Selection(is_owner=True), ToolsConfig(deny=["group:runtime"]))
    assert "shell" not in result.names
    assert {item.name for item in result.removed} == {"exec", "process", "shell"}


def test_entries_match_whatever_their_case() -> None:
    config = ToolsConfig.model_validate({"deny": [" Exec ", "WEB_*", "Group:FS"]})
    assert config.deny == ["exec", "web_*", "group:fs"]
    result = select_tools(registry(), Selection(is_owner=True), config)
    assert result.names == without("exec", "web_fetch", "web_search", "read", "write")


# --- profiles -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("profile", "names"),
    [
        ("minimal", ["session_status"]),
        ("messaging", ["message", "session_status"]),
        (
            "coding",
            ["read", "write", "exec", "process", "web_fetch", "web_search", "memory_get", "session_status"],
        ),
        ("full", ALL),
    ],
)
def test_profile_contents(profile: str, names: list[str]) -> None:
    result = select({"profile": profile})
    assert result.names == names
    assert result.profile == profile
    assert all(item.layer == "profile" for item in result.removed)


def test_the_agent_profile_replaces_the_global_one() -> None:
    result = select({"profile": "minimal"}, {"profile": "messaging"}, agent="helper")
    assert result.names == ["message", "session_status"]
    assert (result.profile, result.profile_source) == ("messaging", "agents.helper.tools.profile")


def test_the_global_profile_applies_when_the_agent_sets_none() -> None:
    result = select({"profile": "minimal"}, {"deny": ["exec"]})
    assert result.names == ["session_status"]
    assert (result.profile, result.profile_source) == ("minimal", "tools.profile")


def test_without_any_profile_the_profile_is_full() -> None:
    result = select({"deny": ["exec"]})
    assert (result.profile, result.profile_source) == ("full", "default")
    assert result.names == without("exec")


def test_profile_names_are_read_in_any_case_and_unknown_ones_are_rejected() -> None:
    assert ToolsConfig.model_validate({"profile": " Coding "}).profile == "coding"
    with pytest.raises(ValidationError, match="'minimal', 'messaging', 'coding' or 'full'"):
        ToolsConfig.model_validate({"profile": "everything"})


# --- owner-only -----------------------------------------------------------------------------------


def test_owner_only_tools_are_hidden_from_non_owners() -> None:
    result = select({"non_owner": {"allow": ["*"]}}, is_owner=False)  # the default lifted: only owner-only removes
    assert result.names == without("gateway")
    assert removed(result) == {"gateway": ("owner_only", "owner-only")}


def test_owner_only_tools_are_shown_to_owners() -> None:
    assert "gateway" in kept(is_owner=True)


# --- provider -------------------------------------------------------------------------------------

BY_PROVIDER = {
    "by_provider": {
        "openai": {"deny": ["exec"]},
        "OpenAI/GPT-4o-Mini": {"deny": ["write"]},
        "google": {"profile": "minimal"},
    }
}


def test_a_provider_model_key_takes_precedence_over_the_provider_key() -> None:
    result = select(BY_PROVIDER, provider="openai", model="gpt-4o-mini")
    assert result.names == without("write")
    assert removed(result)["write"] == ("provider", "denied by tools.by_provider[OpenAI/GPT-4o-Mini].deny 'write'")


def test_the_provider_key_applies_to_its_other_models() -> None:
    result = select(BY_PROVIDER, provider="OpenAI", model="gpt-4o")
    assert result.names == without("exec")
    assert removed(result)["exec"] == ("provider", "denied by tools.by_provider[openai].deny 'exec'")


def test_a_full_model_ref_finds_the_provider_model_key() -> None:
    assert kept(BY_PROVIDER, provider="openai", model="openai/gpt-4o-mini") == without("write")


def test_a_provider_profile_narrows_the_tools_in_the_provider_layer() -> None:
    result = select(BY_PROVIDER, provider="google", model="gemini-2.5-flash")
    assert result.names == ["session_status"]
    assert removed(result)["read"] == ("provider", "not in tools.by_provider[google].profile 'minimal'")


def test_no_provider_layer_without_a_matching_key() -> None:
    assert kept(BY_PROVIDER, provider="anthropic", model="claude-sonnet-4") == ALL
    assert kept(BY_PROVIDER) == ALL


# --- chat groups ----------------------------------------------------------------------------------

BY_GROUP = {
    "by_group": {
        "Discord:Channel:*": {"deny": ["exec"]},
        "discord:channel:42": {"deny": ["write"]},
        "telegram:group:-100*": {"allow": ["message"]},
    }
}


def test_group_keys_are_globs_and_the_first_matching_key_applies() -> None:
    result = select(BY_GROUP, channel="discord", peer_kind="channel", peer_id="42")
    assert result.names == without("exec")
    assert removed(result)["exec"] == ("group", "denied by tools.by_group[Discord:Channel:*].deny 'exec'")


def test_a_group_key_glob_matches_peer_ids() -> None:
    result = select(BY_GROUP, channel="telegram", peer_kind="group", peer_id="-100123")
    assert result.names == ["message"]
    assert removed(result)["read"] == ("group", "not in tools.by_group[telegram:group:-100*].allow")


def test_no_group_layer_for_other_chats_or_without_a_peer() -> None:
    assert kept(BY_GROUP, channel="telegram", peer_kind="direct", peer_id="-100123") == ALL
    assert kept(BY_GROUP, channel="slack", peer_kind="channel", peer_id="42") == ALL
    assert kept(BY_GROUP, channel="discord") == ALL


def test_a_group_key_that_could_never_match_is_rejected() -> None:
    expected = re.escape("must be <channel>:<direct|group|channel>:<peer id>, e.g. telegram:group:-100123")
    with pytest.raises(ValidationError, match=expected):
        ToolsConfig.model_validate({"by_group": {"telegram:dm:123": {"deny": ["exec"]}}})
    with pytest.raises(ValidationError, match=expected):
        ToolsConfig.model_validate({"by_group": {"telegram:-100123": {"deny": ["exec"]}}})
    accepted = ToolsConfig.model_validate({"by_group": {"discord:*": {}, "slack:*:C1": {}, "telegram:GROUP:-1": {}}})
    assert list(accepted.by_group) == ["discord:*", "slack:*:C1", "telegram:GROUP:-1"]


def test_a_broad_glob_key_applies_to_every_chat_it_matches() -> None:
    config = {"by_group": {"discord:*": {"deny": ["exec"]}}}
    assert kept(config, channel="discord", peer_kind="direct", peer_id="7") == without("exec")
    assert kept(config, channel="discord", peer_kind="Channel", peer_id="42") == without("exec")


# --- sandbox and subagent -------------------------------------------------------------------------

RUN_KINDS = {"sandbox": {"deny": ["exec"]}, "subagent": {"only": ["read"]}}


def test_the_sandbox_layer_applies_only_to_sandboxed_runs() -> None:
    assert kept(RUN_KINDS, sandboxed=True) == without("exec")
    assert kept(RUN_KINDS, sandboxed=False) == ALL


def test_the_subagent_layer_applies_only_to_subagent_runs() -> None:
    result = select(RUN_KINDS, depth=1)
    assert result.names == ["read"]
    assert removed(result)["write"] == ("subagent", "not in tools.subagent.only")
    assert kept(RUN_KINDS, depth=0) == ALL


def test_a_sandboxed_subagent_passes_both_layers() -> None:
    assert kept(RUN_KINDS, sandboxed=True, depth=1) == ["read"]
    assert kept({**RUN_KINDS, "subagent": {"only": ["exec", "read"]}}, sandboxed=True, depth=1) == ["read"]


# --- no config ------------------------------------------------------------------------------------


def test_with_no_tools_config_at_all_everything_is_kept() -> None:
    result = select_tools(registry(), Selection(is_owner=True))
    assert result.names == ALL
    assert result.removed == []
    assert result.unknown == []
    assert result.profile == "full"


def test_an_empty_tools_section_keeps_everything() -> None:
    # `tools:` with only commented-out keys: the lists read as null.
    config = ToolsConfig.model_validate({"allow": None, "deny": None, "by_group": None})
    assert select_tools(registry(), Selection(is_owner=True), config, AgentToolsConfig()).names == ALL


def test_config_models_reject_unknown_keys_and_empty_entries() -> None:
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        ToolsConfig.model_validate({"by_group": {"discord:channel:*": {"profile": "minimal"}}})
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        AgentToolsConfig.model_validate({"sandbox": {}})
    with pytest.raises(ValidationError, match="must be a tool name"):
        ToolsConfig.model_validate({"deny": ["  "]})


# --- unknown entries ------------------------------------------------------------------------------


def test_entries_naming_no_known_tool_or_group_are_reported() -> None:
    config = {
        "deny": ["exce", "web_*", "wbe_*", "group:office", "group:fss", "memory_write", "*"],
        "by_provider": {"anthropic": {"allow": ["raed"]}},
        "by_group": {"slack:channel:*": {"deny": ["group:*"]}},
        "sandbox": {"allow": ["session_status", "proces"]},
    }
    result = select(config, {"allow": ["mesage"]}, agent="helper", provider="openai")
    assert result.unknown == [
        UnknownEntry("tools.deny", "exce"),
        UnknownEntry("tools.deny", "wbe_*"),
        UnknownEntry("tools.deny", "group:fss"),
        UnknownEntry("tools.by_provider[anthropic].allow", "raed"),
        UnknownEntry("tools.sandbox.allow", "proces"),
        UnknownEntry("agents.helper.tools.allow", "mesage"),
    ]


# --- rendering for `bot tools` --------------------------------------------------------------------


def test_the_result_renders_as_plain_text_lines() -> None:
    result = select(
        {"profile": "coding", "deny": ["exce", "process"], "non_owner": {"allow": ["*"]}},
        {"deny": ["web_*"]},
        agent="coder",
        is_owner=False,
    )
    assert render_policy(result) == [
        "profile: coding (tools.profile)",
        "kept (5):",
        "  read",
        "  write",
        "  exec",
        "  memory_get",
        "  session_status",
        "removed (6):",
        "  process     global      denied by tools.deny 'process'",
        "  web_fetch   agent       denied by agents.coder.tools.deny 'web_*'",
        "  web_search  agent       denied by agents.coder.tools.deny 'web_*'",
        "  message     profile     not in profile 'coding'",
        "  calendar    profile     not in profile 'coding'",
        "  gateway     owner_only  owner-only",
        "warning: tools.deny entry 'exce' names no known tool or group",
    ]


def test_nothing_kept_renders_as_none() -> None:
    lines = render_policy(select({"deny": ["*"]}))
    assert lines[:3] == ["profile: full (default)", "kept (0):", "  (none)"]
