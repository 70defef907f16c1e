"""Fair share through a real `bot run` on Telegram: a stranger's slow runs never make the owner wait, one stranger
runs at most `lanes.per_sender` at once across their chats, and is told once when a message waits for that."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from configs import config_dict, telegram
from fakes.llm import FakeLLM, Reply
from fakes.telegram import FakeTelegram
from helpers import bot_run, eventually

from agent.lanes import per_sender_notice
from bot.config.loading import parse_config

OWNER = 4242
STRANGER = 555
STARTED = "channel telegram account main started"
GROUPS = (-1001, -1002, -1003)


def config(tmp_path: Path, llm: FakeLLM, tg: FakeTelegram, max_concurrent: int) -> dict[str, Any]:
    account = telegram(tg, streaming="off", dm_policy="open", group_policy="open", require_mention=False)
    return config_dict(
        tmp_path, llm, account, defaults={"max_concurrent": max_concurrent}, owners=[f"telegram:{OWNER}"],
        session={"queue": {"mode": "followup"}},
    )  # fmt: skip


async def test_the_owner_is_answered_while_a_strangers_runs_hold_every_other_slot(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg = fake_telegram
    # Two slots: strangers together may hold one; the other is kept for owners.
    fake_llm.script(Reply.held("Slow", then=" answer."), "Hello owner.", "Second group.")
    async with bot_run(config(tmp_path, fake_llm, tg, max_concurrent=2), tmp_path, STARTED):
        await tg.group_message("a slow job", chat_id=GROUPS[0], user_id=STRANGER, name="Bo")
        await eventually(lambda: fake_llm.holding == 1, "the stranger's first run to hold a slot")
        await tg.group_message("another job", chat_id=GROUPS[1], user_id=STRANGER, name="Bo")
        await tg.private_message("hi", user_id=OWNER, name="Owner")
        assert await tg.wait_sent(OWNER, 1) == ["Hello owner."]
        assert fake_llm.holding == 1  # the stranger's run is still going: the owner did not wait for it
        fake_llm.release()
        assert await tg.wait_sent(GROUPS[0], 1) == ["Slow answer."]
        assert await tg.wait_sent(GROUPS[1], 1) == ["Second group."]


async def test_one_stranger_runs_at_most_two_at_once_and_is_told_once(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg = fake_telegram
    fake_llm.script(Reply.held("Working."), Reply.held("Working."), "Third.")
    async with bot_run(config(tmp_path, fake_llm, tg, max_concurrent=4), tmp_path, STARTED):
        for group in GROUPS:
            await tg.group_message("a slow job", chat_id=group, user_id=STRANGER, name="Bo")
        await eventually(lambda: fake_llm.holding == 2, "two of the stranger's runs")
        assert await tg.wait_sent(GROUPS[2], 1) == [per_sender_notice(2)]
        assert len(fake_llm.requests) == 2  # the third waits for one of the two
        fake_llm.release()
        fake_llm.release()
        assert await tg.wait_sent(GROUPS[2], 2) == [per_sender_notice(2), "Third."]
        assert [await tg.wait_sent(group, 1) for group in GROUPS[:2]] == [["Working."], ["Working."]]


def test_a_run_a_non_owner_started_gets_the_shorter_time_limit() -> None:
    config = parse_config(
        "defaults: {timeout_seconds: 600}\n"
        "agents:\n  - id: main\n  - id: quick\n    limits: {non_owner_timeout_seconds: 30}\n"
        "  - id: brief\n    timeout_seconds: 10\n"
    )
    assert [config.timeout_for("main"), config.timeout_for("main", owner=False)] == [600, 120]
    assert config.timeout_for("quick", owner=False) == 30
    assert config.timeout_for("brief", owner=False) == 10  # never longer than the agent's own limit


async def test_a_strangers_run_stops_at_the_non_owner_limit_while_the_owner_keeps_the_agents_own(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg = fake_telegram
    settings = config(tmp_path, fake_llm, tg, max_concurrent=4)
    settings["agents"] = [{"id": "main", "limits": {"non_owner_timeout_seconds": 1}}]
    fake_llm.script(Reply.held("Thinking"), Reply.held("Owner's", then=" answer."))
    async with bot_run(settings, tmp_path, STARTED):
        await tg.group_message("a slow job", chat_id=GROUPS[0], user_id=STRANGER, name="Bo")
        [stopped] = await tg.wait_sent(GROUPS[0], 1)  # nobody released it: only its time limit ended it
        assert "1-second limit" in stopped
        await tg.private_message("hi", user_id=OWNER, name="Owner")
        await eventually(lambda: len(fake_llm.requests) == 2, "the owner's run to reach the model")
        for _ in range(2):  # the stranger's abandoned reply may still hold a place in the fake's queue
            fake_llm.release()  # the owner's run is not held to the stranger's limit: it ends when its answer does
        assert await tg.wait_sent(OWNER, 1) == ["Owner's answer."]
