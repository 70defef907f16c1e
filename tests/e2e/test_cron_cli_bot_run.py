"""`bot cron` beside a running `bot run` (the fake Telegram, the fake LLM): a job added, listed, run at once, its runs
shown; a run asked for while one is still going skipped; a target no running account can reach recorded as
undeliverable; the job removed."""

from __future__ import annotations

from pathlib import Path

from fakes.llm import FakeLLM, Reply
from fakes.telegram import FakeTelegram
from helpers import bot_run, eventually
from test_cron_bot_run import DM, LATER, OWNER, STARTED, bot_cli, config, due_now, ended, runs, soon


async def test_bot_cron_add_list_run_runs_and_rm_beside_a_running_bot(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg = fake_telegram
    fake_llm.script("Daily summary.", Reply.held("Still going."), "unused")
    async with bot_run(config(tmp_path, fake_llm, tg), tmp_path, STARTED):
        out = await bot_cli(tmp_path, "cron", "add", "--id", "daily", "--cron", "0 9 * * *", "--tz", "Europe/Berlin",
                            "-m", "Summarize the day.", "--deliver", DM)  # fmt: skip
        assert "Added job daily" in out
        assert "daily  db     cron 0 9 * * *" in await bot_cli(tmp_path, "cron", "list")
        await bot_cli(tmp_path, "cron", "run", "daily")
        assert await tg.wait_sent(OWNER, 1) == ["Daily summary."]
        await eventually(lambda: ended(tmp_path, "daily"), "the run to be recorded")
        assert " ok  messages " in await bot_cli(tmp_path, "cron", "runs", "daily")

        # Two runs at once: the second, asked for while the first is still being answered, is skipped.
        await bot_cli(tmp_path, "cron", "run", "daily")
        await eventually(lambda: len(fake_llm.requests) == 2, "the second run to reach the model")
        await bot_cli(tmp_path, "cron", "run", "daily")
        await eventually(lambda: runs(tmp_path, "daily")[-1][0] == "skipped", "the overlapping run to be skipped")
        fake_llm.release()
        await eventually(lambda: ended(tmp_path, "daily", 3), "the held run to end")
        assert [status for status, _, _ in runs(tmp_path, "daily")] == ["ok", "ok", "skipped"]
        assert len(tg.sent[OWNER]) == 2  # the summary, and the held run's answer: nothing for the skipped one

        # A target no running account can reach: undeliverable, and the model is not asked.
        await bot_cli(tmp_path, "cron", "add", "--id", "lost", "--at", soon(LATER), "-m", "x",
                      "--deliver", "telegram/elsewhere:direct:1")  # fmt: skip
        due_now(tmp_path, "lost")
        await eventually(lambda: ended(tmp_path, "lost"), "the unreachable run to be recorded")
        assert runs(tmp_path, "lost") == [("undeliverable", "no running telegram account 'elsewhere'", "[]")]
        assert "undeliverable" in await bot_cli(tmp_path, "cron", "runs", "lost")

        await bot_cli(tmp_path, "cron", "rm", "daily")
        assert "daily" not in await bot_cli(tmp_path, "cron", "list")
    assert len(fake_llm.requests) == 2
