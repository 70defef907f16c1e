"""A connection that goes bad without a word, through a real `bot run` on each platform: Telegram's getUpdates hang,
Discord's gateway keeps delivering events but acknowledges no heartbeat (a zombie), Slack's socket stays open but
silent. The bot's watchdog finds it within `stall_seconds`, says so once in its log, gets a new connection, says it
recovered once, and answers what was said during the outage and after it, each once. The watchdogs' decisions on a
fake clock, on the adapters, and what only one platform has (Telegram's webhook, Discord's reconnect storms, Slack's
dropped sockets and backoff): test_<platform>_watchdog.py."""

from __future__ import annotations

from pathlib import Path

from fakes.llm import FakeLLM
from helpers import asked, bot_run, eventually, finished, status_file_shows
from platforms import Platform


async def test_a_silent_connection_is_left_for_a_new_one_and_what_was_said_meanwhile_is_answered_once(
    platform: Platform, tmp_path: Path, fake_llm: FakeLLM
) -> None:
    stalled = f"channel {platform.name} account main is stalled"
    recovered = f"channel {platform.name} account main recovered (was stalled)"
    log_path, state = tmp_path / "bot.log", tmp_path / "state"

    def log() -> str:
        return log_path.read_text(errors="replace")

    fake_llm.script("Before the outage.", "Heard you.", "Back again.")
    async with bot_run(platform.config(tmp_path, fake_llm, platform.for_watchdog()), tmp_path, platform.started):
        await platform.dm("hello")
        await platform.wait_said(lambda said: said == ["Before the outage."])

        await platform.break_connection()
        await platform.dm("are you there?")  # said during the outage (a zombie still delivers it)
        await eventually(lambda: stalled in log(), "the stall in the log")
        await platform.while_stalled(tmp_path)
        await platform.wait_said(lambda said: len(said) == 2)
        await platform.dm("and now?")  # said while the bot leaves the bad connection, or just after
        await platform.wait_said(lambda said: len(said) == 3)
        await eventually(lambda: recovered in log(), "the recovery in the log")
        await eventually(lambda: status_file_shows(state, platform.name, "main", "connected"), "the status: healed")
        await finished(state)

        assert platform.said() == ["Before the outage.", "Heard you.", "Back again."]  # nothing lost, nothing twice
        assert asked(fake_llm) == ["hello", "are you there?", "and now?"]
        await platform.check_healed(tmp_path, log())
    text = log()
    assert text.count("is stalled") == 1 and text.count("recovered (was stalled)") == 1  # one line each way
    assert text.index(stalled) < text.index(recovered)
    assert f"channel {platform.name} account main is degraded" not in text
