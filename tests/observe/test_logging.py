"""The log of a real `bot run --log-level DEBUG` (every logger at DEBUG, the SDKs', httpx's and httpcore's included)
against the fake Telegram and the fake LLM, a tool call in the turn: no configured secret appears anywhere in it,
and the lines the turn writes carry its run id, session key, channel and account, as text or as JSON lines."""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from configs import config_dict, telegram
from fakes.llm import FakeLLM, Reply, ToolCallSpec
from fakes.telegram import FakeTelegram
from helpers import bot_run, eventually, read_state, settled

from agent.log_context import log_context
from bot.observe.redaction import REDACTED, configure_logging

OWNER = 4242
STARTED = "channel telegram account main started"
SESSION = f"agent:main:telegram:direct:{OWNER}"
API_KEY = "sk-switchboard-log-test-0123456789"
SECOND_KEY = "sk-literal-second-key-9876543210"
WEBHOOK_SECRET = "tg-webhook-secret-4455667788"
TRANSCRIPTION_KEY = "whisper-secret-1122334455"


def config(tmp_path: Path, fake_llm: FakeLLM, tg: FakeTelegram) -> dict[str, Any]:
    keys = {"providers": {"fake": {"api_key": "${SWITCHBOARD_LOG_TEST_KEY}", "api_keys": [SECOND_KEY]}}}
    return config_dict(
        tmp_path, fake_llm, keys, telegram(tg, token="${TELEGRAM_BOT_TOKEN}", webhook_secret=WEBHOOK_SECRET),
        agents=[{"id": "main", "default": True}],
        media={"transcription": {
            "base_url": fake_llm.openai_base_url, "model": "whisper-1", "api_key": TRANSCRIPTION_KEY,
        }},
        owners=[f"telegram:{OWNER}"],
    )  # fmt: skip


def secrets(tg: FakeTelegram) -> list[str]:
    bot_id = tg.token.split(":", 1)[0]  # the id half of a Telegram token is public (it is the bot's user id)
    return [tg.token, tg.token.removeprefix(f"{bot_id}:"), API_KEY, SECOND_KEY, WEBHOOK_SECRET, TRANSCRIPTION_KEY]


@pytest.mark.parametrize("log_format", ["text", "json"])
async def test_a_debug_log_holds_no_secret_and_the_turn_s_lines_carry_its_context(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram, log_format: str
) -> None:
    tg = fake_telegram
    (tmp_path / "ws" / "main").mkdir(parents=True)
    (tmp_path / "ws" / "main" / "notes.txt").write_text("remember the milk\n")
    fake_llm.script(Reply.tool_calls(ToolCallSpec("read", {"path": "notes.txt"})), "You should buy milk.")
    env = {"TELEGRAM_BOT_TOKEN": tg.token, "SWITCHBOARD_LOG_TEST_KEY": API_KEY}
    args = ("--log-level", "DEBUG", "--log-format", log_format)
    async with bot_run(config(tmp_path, fake_llm, tg), tmp_path, STARTED, *args, env=env):
        await tg.private_message("what is in my notes?", user_id=OWNER, name="Owner")
        assert await tg.wait_sent(OWNER, 1) == ["You should buy milk."]
        assert [request.headers["authorization"] for request in fake_llm.requests] == [f"Bearer {API_KEY}"] * 2
        await eventually(lambda: settled(tmp_path / "state"), "the turn's journal row closed")
    log = (tmp_path / "bot.log").read_text()

    for secret in secrets(tg):
        assert secret not in log
        assert secret.lower() not in log.lower()
    assert "DEBUG" in log  # the SDKs' debug lines were there to leak from

    [(session_key,)] = read_state(tmp_path / "state", "SELECT session_key FROM sessions")
    assert session_key == SESSION
    if log_format == "json":
        lines = [line for line in log.splitlines() if line.startswith("{")]
        records = [json.loads(line) for line in lines]
        assert all({"time", "level", "logger", "message"} <= record.keys() for record in records)
        assert any(record["level"] == "DEBUG" for record in records)
        in_run = [record for record in records if "run_id" in record]
        assert in_run, "no line carries a run id"
        for record in in_run:
            assert record["run_id"].startswith("run_")
            assert (record["session_key"], record["channel"], record["account"]) == (SESSION, "telegram", "main")
        # the model's requests carry it, and so does every line that names the run
        run_id = in_run[0]["run_id"]
        assert sum(record["logger"] == "agent.providers.transport" for record in in_run) == 2
        about_run = [record for record in records if run_id in record["message"]]
        assert about_run and all(record.get("run_id") == run_id for record in about_run)
    else:
        context = " telegram/main]"
        in_run = [line for line in log.splitlines() if "[run=run_" in line]
        assert in_run, "no line carries a run id"
        assert all(f" session={SESSION} " in line and line.endswith(context) for line in in_run)
        run_id = in_run[0].split("[run=", 1)[1].split(" ", 1)[0]
        about_run = [line for line in log.splitlines() if run_id in line.split(": ", 1)[-1].rsplit(" [", 1)[0]]
        assert about_run and all(f"[run={run_id} " in line for line in about_run)


def test_the_text_and_json_formats_carry_the_context_and_redact_every_handler_s_records() -> None:
    out = io.StringIO()
    redactor = configure_logging(logging.DEBUG, out, environ={"SOME_API_KEY": "sk-from-the-env-123"})
    redactor.add(["tok-from-the-config-456"])
    log = logging.getLogger("tests.logging")
    log.info("outside any turn")
    with log_context(session_key="agent:main:main", channel="telegram", account="main"):
        with log_context(run_id="run_ab12"):
            log.debug("calling with sk-from-the-env-123 and tok-from-the-config-456")
        log.warning("after the run")
    lines = out.getvalue().splitlines()
    assert lines[0].endswith("INFO tests.logging: outside any turn")
    assert lines[1].endswith(
        f"DEBUG tests.logging: calling with {REDACTED} and {REDACTED} "
        "[run=run_ab12 session=agent:main:main telegram/main]"
    )
    assert lines[2].endswith("WARNING tests.logging: after the run [session=agent:main:main telegram/main]")

    out = io.StringIO()
    configure_logging(logging.INFO, out, environ={"SOME_API_KEY": "sk-from-the-env-123"}, log_format="json")
    log.debug("not shown")
    with log_context(run_id="run_cd34", session_key="agent:main:main", channel="slack", account="default"):
        try:
            raise RuntimeError("failed with sk-from-the-env-123")
        except RuntimeError:
            log.exception("it failed")
    [line] = out.getvalue().splitlines()
    record = json.loads(line)
    assert record["level"] == "ERROR" and record["logger"] == "tests.logging" and record["message"] == "it failed"
    assert (record["run_id"], record["session_key"], record["channel"], record["account"]) == (
        "run_cd34", "agent:main:main", "slack", "default",
    )  # fmt: skip
    assert f"RuntimeError: failed with {REDACTED}" in record["exception"]
    assert "sk-from-the-env-123" not in line
    assert record["time"].endswith("+00:00")
    configure_logging(logging.WARNING)  # back to stderr, as the other tests expect
