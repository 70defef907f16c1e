"""policy_for keeps what it decided: the same config, run and tools give the same result without deciding again,
and anything the policy reads (who asks, the tools themselves, the chat where `tools.by_group` names chats) decides
anew."""

from __future__ import annotations

from pathlib import Path

from configs import config_of

from bot.runs import assemble
from bot.runs.assemble import policy_for
from routing import Peer
from tools.base import RunInfo
from tools.builtins import builtin_registry


def run(owner: bool) -> RunInfo:
    return RunInfo(agent="main", session_key="agent:main:telegram:direct:1", channel="telegram", sender_is_owner=owner)


def test_the_same_config_run_and_tools_give_the_policy_decided_before(tmp_path: Path) -> None:
    config = config_of(tmp_path, "http://127.0.0.1:9/v1", tools={"non_owner": {"deny": ["exec"]}})
    registry = builtin_registry()
    first = policy_for(config, registry, run(owner=False), peer=Peer("direct", "1"))
    assert policy_for(config, registry, run(owner=False), peer=Peer("direct", "2")) is first  # no by_group: any chat
    assert "exec" not in {tool.name for tool in first.kept}
    owner = policy_for(config, registry, run(owner=True), peer=Peer("direct", "1"))
    assert owner is not first and "exec" in {tool.name for tool in owner.kept}
    fresh = builtin_registry()  # the same names, other tool objects (as after an MCP server reconnects)
    assert policy_for(config, fresh, run(owner=False), peer=Peer("direct", "1")) is not first
    reloaded = config_of(tmp_path, "http://127.0.0.1:9/v1", tools={"non_owner": {"deny": ["exec"]}})
    assert policy_for(reloaded, registry, run(owner=False), peer=Peer("direct", "1")) is not first


def test_where_by_group_names_chats_each_chat_is_decided_for_itself(tmp_path: Path) -> None:
    tools = {"by_group": {"telegram:group:-100": {"deny": ["web_fetch"]}}}
    config = config_of(tmp_path, "http://127.0.0.1:9/v1", tools=tools)
    registry = builtin_registry()
    named = policy_for(config, registry, run(owner=True), peer=Peer("group", "-100"))
    other = policy_for(config, registry, run(owner=True), peer=Peer("group", "-200"))
    assert "web_fetch" not in {tool.name for tool in named.kept}
    assert "web_fetch" in {tool.name for tool in other.kept}


def test_the_decisions_kept_are_bounded(tmp_path: Path) -> None:
    registry = builtin_registry()
    for index in range(assemble.POLICIES_KEPT + 5):
        config = config_of(tmp_path, f"http://127.0.0.1:9/v{index}")
        policy_for(config, registry, run(owner=True))
    assert len(assemble._POLICIES) <= assemble.POLICIES_KEPT
