"""A scheduled run's record tells what its turn delivered, whichever turn carried it (App + MemoryChannel + the fake
LLM, in one process): a tick folded into a person's turn in the same session records the answer that went out."""

from __future__ import annotations

import json
from pathlib import Path

from configs import config_of
from fakes.llm import FakeLLM, Reply
from helpers import eventually

from bot import App
from bot.runs.principal import SHELL
from channels import MemoryChannel

OWNER = "ann"
DM = f"memory:direct:{OWNER}"
SESSION = f"agent:main:memory:direct:{OWNER}"  # the DM's, where a `session: main` job's turn runs too


async def test_a_tick_folded_into_a_persons_turn_is_recorded_with_the_answer_that_went_out(
    fake_llm: FakeLLM, tmp_path: Path
) -> None:
    config = config_of(
        tmp_path, fake_llm, owners=[f"memory:{OWNER}"], session={"queue": {"mode": "collect", "debounce_ms": 0}}
    )
    chat = MemoryChannel()
    fake_llm.script(Reply.held("First."), "The reminder, and your answer.")
    async with App(config, tmp_path / "state", adapters=[chat]).running(grace_seconds=0.1) as gateway:
        job = {"id": "remind", "at": "2099-01-01T00:00:00+00:00", "message": "Stand up.", "deliver": DM,
               "session": "main"}  # fmt: skip
        await gateway.jobs.add_job(job, SHELL)
        await chat.say("hello", sender=OWNER)
        await eventually(lambda: fake_llm.holding == 1, "the owner's turn to run")
        await gateway.jobs.run_now("remind")  # its tick queues behind the owner's turn in the DM's session
        await eventually(lambda: gateway.lanes.depth(SESSION) == 1, "the tick to wait in the lane")
        await chat.say("and one more thing", sender=OWNER)  # in the same batch as the tick: the owners' both
        fake_llm.release()
        replies = await chat.replies(2)

        async def settled() -> bool:
            return all(run.status not in ("requested", "running") for run in await gateway.store.job_runs("remind"))

        await eventually(settled, "the run to be settled")
        [run] = await gateway.store.job_runs("remind")
    assert [sent.text for sent in replies] == ["First.", "The reminder, and your answer."]
    last = json.dumps(fake_llm.requests[-1].body["messages"][-1])
    assert "Stand up." in last and "and one more thing" in last  # one turn carried both
    # what went out, not "nothing sent": the answer's platform id
    assert (run.status, run.detail, run.message_ids) == ("ok", None, [replies[1].message_id])
