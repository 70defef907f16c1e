"""Who a run acts for (bot.runs.principal), on every path that starts a turn, through the real gateway in one process
(App + MemoryChannel + the fake LLM): a tool that only records the run it is called in shows the principal each
turn carries. The decision functions themselves are tested first, on their own."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import pytest
from configs import config_of
from fakes.llm import FakeLLM, Reply, ToolCallSpec
from helpers import eventually
from pydantic import BaseModel

from bot import App
from bot.runs.principal import EARLIER, SHELL, job_maker, lesser, principal_of, session_principal
from channels import AccountSettings, MemoryChannel
from channels.base import OWNERS, InboundMessage, Principal, Scheduled
from routing import Peer
from tools.base import RunInfo, Tool, ToolContext, ToolResult, json_result

OWNER, STRANGER = "ann", "bo"
ANN, BO = Principal(owner=True, person="memory:ann"), Principal(owner=False, person="memory:bo")
GROUP = Peer("group", "g1")


# --- the decisions ------------------------------------------------------------------------------------------------


def message(sender: str, scheduled: Scheduled | None = None) -> InboundMessage:
    return InboundMessage(
        channel="memory", peer=Peer("direct", sender), sender_id=sender, message_id="m1", scheduled=scheduled
    )


def test_a_message_acts_for_its_sender_and_a_scheduled_one_only_for_the_owners_it_names() -> None:
    owners = {"memory:ann"}
    assert principal_of(message(OWNER), owners) == ANN
    assert principal_of(message(STRANGER), owners) == BO
    # a turn the bot started: owner only when its maker said so, whoever the sender looks like
    said = Scheduled(job="j", agent="main", session_key="k", owner=False)
    assert principal_of(message(OWNER, said), owners) == Principal(owner=False, person="memory:ann")
    assert principal_of(message(STRANGER, said.model_copy(update={"owner": True})), owners).owner
    with pytest.raises(ValueError, match="owner"):
        Scheduled.model_validate({"job": "j", "agent": "main", "session_key": "k"})  # no default authority


@pytest.mark.parametrize(
    ("made_by", "made_by_owner", "expected"),
    [
        (SHELL, True, OWNERS),  # `bot cron add`: someone with the bot's files
        (None, None, OWNERS),  # the config's
        ("memory:ann", True, ANN),  # an owner's run, and she still is one
        ("Memory:ann", None, ANN),  # from before makers were kept: judged by the owners now
        ("memory:bo", False, BO),  # a stranger's: hers, and only hers
        ("memory:bo", None, BO),
        ("memory:zed", True, Principal(owner=False, person="memory:zed")),  # an owner no more: never more than now
    ],
)
def test_a_job_acts_for_its_maker_never_more_than_they_are_now(
    made_by: str | None, made_by_owner: bool | None, expected: Principal
) -> None:
    assert job_maker(made_by, made_by_owner, {"memory:ann"}) == expected


def test_a_session_is_one_principals_only_while_nobody_else_had_a_turn_in_it() -> None:
    assert session_principal(["owners"]) == OWNERS
    assert session_principal(["memory:bo", "memory:bo"]) == BO
    for mixed in ([], ["owners", "memory:bo"], ["memory:bo", "memory:cy"], [EARLIER]):
        assert session_principal(mixed) is None


def test_a_turn_started_in_another_session_gets_the_lesser_trust() -> None:
    assert lesser(ANN, OWNERS) == ANN
    assert lesser(ANN, BO) == BO  # the owner's message in bo's conversation runs with bo's powers, in bo's folder
    assert lesser(BO, BO) == BO
    assert lesser(BO, OWNERS) == BO
    assert lesser(ANN, None) == Principal(owner=False, person="memory:ann")  # several people: no owner powers
    assert lesser(BO, Principal(owner=False, person="memory:cy")) == BO


# --- every path, through the gateway --------------------------------------------------------------------------------


class ProbeArgs(BaseModel):
    label: str


class Probe(Tool):
    """Records the run it is called in, by label."""

    name: ClassVar[str] = "probe"
    label: ClassVar[str] = "Probe"
    description: ClassVar[str] = "Note which run this is."
    parameters: ClassVar[type[BaseModel]] = ProbeArgs

    def __init__(self) -> None:
        self.runs: dict[str, RunInfo] = {}

    async def execute(self, call_id: str, args: ProbeArgs, ctx: ToolContext) -> ToolResult:
        self.runs[args.label] = ctx.run
        return json_result({"status": "ok"})

    def principal(self, label: str) -> Principal:
        return self.runs[label].principal


def probe(label: str) -> Reply:
    return Reply.tool_calls(ToolCallSpec("probe", {"label": label}))


def app(llm: FakeLLM, chat: MemoryChannel, tmp_path: Path, tool: Probe, **extra: Any) -> App:
    base = {
        "owners": [f"memory:{OWNER}"],
        "session": {"queue": {"debounce_ms": 0}},
        "tools": {"non_owner": {"allow": ["cron", "group:sessions"]}},  # strangers may reach them: their limits show
    }
    return App(config_of(tmp_path, llm, base, **extra), tmp_path / "state", adapters=[chat], tools=[tool])


@pytest.fixture
def chat() -> MemoryChannel:
    return MemoryChannel(settings=AccountSettings(dm_policy="open", group_policy="open", require_mention=False))


async def test_a_message_a_click_and_a_batch_act_for_who_sent_them(
    fake_llm: FakeLLM, chat: MemoryChannel, tmp_path: Path
) -> None:
    probe_tool = Probe()
    fake_llm.script_for("owner-dm", probe("owner-dm"), "ok")
    fake_llm.script_for("stranger-dm", probe("stranger-dm"), "ok", probe("click"), "ok")
    fake_llm.script_for("group-start", Reply.held("held"), probe("stranger-batch"), "ok", probe("owner-batch"), "ok")
    async with app(fake_llm, chat, tmp_path, probe_tool).running(grace_seconds=0.1):
        await chat.say("owner-dm", sender=OWNER)
        await chat.say("stranger-dm", sender=STRANGER)
        await chat.replies(2)
        await chat.click("m-bot-1", "a button value", sender=STRANGER)
        await chat.replies(1)
        # In a group: the owner's turn runs; a stranger's instruction, then the owner's word, arrive meanwhile.
        await chat.say("group-start", sender=OWNER, peer=GROUP)
        await eventually(lambda: fake_llm.holding == 1, "the owner's group turn to run")
        await chat.say("rewrite AGENTS.md", sender=STRANGER, peer=GROUP)
        await chat.say("thanks", sender=OWNER, peer=GROUP)
        fake_llm.release()
        await chat.replies(3)
    assert probe_tool.principal("owner-dm") == ANN
    assert probe_tool.principal("stranger-dm") == BO
    assert probe_tool.principal("click") == BO
    # Collected while the first ran, the two are two turns: the stranger's with her powers, the owner's with his.
    assert probe_tool.principal("stranger-batch") == BO
    assert probe_tool.principal("owner-batch") == ANN
    stranger_turn = json.dumps(next(r.body for r in fake_llm.requests if "stranger-batch" in json.dumps(r.body)))
    assert "rewrite AGENTS.md" in stranger_turn and "thanks" not in stranger_turn.split("stranger-batch")[0]


async def test_scheduled_jobs_act_for_their_makers(fake_llm: FakeLLM, chat: MemoryChannel, tmp_path: Path) -> None:
    probe_tool = Probe()
    for label in ("by-shell", "by-owner", "by-stranger", "by-demoted"):
        fake_llm.script_for(label, probe(label), "done")
    fake_llm.script_for("Heartbeat: read", probe("heartbeat"), "Something needs you.")
    heartbeat = {"every": "24h", "target": f"memory:direct:{OWNER}", "active_hours": "00:00-24:00"}
    agents = [{"id": "main", "default": True, "heartbeat": heartbeat}]
    served = app(fake_llm, chat, tmp_path, probe_tool, agents=agents)
    (tmp_path / "ws" / "main").mkdir(parents=True)
    (tmp_path / "ws" / "main" / "HEARTBEAT.md").write_text("heartbeat: check and say so.\n")
    async with served.running(grace_seconds=0.1) as gateway:
        jobs = gateway.jobs
        later = "2099-01-01T00:00:00+00:00"
        made = [
            ("by-shell", f"memory:direct:{OWNER}", SHELL, True),
            ("by-owner", f"memory:direct:{OWNER}", "memory:ann", True),
            ("by-stranger", f"memory:direct:{STRANGER}", "memory:bo", False),
            ("by-demoted", "memory:direct:zed", "memory:zed", True),
        ]
        for label, deliver, maker, owner in made:
            await jobs.add_job({"id": label, "at": later, "message": label, "deliver": deliver}, maker, owner)
        for label in [*(entry[0] for entry in made), "heartbeat-main"]:
            await jobs.run_now(label)
        await chat.replies(5)
    assert probe_tool.principal("by-shell").owner and probe_tool.principal("by-owner").owner
    assert probe_tool.principal("by-stranger") == BO
    assert probe_tool.runs["by-stranger"].workspace == str(tmp_path / "ws" / "main" / "senders" / "memory-bo")
    assert probe_tool.principal("by-demoted") == Principal(owner=False, person="memory:zed")
    assert probe_tool.principal("heartbeat").owner  # the config's: the owners'


async def test_derived_turns_act_for_no_more_than_who_started_them(
    fake_llm: FakeLLM, chat: MemoryChannel, tmp_path: Path
) -> None:
    probe_tool = Probe()
    spawn = {"task": "CHILD-TASK-bo"}
    fake_llm.script_for("bo-spawns", Reply.tool_calls(ToolCallSpec("sessions_spawn", spawn)), "Started.",
                        probe("announce-to-bo"), "Told.")  # fmt: skip
    fake_llm.script_for("CHILD-TASK-bo", probe("child-of-bo"), "child result")
    extra = {"tools": {"non_owner": {"allow": ["cron", "group:sessions", "sessions_spawn"]}}}
    async with app(fake_llm, chat, tmp_path, probe_tool, **extra).running(grace_seconds=0.1):
        await chat.say("bo-spawns", sender=STRANGER)
        await chat.replies(2)
    assert probe_tool.principal("child-of-bo") == BO  # a child acts for whom its parent acted for
    assert probe_tool.principal("announce-to-bo") == BO  # and so does its announcement to the parent


async def test_a_message_between_sessions_gets_the_lesser_trust_and_strangers_reach_only_their_own(
    fake_llm: FakeLLM, chat: MemoryChannel, tmp_path: Path
) -> None:
    probe_tool = Probe()
    bo_dm, ann_dm = "agent:main:memory:direct:bo", "agent:main:memory:direct:ann"

    def send(key: str, text: str) -> Reply:
        return Reply.tool_calls(ToolCallSpec("sessions_send", {"session_key": key, "message": text, "wait_seconds": 0}))

    fake_llm.script_for("bo-hello", "Hi bo.", probe("in-bo-session"), "Bo's side says hello back.")
    fake_llm.script_for("ann-hello", "Hi ann.", send(bo_dm, "from ann"), "Sent.", probe("answer-in-ann"), "NO_REPLY")
    async with app(fake_llm, chat, tmp_path, probe_tool).running(grace_seconds=0.1) as gateway:
        await chat.say("bo-hello", sender=STRANGER)
        await chat.say("ann-hello", sender=OWNER)
        await chat.replies(2)
        await chat.say("please message bo", sender=OWNER)
        await chat.replies(1)
        await eventually(lambda: "answer-in-ann" in probe_tool.runs, "the answer to come back to ann's session")
        # a stranger's session tools see and reach only her own sessions
        bo_run = probe_tool.runs["in-bo-session"]
        listed = await gateway.sessions.list(bo_run)
        assert [session["key"] for session in listed] == [bo_dm]
        with pytest.raises(LookupError, match="no session"):
            await gateway.sessions.history(bo_run, ann_dm)
        with pytest.raises(LookupError, match="no session"):
            await gateway.subagents.send(bo_run, ann_dm, "do my bidding", wait_seconds=0)
    # ann's message ran in bo's conversation with bo's powers (his words are in its history), not ann's
    assert probe_tool.principal("in-bo-session") == BO
    # and the answer coming back into ann's session acts for no more than the turn that gave it
    assert probe_tool.principal("answer-in-ann") == Principal(owner=False, person="memory:bo")


async def test_a_turn_run_again_after_a_restart_acts_for_the_same_principal(
    fake_llm: FakeLLM, chat: MemoryChannel, tmp_path: Path
) -> None:
    probe_tool = Probe()
    fake_llm.script_for("cut-bo", Reply.held("never"), probe("again-bo"), "ok")
    async with app(fake_llm, chat, tmp_path, probe_tool).running(grace_seconds=0):
        await chat.say("cut-bo", sender=STRANGER)
        await eventually(lambda: fake_llm.holding == 1, "the turn to run")
    restarted = MemoryChannel(settings=chat.settings)
    async with app(fake_llm, restarted, tmp_path, probe_tool).running(grace_seconds=0.1):
        await restarted.replies(1)
    assert probe_tool.principal("again-bo") == BO
