"""`sessions_spawn`'s limits and a child's powers, in one process (App + MemoryChannel + the fake LLM): the caps per
conversation and in all, which agents may be started, a child acting for whoever its parent acted for, steering a
running child, a child's own time limit, and the config that sets them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from configs import config_of
from fakes.llm import FakeLLM, Reply, ToolCallSpec
from helpers import eventually, read_state

from bot import App, ConfigError
from bot.config.settings import Config
from channels import AccountSettings, MemoryChannel

OWNER = "ann"


def config(llm: FakeLLM, tmp_path: Path, **extra: Any) -> Config:
    return config_of(tmp_path, llm, owners=[f"memory:{OWNER}", "memory:cat"], **extra)


@pytest.fixture
def chat() -> MemoryChannel:
    return MemoryChannel(settings=AccountSettings(dm_policy="open"))


def spawn(task: str, **args: Any) -> ToolCallSpec:
    return ToolCallSpec("sessions_spawn", {"task": task, **args})


def results(llm: FakeLLM, marker: str) -> list[dict[str, Any]]:
    """The JSON results of the tool calls the conversation starting with `marker` saw in its last request."""
    found = []
    for request in llm.requests:
        messages = request.body["messages"]
        users = [m for m in messages if m["role"] == "user"]
        if users and marker in json.dumps(users[0]["content"]):
            found = [json.loads(m["content"]) for m in messages if m["role"] == "tool"]
    return found


def tools_of(llm: FakeLLM, marker: str) -> list[str]:
    for request in llm.requests:
        users = [m for m in request.body["messages"] if m["role"] == "user"]
        if users and marker in json.dumps(users[0]["content"]):
            return sorted(tool["function"]["name"] for tool in request.body.get("tools", []))
    raise AssertionError(f"no request of {marker!r}")


def statuses(tmp_path: Path) -> list[str]:
    return [row[0] for row in read_state(tmp_path / "state", "SELECT status FROM subagent_runs ORDER BY created")]


async def test_a_conversation_runs_at_most_max_concurrent_children_and_the_bot_max_total(
    fake_llm: FakeLLM, chat: MemoryChannel, tmp_path: Path
) -> None:
    settings = config(fake_llm, tmp_path, subagents={"max_concurrent": 2, "max_total": 3})
    fake_llm.script_for("three at once", Reply.tool_calls(*(spawn(f"TASK-{n}") for n in (1, 2, 3))), "Two started.")
    fake_llm.script_for("one more", Reply.tool_calls(spawn("TASK-4"), spawn("TASK-5")), "One more started.")
    for n in (1, 2, 3, 4):
        fake_llm.script_for(f"TASK-{n}", Reply.held(f"result {n}"))
    async with App(settings, tmp_path / "state", adapters=[chat]).running(grace_seconds=0.1):
        await chat.say("three at once", sender=OWNER)
        assert [sent.text for sent in await chat.replies()] == ["Two started."]
        first = results(fake_llm, "three at once")
        assert [result["status"] for result in first[:2]] == ["started", "started"]
        assert "subagents.max_concurrent 2" in first[2]["error"]

        await chat.say("one more", sender="cat")  # another conversation: its own two, but the bot's third is the last
        assert [sent.text for sent in await chat.replies()] == ["One more started."]
        second = results(fake_llm, "one more")
        assert second[0]["status"] == "started"
        assert "subagents.max_total" in second[1]["error"]
        await eventually(lambda: fake_llm.holding == 3, "three children to be working")
    assert statuses(tmp_path) == ["running"] * 3  # cut by shutdown: run again at the next start


async def test_only_agents_named_in_subagents_allow_can_be_started(
    fake_llm: FakeLLM, chat: MemoryChannel, tmp_path: Path
) -> None:
    agents = [{"id": "main", "default": True, "subagents": {"allow": ["ops"]}}, {"id": "ops"}, {"id": "lab"}]
    settings = config(fake_llm, tmp_path, agents=agents)
    calls = Reply.tool_calls(spawn("OPS-TASK", agent="ops"), spawn("LAB-TASK", agent="lab"), spawn("X", agent="nope"))
    fake_llm.script_for("delegate", calls, "Delegated.", "Ops is done.")
    fake_llm.script_for("OPS-TASK", "ops result")
    async with App(settings, tmp_path / "state", adapters=[chat]).running():
        await chat.say("delegate", sender=OWNER)
        assert [sent.text for sent in await chat.replies(2)] == ["Delegated.", "Ops is done."]
    started, lab, unknown = results(fake_llm, "delegate")[:3]
    assert started["agent"] == "ops" and started["session_key"] == f"agent:ops:subagent:{started['run_id']}"
    assert lab["error"] == "agent main may not start agent lab (agents[].subagents.allow)"
    assert unknown["error"].startswith("no agent 'nope'; agents are main, ops, lab")


async def test_a_child_acts_for_whoever_its_parent_acted_for(
    fake_llm: FakeLLM, chat: MemoryChannel, tmp_path: Path
) -> None:
    # Non-owners may spawn here (the default denies them every session tool), but not run commands.
    settings = config(fake_llm, tmp_path, tools={"non_owner": {"allow": ["sessions_spawn"]}})
    fake_llm.script_for("stranger asks", Reply.tool_calls(spawn("STRANGER-TASK")), "On it.", "Done.")
    fake_llm.script_for("STRANGER-TASK", "nothing found")
    fake_llm.script_for("owner asks", Reply.tool_calls(spawn("OWNER-TASK")), "On it.", "Done.")
    fake_llm.script_for("OWNER-TASK", "found it")
    async with App(settings, tmp_path / "state", adapters=[chat]).running():
        await chat.say("stranger asks", sender="bob")
        assert [sent.text for sent in await chat.replies(2)] == ["On it.", "Done."]
        await chat.say("owner asks", sender=OWNER)
        assert [sent.text for sent in await chat.replies(2)] == ["On it.", "Done."]
    assert "exec" not in tools_of(fake_llm, "STRANGER-TASK")  # the non_owner layer, as for bob himself
    assert "exec" in tools_of(fake_llm, "OWNER-TASK")
    assert "message" in tools_of(fake_llm, "OWNER-TASK")  # its own chat only (cross_chat none)


async def test_a_running_child_reads_what_it_is_steered_with_at_its_next_step(
    fake_llm: FakeLLM, chat: MemoryChannel, tmp_path: Path
) -> None:
    settings = config(fake_llm, tmp_path)
    fake_llm.script_for("research", Reply.tool_calls(spawn("STEERED-TASK", label="libs")), "Started.")
    step = Reply(calls=(ToolCallSpec("session_status"),), hold=True)  # held before its tool call
    fake_llm.script_for("STEERED-TASK", step, "Only the MIT ones: A.")
    async with App(settings, tmp_path / "state", adapters=[chat]).running():
        await chat.say("research", sender=OWNER)
        assert [sent.text for sent in await chat.replies()] == ["Started."]
        await eventually(lambda: fake_llm.holding == 1, "the child to be working")
        [(run_id,)] = read_state(tmp_path / "state", "SELECT id FROM subagent_runs")
        steer = ToolCallSpec("subagents", {"action": "steer", "id": run_id, "message": "only MIT-licensed ones"})
        fake_llm.script_for("research", Reply.tool_calls(steer), "Told it.", "It says: A.")
        await chat.say("only MIT please", sender=OWNER)
        assert [sent.text for sent in await chat.replies()] == ["Told it."]
        fake_llm.release()
        assert [sent.text for sent in await chat.replies()] == ["It says: A."]
    assert results(fake_llm, "research")[-1]["status"] == "sent"
    child = [r.body for r in fake_llm.requests if "STEERED-TASK" in json.dumps(r.body["messages"][1]["content"])]
    assert "only MIT-licensed ones" in json.dumps(child[-1]["messages"][-1]["content"])  # after the tool's result
    assert statuses(tmp_path) == ["done"]


async def test_a_child_that_runs_past_its_time_limit_is_announced_as_out_of_time(
    fake_llm: FakeLLM, chat: MemoryChannel, tmp_path: Path
) -> None:
    settings = config(fake_llm, tmp_path)
    fake_llm.script_for(
        "slow job", Reply.tool_calls(spawn("SLOW-TASK", timeout_seconds=0.5)), "Started.", "It gave up."
    )
    fake_llm.script_for("SLOW-TASK", Reply.held("still thinking"))  # never released: only the limit ends it
    async with App(settings, tmp_path / "state", adapters=[chat]).running():
        await chat.say("slow job", sender=OWNER)
        assert [sent.text for sent in await chat.replies(2)] == ["Started.", "It gave up."]
    assert statuses(tmp_path) == ["timed_out"]
    last = [r.body for r in fake_llm.requests if "slow job" in json.dumps(r.body["messages"][1]["content"])][-1]
    assert "ran out of time" in json.dumps(last["messages"][-1]["content"])


def test_subagent_settings_are_checked_with_file_and_line(fake_llm: FakeLLM, tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        config(fake_llm, tmp_path, subagents={"max_depth": 9, "max_concurent": 2})
    text = str(caught.value)
    assert "subagents.max_depth" in text and "subagents.max_concurent" in text
    with pytest.raises(ConfigError) as caught:
        config(fake_llm, tmp_path, tools={"agent_to_agent": {"allow": [["main"]]}})
    assert "tools.agent_to_agent.allow" in str(caught.value)
    paired = config(fake_llm, tmp_path, tools={"agent_to_agent": {"allow": [["main", "*"]]}})
    assert paired.tools is not None and paired.tools.agent_to_agent.allows("ops", "main")
    assert not paired.tools.agent_to_agent.allows("ops", "lab")


async def test_a_child_killed_before_it_ran_is_announced_as_killed_and_never_runs(
    fake_llm: FakeLLM, chat: MemoryChannel, tmp_path: Path
) -> None:
    settings = config(fake_llm, tmp_path, defaults={"max_concurrent": 1})
    # The parent keeps the only run slot while its answer is held: the child waits for it, never running.
    fake_llm.script_for("start", Reply.tool_calls(spawn("NEVER-RUN")), Reply.held("Started."), "It never ran.")
    async with App(settings, tmp_path / "state", adapters=[chat]).running():
        await chat.say("start", sender=OWNER)
        await eventually(lambda: fake_llm.holding == 1, "the parent's answer to be held")
        [(run_id,)] = read_state(tmp_path / "state", "SELECT id FROM subagent_runs")
        await chat.say(f"/subagents kill {run_id}", sender=OWNER)
        assert [sent.text for sent in await chat.replies()] == [f"Stopped {run_id}."]
        fake_llm.release()
        assert [sent.text for sent in await chat.replies(2)] == ["Started.", "It never ran."]
    assert statuses(tmp_path) == ["killed"]
    assert not [r for r in fake_llm.requests if "NEVER-RUN" in json.dumps(r.body["messages"][1]["content"])]
    unfinished = read_state(tmp_path / "state", "SELECT count(*) FROM inbound WHERE status IN ('pending', 'running')")
    assert unfinished == [(0,)]
