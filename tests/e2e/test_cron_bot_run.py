"""Scheduled jobs through a real `bot run` (the fake Telegram, the fake LLM): made by the `cron` tool in a DM and
answered there once; surviving a SIGKILL; caught up after downtime within `cron.catch_up` and skipped beyond it; a
heartbeat. (`bot cron` beside the running bot: test_cron_cli_bot_run.py.)"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from configs import config_dict, telegram
from fakes.llm import FakeLLM, Reply, ToolCallSpec
from fakes.telegram import FakeTelegram
from helpers import bot_run, eventually, launch_bot, read_state, write_state

OWNER = 4242
STARTED = "channel telegram account main started"
DM = f"telegram/main:direct:{OWNER}"


def config(tmp_path: Path, fake_llm: FakeLLM, tg: FakeTelegram, **cron: Any) -> dict[str, Any]:
    agents = [{"id": "main", "default": True}]
    return config_dict(tmp_path, fake_llm, telegram(tg), agents=agents, owners=[f"telegram:{OWNER}"], cron=cron)


def soon(seconds: float) -> str:
    return datetime.fromtimestamp(time.time() + seconds, UTC).isoformat(timespec="seconds")


LATER = 3600.0  # how far ahead a test's one-shot job is made: it fires when the test makes it due (`due_now`)


def due_now(tmp_path: Path, job_id: str, *, ago: float = 0.0) -> None:
    """The wait for a one-shot job is over: its moment moved to `ago` seconds before now, and when it was made to
    just before that, in the state DB (the scheduler reads both on its next pass, about once a second)."""
    [(payload,)] = read_state(tmp_path / "state", "SELECT payload FROM jobs WHERE id = ?", job_id)
    moment = time.time() - ago
    job = json.loads(payload) | {"at": datetime.fromtimestamp(moment, UTC).isoformat()}
    sql = "UPDATE jobs SET payload = ?, created = ?, updated = ? WHERE id = ?"
    write_state(tmp_path / "state", sql, json.dumps(job), moment - 1, moment - 1, job_id)


async def bot_cli(folder: Path, *args: str) -> str:
    """`bot <args>` on the test's config; its output (it must succeed)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", *args, "--config", str(folder / "bindings.yaml"),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    return out.decode()


def runs(tmp_path: Path, job_id: str) -> list[tuple[str, str | None, str]]:
    """(status, detail, message ids) of each run of the job, oldest first."""
    sql = "SELECT status, detail, message_ids FROM job_runs WHERE job_id = ? ORDER BY id"
    return [tuple(row) for row in read_state(tmp_path / "state", sql, job_id)]  # type: ignore[misc]


def ended(tmp_path: Path, job_id: str, count: int = 1) -> bool:
    found = runs(tmp_path, job_id)
    return len(found) >= count and all(status not in ("requested", "running") for status, _, _ in found)


async def test_a_job_made_by_the_cron_tool_in_a_dm_fires_once_and_its_answer_arrives_there(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg = fake_telegram
    async with bot_run(config(tmp_path, fake_llm, tg), tmp_path, STARTED):
        stretch = {"action": "add", "id": "stretch", "at": soon(LATER), "message": "Tell me to stretch."}
        add = ToolCallSpec("cron", stretch)
        fake_llm.script(Reply.tool_calls(add), "Scheduled.", "Time to stretch!")
        await tg.private_message("remind me to stretch in a while", user_id=OWNER, name="Owner")
        assert await tg.wait_sent(OWNER, 1) == ["Scheduled."]
        due_now(tmp_path, "stretch")
        assert await tg.wait_sent(OWNER, 2) == ["Scheduled.", "Time to stretch!"]
        await eventually(lambda: ended(tmp_path, "stretch"), "the run to be recorded")
        [(status, detail, ids)] = runs(tmp_path, "stretch")
        assert (status, detail) == ("ok", None)
        assert len(json.loads(ids)) == 1  # the id Telegram gave the message
        asked = fake_llm.requests[-1].body["messages"][-1]["content"]
        assert "Tell me to stretch." in (asked if isinstance(asked, str) else json.dumps(asked))
        listed = json.loads(await bot_cli(tmp_path, "cron", "list", "--json"))
        assert [(job["id"], job["enabled"], job["deliver"]) for job in listed] == [("stretch", False, DM)]
    assert tg.sent[OWNER] == ["Scheduled.", "Time to stretch!"]  # once
    assert len(fake_llm.requests) == 3


async def test_a_job_made_before_a_sigkill_fires_once_after_the_restart(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg = fake_telegram
    settings = config(tmp_path, fake_llm, tg)
    bot = await launch_bot(settings, tmp_path, STARTED)
    try:
        await bot_cli(tmp_path, "cron", "add", "--id", "later", "--at", soon(LATER), "-m", "Ping.", "--deliver", DM)
    finally:
        bot.send_signal(signal.SIGKILL)
        await bot.wait()
    fake_llm.script("Pong.", "unused")
    async with bot_run(settings, tmp_path, STARTED):
        due_now(tmp_path, "later")  # its moment comes while the restarted bot runs
        assert await tg.wait_sent(OWNER, 1) == ["Pong."]
        await eventually(lambda: ended(tmp_path, "later"), "the run to be recorded")
    assert [status for status, _, _ in runs(tmp_path, "later")] == ["ok"]
    assert tg.sent[OWNER] == ["Pong."]


async def test_a_tick_missed_while_down_runs_at_start_within_catch_up_and_is_skipped_beyond_it(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg = fake_telegram
    (tmp_path / "bindings.yaml").write_text(json.dumps(config(tmp_path, fake_llm, tg)))
    await bot_cli(tmp_path, "cron", "add", "--id", "old", "--at", soon(LATER), "-m", "Too late.", "--deliver", DM)
    due_now(tmp_path, "old", ago=60)  # its moment passed a minute ago, while the bot was down
    async with bot_run(config(tmp_path, fake_llm, tg, catch_up="1s"), tmp_path, STARTED):
        await eventually(lambda: ended(tmp_path, "old"), "the missed tick to be recorded")
    [(status, detail, _)] = runs(tmp_path, "old")
    assert status == "skipped" and "over catch_up" in (detail or "")
    assert "missed while down" in (tmp_path / "bot.log").read_text()

    await bot_cli(tmp_path, "cron", "add", "--id", "recent", "--at", soon(LATER), "-m", "Catch up.", "--deliver", DM)
    due_now(tmp_path, "recent", ago=60)  # the bot is down again
    fake_llm.script("Caught up.", "unused")
    async with bot_run(config(tmp_path, fake_llm, tg, catch_up="1h"), tmp_path, STARTED):
        assert await tg.wait_sent(OWNER, 1) == ["Caught up."]
        await eventually(lambda: ended(tmp_path, "recent"), "the run to be recorded")
    assert [status for status, _, _ in runs(tmp_path, "recent")] == ["ok"]
    assert [status for status, _, _ in runs(tmp_path, "old")] == ["skipped"]  # not run by the second start
    assert tg.sent[OWNER] == ["Caught up."]


async def test_a_heartbeat_answering_heartbeat_ok_sends_nothing_and_one_with_news_sends_it(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg = fake_telegram
    settings = config(tmp_path, fake_llm, tg)
    settings["agents"][0]["heartbeat"] = {"every": "6h", "target": DM, "active_hours": "00:00-24:00"}
    (tmp_path / "ws" / "main").mkdir(parents=True)
    (tmp_path / "ws" / "main" / "HEARTBEAT.md").write_text("Check whether the build is red.\n")
    fake_llm.script("Hello.", "HEARTBEAT_OK", "The build is red.")
    async with bot_run(settings, tmp_path, STARTED):
        await tg.private_message("hello", user_id=OWNER, name="Owner")
        assert await tg.wait_sent(OWNER, 1) == ["Hello."]
        assert "heartbeat-main  heartbeat every 6h" in await bot_cli(tmp_path, "cron", "list")
        await bot_cli(tmp_path, "cron", "run", "heartbeat-main")
        await eventually(lambda: ended(tmp_path, "heartbeat-main"), "the quiet heartbeat to be recorded")
        assert runs(tmp_path, "heartbeat-main")[0][:2] == ("ok", "nothing sent (NO_REPLY or HEARTBEAT_OK)")
        await bot_cli(tmp_path, "cron", "run", "heartbeat-main")
        assert await tg.wait_sent(OWNER, 2) == ["Hello.", "The build is red."]
        await eventually(lambda: ended(tmp_path, "heartbeat-main", 2), "the heartbeat with news to be recorded")
    assert tg.sent[OWNER] == ["Hello.", "The build is red."]
    beat = json.dumps(fake_llm.requests[1].body["messages"])
    assert "HEARTBEAT.md" in beat and "hello" in beat  # asked to follow the file, in the DM's own session
