"""Three real `bot run` processes on one PostgreSQL database (see test_cluster_bot_run.py): an approval card shown by
the process running the turn and clicked through the poller runs the command once; a cron job fires once across the
three."""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fakes.llm import FakeLLM, Reply, ToolCallSpec
from fakes.telegram import FakeTelegram
from helpers import eventually
from test_cluster_bot_run import OWNERS, Cluster, cluster, query, settled

from bot.config.schedules import CronJob
from bot.runs.principal import SHELL
from bot.store.postgres import PostgresStore

# --- an approval across processes ---------------------------------------------------------------------------------


def approval_cards(tg: FakeTelegram, chat: int) -> list[dict[str, Any]]:
    return [call for call in tg.calls("sendMessage") if call["chat_id"] == chat and "reply_markup" in call]


def allow_once(call: dict[str, Any]) -> str:
    markup = call["reply_markup"]
    markup = json.loads(markup) if isinstance(markup, str) else markup
    [data] = [b["callback_data"] for row in markup["inline_keyboard"] for b in row if b["text"] == "Allow once"]
    return str(data)


def card_id(tg: FakeTelegram, chat: int, data: str) -> int:
    approval = data.split(":")[1]
    [found] = [mid for (cid, mid), stored in tg.messages.items() if cid == chat and approval in stored.visible]
    return found


def turn_runner(bots: Cluster, owner: int) -> list[int]:
    """The pids whose own log shows a model run in the owner's DM session (`run run_… (agent:main:telegram:…`)."""
    run = re.compile(rf"run run_\w+ \(agent:main:telegram:direct:{owner},")
    return [pid for pid in bots.pids if run.search(bots.log(pid))]


async def test_an_approval_shown_by_one_process_and_clicked_through_another_runs_the_command_once(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram, postgres_url: str
) -> None:
    tg = fake_telegram
    ran = tmp_path / "ran.txt"
    for owner in OWNERS:  # each owner asks for its own command; the model's script follows each conversation
        command = ToolCallSpec("exec", {"command": f"echo {owner} >> {ran}"})
        fake_llm.script_for(f"job {owner}", Reply.tool_calls(command), f"Ran it for {owner}.")
    async with cluster(tmp_path, fake_llm, tg, postgres_url) as bots:
        poller = await bots.watch.poller()
        for owner in OWNERS:
            await tg.private_message(f"job {owner}: run the command", user_id=owner, name=f"Owner{owner}")
        clicked: list[int] = []
        clicked_at = time.monotonic()

        async def click_what_is_shown() -> bool:
            """Allow each card as it comes (a process runs only so many turns at once: later turns wait for a slot)."""
            for owner in OWNERS:
                if owner not in clicked and approval_cards(tg, owner):
                    data = allow_once(approval_cards(tg, owner)[0])
                    await tg.callback_query(data, message_id=card_id(tg, owner, data), chat_id=owner, user_id=owner)
                    clicked.append(owner)
            return len(clicked) == len(OWNERS)

        await eventually(click_what_is_shown, "every approval card to be shown and clicked", timeout=120)
        for owner in OWNERS:
            await tg.wait_sent(owner, 2)
        await eventually(lambda: settled(postgres_url), "the journal to settle")
        runners = {owner: turn_runner(bots, owner) for owner in OWNERS}
        receivers = bots.watch.pollers(since=clicked_at)
        crossed = [owner for owner, pids in runners.items() if pids and pids != [poller]]
        print(f"\npoller pid {poller}; the turn's process per owner: {runners}; getUpdates after the clicks: "
              f"{dict(receivers)}; approvals crossing processes: {len(crossed)} of {len(OWNERS)}")  # fmt: skip
        assert set(receivers) <= {poller, None}, f"the clicks may have gone to another poller: {receivers}"
        assert all(len(pids) == 1 for pids in runners.values()), runners  # each turn ran in one process
        assert crossed, f"every turn ran in the poller {poller}: no approval crossed processes ({runners})"
        decided = query(postgres_url, "SELECT status, decision, count(*) FROM approvals GROUP BY status, decision")
        assert decided == [("allowed", "allow-once", len(OWNERS))]
    assert sorted(ran.read_text().split()) == sorted(str(owner) for owner in OWNERS)  # each command once
    for owner in OWNERS:
        assert tg.sent[owner][1:] == [f"Ran it for {owner}."], tg.sent[owner]  # the card, then the answer, once
        assert len(approval_cards(tg, owner)) == 1


# --- a cron job ---------------------------------------------------------------------------------------------------


def soon(seconds: float) -> str:
    return datetime.fromtimestamp(time.time() + seconds, UTC).isoformat(timespec="seconds")


async def add_job(url: str, job_id: str, at: str, message: str, deliver: str) -> None:
    """A one-shot job, as `bot cron add` records it (made at the shell: the owners'): it fires at `at`, counted from
    now (its creation)."""
    async with await PostgresStore.open(url) as store:
        await store.save_job(CronJob(id=job_id, at=at, message=message, deliver=deliver).model_dump(mode="json"), SHELL)


async def test_a_cron_job_fires_once_across_the_three_processes(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram, postgres_url: str
) -> None:
    tg = fake_telegram
    owner = OWNERS[0]
    deliver = f"telegram/main:direct:{owner}"
    fake_llm.script_for("job early", "Early.", "Early again?")
    fake_llm.script_for("job later", "Later.", "Later again?")
    async with cluster(tmp_path, fake_llm, tg, postgres_url):
        # Made once all three run, due a moment later: every scheduler sees both ticks come.
        await add_job(postgres_url, "early", soon(2), "job early: say early", deliver)
        await add_job(postgres_url, "later", soon(4), "job later: say later", deliver)
        due = time.time() + 4

        def ended() -> bool:
            rows = query(postgres_url, "SELECT status FROM job_runs")
            return len(rows) >= 2 and all(status not in ("requested", "running") for (status,) in rows)

        await eventually(ended, "both runs to be recorded", timeout=60)
        # No process says when its scheduler passed a moment: three passes each (one a second) past the later tick,
        # in real time, is what shows that none of the three fires it again.
        await eventually(lambda: time.time() > due + 3, "every scheduler to be past the later tick")
        await eventually(lambda: settled(postgres_url), "the journal to settle")
        print(f"\nruns: {query(postgres_url, 'SELECT job_id, status, detail FROM job_runs ORDER BY id')}")
    runs = query(postgres_url, "SELECT job_id, status FROM job_runs ORDER BY job_id")
    assert runs == [("early", "ok"), ("later", "ok")]
    assert sorted(tg.sent[owner]) == ["Early.", "Later."]
