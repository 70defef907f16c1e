"""Subagents and messages between sessions through a real `bot run` (the fake Telegram, the fake LLM): a child's result
announced in the parent's chat once while the parent answers meanwhile, without `sessions_spawn` in the child's tools;
a child stopped with `/subagents kill` announced as killed; a child running when the bot is SIGKILLed run again and
announced once after the restart; `sessions_send` answered between allowed agents and refused otherwise, and answered
once when the bot is SIGKILLed while its sender waits; two agents messaging each other stopped at the cap."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

from configs import config_dict, telegram
from fakes.llm import FakeLLM, Reply, ToolCallSpec
from fakes.telegram import FakeTelegram
from helpers import bot_run, eventually, launch_bot, read_state, settled

OWNER = 4242
OTHER_OWNER = 4343
STARTED = "channel telegram account main started"
TASK = "CHILD-TASK: compare the five libraries"


def config(tmp_path: Path, fake_llm: FakeLLM, tg: FakeTelegram, **extra: Any) -> dict[str, Any]:
    owners = [f"telegram:{OWNER}", f"telegram:{OTHER_OWNER}"]
    base = {"agents": [{"id": "main", "default": True}], "owners": owners}  # `extra` may replace the agents
    return config_dict(tmp_path, fake_llm, telegram(tg), base, **extra)


def spawn(**args: Any) -> Reply:
    return Reply.tool_calls(ToolCallSpec("sessions_spawn", {"task": TASK, "label": "libs", **args}))


def children(tmp_path: Path) -> list[tuple[str, str, str | None]]:
    """(id, status, result) of every subagent run, oldest first."""
    sql = "SELECT id, status, result FROM subagent_runs WHERE ended IS NOT NULL OR status != '' ORDER BY created"
    return [tuple(row) for row in read_state(tmp_path / "state", sql)]  # type: ignore[misc]


def ended(tmp_path: Path) -> list[str]:
    return [
        row[0] for row in read_state(tmp_path / "state", "SELECT status FROM subagent_runs WHERE ended IS NOT NULL")
    ]


def tool_names(body: dict[str, Any]) -> list[str]:
    return sorted(tool["function"]["name"] for tool in body.get("tools", []))


def requests_of(llm: FakeLLM, marker: str) -> list[dict[str, Any]]:
    """The bodies of the requests whose first user message holds `marker` (one conversation's)."""
    found = []
    for request in llm.requests:
        users = [m for m in request.body.get("messages", []) if m.get("role") == "user"]
        if users and marker in json.dumps(users[0]["content"]):
            found.append(request.body)
    return found


def last_user_text(body: dict[str, Any]) -> str:
    content = [m for m in body["messages"] if m["role"] in ("user", "tool")][-1]["content"]
    return content if isinstance(content, str) else json.dumps(content)


async def test_a_childs_result_is_announced_once_while_the_parent_answers_meanwhile(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg = fake_telegram
    fake_llm.script_for("Research these", spawn(), "I started a background task.", "It is noon.", "Done: A beats B.")
    fake_llm.script_for(TASK, Reply.held("Findings: A beats B."))
    async with bot_run(config(tmp_path, fake_llm, tg), tmp_path, STARTED):
        await tg.private_message("Research these five libraries", user_id=OWNER, name="Owner")
        assert await tg.wait_sent(OWNER, 1) == ["I started a background task."]
        await eventually(lambda: fake_llm.holding == 1, "the child to be working")

        await tg.private_message("What time is it?", user_id=OWNER, name="Owner")
        assert await tg.wait_sent(OWNER, 2) == ["I started a background task.", "It is noon."]
        assert fake_llm.holding == 1  # answered while the child still works

        fake_llm.release()
        assert await tg.wait_sent(OWNER, 3) == ["I started a background task.", "It is noon.", "Done: A beats B."]
        await eventually(lambda: settled(tmp_path / "state"), "the announcement's turn to settle")
    assert tg.sent[OWNER] == ["I started a background task.", "It is noon.", "Done: A beats B."]  # once each

    [(run_id, status, result)] = children(tmp_path)
    assert (status, result) == ("done", "Findings: A beats B.")
    [child] = requests_of(fake_llm, TASK)
    assert "sessions_spawn" not in tool_names(child)  # the subagent layer: a child cannot spawn (max_depth 1)
    assert "cron" not in tool_names(child)
    parent = requests_of(fake_llm, "Research these")
    assert "sessions_spawn" in tool_names(parent[0])
    announced = last_user_text(parent[-1])
    assert f"(run {run_id}, agent main) finished" in announced
    assert "EXTERNAL_UNTRUSTED_CONTENT" in announced and "Findings: A beats B." in announced


async def test_a_child_killed_with_subagents_kill_is_announced_as_killed(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg = fake_telegram
    fake_llm.script_for("Research these", spawn(), "Started it.", "OK, I stopped the research.")
    fake_llm.script_for(TASK, Reply.held("never finished"))
    async with bot_run(config(tmp_path, fake_llm, tg), tmp_path, STARTED):
        await tg.private_message("Research these five libraries", user_id=OWNER, name="Owner")
        await eventually(lambda: fake_llm.holding == 1, "the child to be working")
        [run_id] = [row[0] for row in read_state(tmp_path / "state", "SELECT id FROM subagent_runs")]
        assert await tg.wait_sent(OWNER, 1) == ["Started it."]  # the parent's answer first: then the listing

        await tg.private_message("/subagents", user_id=OWNER, name="Owner")
        listed = (await tg.wait_sent(OWNER, 2))[-1]
        assert f"{run_id} 'libs' (main): running" in listed

        await tg.private_message(f"/subagents kill {run_id}", user_id=OWNER, name="Owner")
        sent = await tg.wait_sent(OWNER, 4)
        assert sent[2:] == [f"Stopped {run_id}.", "OK, I stopped the research."]
        await eventually(lambda: settled(tmp_path / "state"), "the announcement's turn to settle")
    assert ended(tmp_path) == ["killed"]
    announced = last_user_text(requests_of(fake_llm, "Research these")[-1])
    assert f"(run {run_id}, agent main) was stopped" in announced
    assert len(tg.sent[OWNER]) == 4


async def test_a_child_running_when_the_bot_is_killed_runs_again_and_is_announced_once(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg = fake_telegram
    fake_llm.script_for("Research these", spawn(), "Started it.", "Done: A beats B.")
    fake_llm.script_for(TASK, Reply.held("lost with the process"), "Findings: A beats B.")
    settings = config(tmp_path, fake_llm, tg)
    process = await launch_bot(settings, tmp_path, STARTED)
    try:
        await tg.private_message("Research these five libraries", user_id=OWNER, name="Owner")
        assert await tg.wait_sent(OWNER, 1) == ["Started it."]
        await eventually(lambda: fake_llm.holding == 1, "the child to be working")
        # Killed once "Started it." is recorded as sent too: a reply Telegram took in the instant before the kill,
        # not yet recorded, would be sent again after the restart (at least once), which is not what this test is about.
        await eventually(lambda: not unsent(tmp_path), "the parent's reply to be recorded as sent")
    finally:
        process.send_signal(signal.SIGKILL)
        await process.wait()

    async with bot_run(settings, tmp_path, STARTED):
        assert await tg.wait_sent(OWNER, 2) == ["Started it.", "Done: A beats B."]
        await eventually(lambda: settled(tmp_path / "state"), "the announcement's turn to settle")
    assert tg.sent[OWNER] == ["Started it.", "Done: A beats B."]
    assert [(status, result) for _, status, result in children(tmp_path)] == [("done", "Findings: A beats B.")]
    assert len(requests_of(fake_llm, TASK)) == 2  # run again from its task after the restart


def unsent(tmp_path: Path) -> list[tuple[Any, ...]]:
    return read_state(tmp_path / "state", "SELECT id FROM outbox WHERE status = 'pending'")


def agents_config(tmp_path: Path, fake_llm: FakeLLM, tg: FakeTelegram, allow: list[list[str]]) -> dict[str, Any]:
    """Two agents, `main` for the owner's DM and `ops` for the other owner's, and `tools.agent_to_agent.allow`."""
    return config(
        tmp_path, fake_llm, tg,
        agents=[{"id": "main", "default": True}, {"id": "ops"}],
        bindings=[{"agent": "ops", "match": {"channel": "telegram", "account": "main",
                                             "peer": {"kind": "direct", "id": str(OTHER_OWNER)}}}],
        tools={"agent_to_agent": {"allow": allow}},
    )  # fmt: skip


async def ops_session(tmp_path: Path, fake_llm: FakeLLM, tg: FakeTelegram) -> str:
    """The other owner says hello to `ops`: its session's key."""
    fake_llm.script_for("hello ops", "Hi.")
    await tg.private_message("hello ops", user_id=OTHER_OWNER, name="Other")
    assert await tg.wait_sent(OTHER_OWNER, 1) == ["Hi."]
    [(key,)] = read_state(tmp_path / "state", "SELECT session_key FROM sessions WHERE agent = 'ops'")
    return str(key)


def send(key: str, message: str, wait: float) -> Reply:
    return Reply.tool_calls(
        ToolCallSpec("sessions_send", {"session_key": key, "message": message, "wait_seconds": wait})
    )


def tool_results(body: dict[str, Any]) -> list[str]:
    return [m["content"] if isinstance(m["content"], str) else json.dumps(m["content"]) for m in body["messages"]
            if m["role"] == "tool"]  # fmt: skip


async def test_sessions_send_between_allowed_agents_returns_the_reply_and_is_refused_otherwise(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg = fake_telegram
    async with bot_run(agents_config(tmp_path, fake_llm, tg, [["main", "ops"]]), tmp_path, STARTED):
        key = await ops_session(tmp_path, fake_llm, tg)
        fake_llm.script_for("hello ops", "All green.")
        fake_llm.script_for("How is ops", send(key, "status?", 60), "Ops says: all green.")
        await tg.private_message("How is ops doing?", user_id=OWNER, name="Owner")
        assert await tg.wait_sent(OWNER, 1) == ["Ops says: all green."]
        await eventually(lambda: settled(tmp_path / "state"), "both turns to settle")
    [answer] = tool_results(requests_of(fake_llm, "How is ops")[-1])
    assert '"status": "answered"' in answer and "All green." in answer and "EXTERNAL_UNTRUSTED_CONTENT" in answer
    asked = last_user_text(requests_of(fake_llm, "hello ops")[-1])
    assert "status?" in asked and "(agent main)" in asked
    assert tg.sent[OTHER_OWNER] == ["Hi."]  # ops answered main, not its own chat


async def test_sessions_send_between_agents_the_config_does_not_pair_is_refused(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg = fake_telegram
    async with bot_run(agents_config(tmp_path, fake_llm, tg, [["main", "lab"]]), tmp_path, STARTED):
        key = await ops_session(tmp_path, fake_llm, tg)
        fake_llm.script_for("How is ops", send(key, "status?", 60), "I may not ask ops.")
        await tg.private_message("How is ops doing?", user_id=OWNER, name="Owner")
        assert await tg.wait_sent(OWNER, 1) == ["I may not ask ops."]
    [refusal] = tool_results(requests_of(fake_llm, "How is ops")[-1])
    assert "agent main may not message agent ops (tools.agent_to_agent.allow)" in refusal
    assert len(requests_of(fake_llm, "hello ops")) == 1  # only its own hello


async def test_two_agents_that_keep_messaging_each_other_stop_at_the_cap(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg = fake_telegram
    async with bot_run(agents_config(tmp_path, fake_llm, tg, [["main", "ops"]]), tmp_path, STARTED):
        ops_key = await ops_session(tmp_path, fake_llm, tg)
        main_key = f"agent:main:telegram:direct:{OWNER}"
        # Each agent, whenever it is asked anything, messages the other without waiting, then says nothing.
        fake_llm.script_for(
            "Keep pinging", send(ops_key, "ping", 0), "Started.", *[send(ops_key, "ping", 0), "NO_REPLY"] * 3
        )
        fake_llm.script_for("hello ops", *[send(main_key, "pong", 0), "NO_REPLY"] * 3)
        await tg.private_message("Keep pinging ops", user_id=OWNER, name="Owner")
        assert await tg.wait_sent(OWNER, 1) == ["Started."]
        await eventually(lambda: fake_llm.pending == 2, "the exchange to reach its cap")  # main's last send unused
        await eventually(lambda: settled(tmp_path / "state"), "every turn to settle")
    assert tg.sent[OWNER] == ["Started."] and tg.sent[OTHER_OWNER] == ["Hi."]
    ops_turns = requests_of(fake_llm, "hello ops")[1:]
    assert len(ops_turns) == 6  # three turns (exchanges 1, 3, 5) of two requests each
    last = tool_results(ops_turns[-1])[-1]
    assert "has had 5 messages (tools.agent_to_agent.max_exchanges 5)" in last
    assert len(requests_of(fake_llm, "Keep pinging")) == 6  # the owner's turn, then exchanges 2 and 4


async def test_a_sessions_send_whose_sender_waited_across_a_sigkill_gets_one_answer(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg = fake_telegram
    settings = agents_config(tmp_path, fake_llm, tg, [["main", "ops"]])
    process = await launch_bot(settings, tmp_path, STARTED)
    try:
        key = await ops_session(tmp_path, fake_llm, tg)
        # Each turn runs again from its start after the restart, so each is scripted twice; a third answer would
        # come only from a second request to ops, or from its answer coming back to main as a message as well.
        fake_llm.script_for("hello ops", Reply.held("lost with the process"), "All green.", "All green, again.")
        fake_llm.script_for("How is ops", send(key, "status?", 60), send(key, "status?", 60), "Ops says: all green.",
                            "Ops says: all green, again.")  # fmt: skip
        await tg.private_message("How is ops doing?", user_id=OWNER, name="Owner")
        await eventually(lambda: fake_llm.holding == 1, "ops to be answering main's message, main waiting")
        await eventually(lambda: not unsent(tmp_path), "ops's hello to be recorded as sent")
    finally:
        process.send_signal(signal.SIGKILL)
        await process.wait()

    async with bot_run(settings, tmp_path, STARTED):
        assert await tg.wait_sent(OWNER, 1) == ["Ops says: all green."]
        await eventually(lambda: settled(tmp_path / "state"), "every turn to settle")
    assert tg.sent[OWNER] == ["Ops says: all green."] and tg.sent[OTHER_OWNER] == ["Hi."]
    asked = [body for body in requests_of(fake_llm, "hello ops") if "status?" in last_user_text(body)]
    assert len(asked) == 2  # ops's turn on the one message: before the kill, and once again after it
    main = requests_of(fake_llm, "How is ops")
    assert not [body for body in main if "answer from the session" in last_user_text(body)]  # not as a message too
    [answer] = tool_results(main[-1])
    assert '"status": "answered"' in answer and "All green." in answer
    assert fake_llm.pending == 2  # neither side's third reply was asked for
