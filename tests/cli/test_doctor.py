"""`bot doctor` as a real subprocess against the fake Telegram, Discord, Slack and LLM servers: all green exits 0; a
refused token, a missing intent or scope, an unset variable, a corrupt state.db or a refused model key fails with its
fix and exit 1; no token or key is ever printed."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import sys
from pathlib import Path
from typing import Any

from configs import config_dict, discord, slack, telegram
from fakes.discord import FakeDiscord
from fakes.llm import FakeLLM, Reply, refusing_port
from fakes.slack import FakeSlack
from fakes.telegram import FakeTelegram

from bot.store.postgres import SCHEMA_VERSION as PG_SCHEMA_VERSION, PostgresStore

LLM_KEY = "sk-doctor-test-key-0123456789"
MODEL_KEYS = ("OPENROUTER_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_API_KEY")


def config(tmp_path: Path, llm: FakeLLM, *channels: dict[str, Any], **sections: Any) -> dict[str, Any]:
    """Two agents, `ops` with a fallback model, the provider with a key written into the file, and `channels`."""
    agents = [{"id": "main", "default": True}, {"id": "ops", "fallbacks": ["fake/m2"]}]
    key = {"providers": {"fake": {"api_key": LLM_KEY}}}
    return config_dict(tmp_path, llm, key, *channels, agents=agents, **sections)


async def doctor(
    tmp_path: Path, settings: dict[str, Any], *args: str, env: dict[str, str] | None = None, command: str = "doctor"
) -> tuple[int, str]:
    """`bot doctor` (or another `command`, e.g. `config check`) on `settings` (written to tmp_path/bindings.yaml):
    its exit status and its output. No model key of the test's environment is passed on."""
    path = tmp_path / "bindings.yaml"
    path.write_text(json.dumps(settings), encoding="utf-8")
    environ = {
        key: value for key, value in os.environ.items() if not key.startswith("SWITCHBOARD") and key not in MODEL_KEYS
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", *command.split(), "--config", str(path), *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env={**environ, **(env or {})},
    )  # fmt: skip
    try:
        out, _ = await asyncio.wait_for(process.communicate(), 60)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode is not None
    return process.returncode, out.decode()


def line(output: str, start: str) -> str:
    """The first line of the report that starts with `start` (status and name), with the lines that follow it."""
    lines = output.splitlines()
    for index, text in enumerate(lines):
        if text.startswith(start):
            following: list[str] = []
            for more in lines[index + 1 :]:
                if not more.startswith("      "):
                    break
                following.append(more)
            return "\n".join([text, *following])
    raise AssertionError(f"no line starting with {start!r} in:\n{output}")


def assert_no_secrets(output: str, *secrets: str) -> None:
    for secret in secrets:
        assert secret not in output, f"{secret!r} printed"


async def test_all_green_exits_0_and_prints_no_token(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram, fake_discord: FakeDiscord, fake_slack: FakeSlack
) -> None:
    (tmp_path / "state").mkdir()
    with sqlite3.connect(tmp_path / "state" / "state.db") as db:
        db.execute("CREATE TABLE t (x)")
    db.close()
    # Every secret as a ${VAR}, as it should be (a secret written into the file is a warning).
    settings = config(
        tmp_path, fake_llm, telegram(fake_telegram, token="${DOC_TELEGRAM_TOKEN}"),
        discord(fake_discord, token="${DOC_DISCORD_TOKEN}"),
        slack(fake_slack, bot_token="${DOC_SLACK_BOT_TOKEN}", app_token="${DOC_SLACK_APP_TOKEN}"),
    )  # fmt: skip
    settings["providers"]["fake"]["api_key"] = "${DOC_LLM_KEY}"
    env = {
        "DOC_TELEGRAM_TOKEN": fake_telegram.token, "DOC_DISCORD_TOKEN": fake_discord.token,
        "DOC_SLACK_BOT_TOKEN": fake_slack.bot_token, "DOC_SLACK_APP_TOKEN": fake_slack.app_token,
        "DOC_LLM_KEY": LLM_KEY,
    }  # fmt: skip
    code, out = await doctor(tmp_path, settings, env=env)
    assert code == 0, out
    assert "FAIL" not in out.replace("0 FAIL", "")
    assert "warn " not in out
    assert line(out, "ok    config ")
    assert f"@{fake_telegram.username}" in line(out, "ok    telegram/main ")
    assert "switchbot" in line(out, "ok    discord/main ")
    assert "Message Content Intent is on" in line(out, "ok    discord/main intent")
    assert line(out, "ok    slack/main ")
    assert line(out, "ok    slack/main scopes")
    assert line(out, "ok    slack/main socket")
    assert "quick_check ok" in line(out, "ok    state.db")
    assert line(out, "ok    state dir")
    assert "made at the first start" in line(out, "ok    workspace main")
    assert "each with its provider and key: fake/m, fake/m2" in line(out, "ok    models")
    assert fake_llm.requests == []  # without --models no model is asked
    assert_no_secrets(out, fake_telegram.token, fake_discord.token, fake_slack.bot_token, fake_slack.app_token, LLM_KEY)


async def test_a_refused_telegram_token_a_wrong_url_and_an_unreachable_server_fail_with_their_fixes(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    wrong = "999999:wrong-secret-token-abc"
    with refusing_port() as port:
        accounts = (
            telegram(fake_telegram, token=wrong),
            telegram(fake_telegram, account="moved", api_base_url=fake_telegram.url + "/nothing-here"),
            telegram(fake_telegram, account="away", api_base_url=f"http://127.0.0.1:{port}"),
        )
        code, out = await doctor(tmp_path, config(tmp_path, fake_llm, *accounts))
    assert code == 1, out
    refused = line(out, "FAIL  telegram/main ")
    assert "token 9999… refused (HTTP 401)" in refused and "get a new one from @BotFather" in refused
    assert "wrong api_base_url" in line(out, "FAIL  telegram/moved ")
    assert f"cannot reach http://127.0.0.1:{port}" in line(out, "FAIL  telegram/away ")
    assert_no_secrets(out, wrong, fake_telegram.token, "wrong-secret")


async def test_discord_without_the_message_content_intent_fails_naming_it(tmp_path: Path, fake_llm: FakeLLM) -> None:
    async with FakeDiscord(message_content_intent=False) as server:
        code, out = await doctor(tmp_path, config(tmp_path, fake_llm, discord(server)))
    assert code == 1, out
    assert line(out, "ok    discord/main ")
    failed = line(out, "FAIL  discord/main intent")
    assert "Message Content Intent is off" in failed
    assert "enable Message Content Intent in the Developer Portal (Bot page" in failed
    assert_no_secrets(out, server.token)


async def test_a_refused_discord_token_fails(tmp_path: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord) -> None:
    account = discord(fake_discord, token="not-the-discord-token-at-all")
    code, out = await doctor(tmp_path, config(tmp_path, fake_llm, account))
    assert code == 1, out
    assert "refused (HTTP 401)" in line(out, "FAIL  discord/main ")
    assert_no_secrets(out, "not-the-discord-token-at-all")


async def test_slack_missing_a_scope_or_with_a_wrong_token_fails_naming_it(
    tmp_path: Path, fake_llm: FakeLLM, fake_slack: FakeSlack
) -> None:
    fake_slack.scopes.remove("chat:write")
    fake_slack.scopes.remove("reactions:write")
    code, out = await doctor(tmp_path, config(tmp_path, fake_llm, slack(fake_slack)))
    assert code == 1, out
    scopes = line(out, "FAIL  slack/main scopes")
    assert "missing scopes: chat:write (and for some features reactions:write)" in scopes
    assert "Bot Token Scopes" in scopes
    assert line(out, "ok    slack/main socket")

    fake_slack.scopes.append("chat:write")
    wrong_app = slack(fake_slack, app_token="xapp-wrong-app-token-1234")
    wrong_bot = slack(fake_slack, account="other", bot_token="xoxb-wrong-bot-token-5678")
    code, out = await doctor(tmp_path, config(tmp_path, fake_llm, wrong_app, wrong_bot))
    assert code == 1, out
    assert "missing scopes some features need: reactions:write" in line(out, "warn  slack/main scopes")
    assert "app token xapp… refused (not_allowed_token_type)" in line(out, "FAIL  slack/main socket")
    assert "bot token xoxb… refused (invalid_auth)" in line(out, "FAIL  slack/other ")
    assert_no_secrets(out, "xapp-wrong-app-token-1234", "xoxb-wrong-bot-token-5678", fake_slack.bot_token)


async def test_an_unset_variable_fails_naming_it(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    settings = config(tmp_path, fake_llm, telegram(fake_telegram, token="${DOCTOR_TEST_TELEGRAM_TOKEN}"))
    code, out = await doctor(tmp_path, settings)
    assert code == 1, out
    unset = line(out, "FAIL  config")  # as `bot config check` says it
    assert "${DOCTOR_TEST_TELEGRAM_TOKEN} is not set" in unset and "channels.telegram.accounts.main" in unset
    assert "telegram/main " not in out  # not checked against Telegram

    code, out = await doctor(tmp_path, settings, env={"DOCTOR_TEST_TELEGRAM_TOKEN": fake_telegram.token})
    assert code == 0, out
    assert line(out, "ok    telegram/main ")
    assert_no_secrets(out, fake_telegram.token)


async def test_a_token_in_the_env_file_beside_the_config_counts_as_for_every_other_command(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    settings = config(tmp_path, fake_llm, telegram(fake_telegram, token="${DOCTOR_TEST_DOTENV_TOKEN}"))
    (tmp_path / ".env").write_text(f"DOCTOR_TEST_DOTENV_TOKEN={fake_telegram.token}\n")
    code, out = await doctor(tmp_path, settings)
    assert code == 0, out
    assert line(out, "ok    config ") and line(out, "ok    telegram/main ")
    assert_no_secrets(out, fake_telegram.token)


async def test_an_invalid_config_fails_with_the_errors(tmp_path: Path, fake_llm: FakeLLM) -> None:
    settings = config(tmp_path, fake_llm)
    settings["bindings"] = [{"agent": "ghost", "match": {"channel": "telegram"}}]
    code, out = await doctor(tmp_path, settings)
    assert code == 1, out
    failed = line(out, "FAIL  config")
    assert "1 error" in failed and "no agent 'ghost'" in failed
    assert out.splitlines()[-1] == "0 ok, 0 warn, 1 FAIL"


async def test_doctor_gives_the_verdict_of_config_check_with_a_missing_key_and_with_everything_set(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    # As shipped: no providers section, an openrouter model, and no OPENROUTER_API_KEY anywhere.
    settings = config(tmp_path, fake_llm, telegram(fake_telegram))
    del settings["providers"]
    settings["defaults"]["model"] = "openrouter/anthropic/claude-sonnet-4"
    settings["agents"][1]["fallbacks"] = []
    checked, said = await doctor(tmp_path, settings, command="config check")
    code, out = await doctor(tmp_path, settings)
    assert checked == code == 1, (said, out)
    errors = [text for text in said.splitlines() if "has no API key" in text]
    assert len(errors) == 1 and "OPENROUTER_API_KEY" in errors[0]
    failed = line(out, "FAIL  config")
    said_errors = [text for text in said.splitlines()[:-1] if not text.startswith("warning: ")]
    assert [text.strip() for text in failed.splitlines()[1:-1]] == said_errors  # the same lines
    said_warnings = [text.removeprefix("warning: ") for text in said.splitlines() if text.startswith("warning: ")]
    assert said_warnings and [text[len("warn  config") :].strip() for text in out.splitlines() if
                              text.startswith("warn  config")] == said_warnings  # fmt: skip
    assert "ok    models" not in out  # it said so before: it contradicted the missing key
    assert line(out, "ok    telegram/main ")  # and it still checks what needs the network

    code, out = await doctor(tmp_path, settings, "--models")
    assert code == 1 and line(out, "FAIL  model openrouter/anthropic/claude-sonnet-4"), out

    # Everything set (the key in the .env beside the file, as every command reads it): both say valid.
    settings = config(tmp_path, fake_llm, telegram(fake_telegram))
    settings["providers"]["fake"]["api_key"] = "${DOCTOR_AGREE_KEY}"
    (tmp_path / ".env").write_text(f"DOCTOR_AGREE_KEY={LLM_KEY}\n", encoding="utf-8")
    checked, said = await doctor(tmp_path, settings, command="config check")
    code, out = await doctor(tmp_path, settings)
    assert checked == code == 0, (said, out)
    assert said.strip().endswith("valid (2 agents, 0 bindings)")
    assert "valid (2 agents, 0 bindings)" in line(out, "ok    config ")
    assert "fake/m, fake/m2" in line(out, "ok    models")
    assert_no_secrets(out + said, LLM_KEY, fake_telegram.token)


async def test_a_corrupt_state_db_fails(tmp_path: Path, fake_llm: FakeLLM) -> None:
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "state.db").write_bytes(b"this is not a database, just garbage " * 200)
    code, out = await doctor(tmp_path, config(tmp_path, fake_llm))
    assert code == 1, out
    failed = line(out, "FAIL  state.db")
    assert "not a database" in failed and "restore a backup" in failed


async def test_models_each_get_one_tiny_request_and_a_refused_key_fails(tmp_path: Path, fake_llm: FakeLLM) -> None:
    settings = config(tmp_path, fake_llm)
    fake_llm.script(Reply.text("pong"), Reply.text("pong"))
    code, out = await doctor(tmp_path, settings, "--models")
    assert code == 0, out
    assert line(out, "ok    model fake/m ") and line(out, "ok    model fake/m2")
    assert sorted(request.body["model"] for request in fake_llm.requests) == ["m", "m2"]
    assert all(request.body["max_tokens"] <= 16 for request in fake_llm.requests)

    fake_llm.script(Reply.error(401), Reply.error(401))
    code, out = await doctor(tmp_path, settings, "--models")
    assert code == 1, out
    refused = line(out, "FAIL  model fake/m ")
    assert "auth (HTTP 401)" in refused and "the key was refused" in refused
    assert_no_secrets(out, LLM_KEY)


async def test_the_postgresql_state_database_is_checked_instead_of_state_db(
    tmp_path: Path, fake_llm: FakeLLM, postgres_url: str
) -> None:
    settings = config(tmp_path, fake_llm, state={"backend": "postgres", "url": postgres_url})
    code, out = await doctor(tmp_path, settings)
    assert code == 0, out
    assert "made at the first start" in line(out, "ok    state database")
    assert "state.db" not in out

    async with await PostgresStore.open(postgres_url):  # migrated, as the first `bot run` leaves it
        pass
    code, out = await doctor(tmp_path, settings)
    assert code == 0 and f"(schema {PG_SCHEMA_VERSION})" in line(out, "ok    state database"), out

    gone = {**settings, "state": {"backend": "postgres", "url": "postgresql://bot:hunter2@127.0.0.1:1/none"}}
    code, out = await doctor(tmp_path, gone)
    assert code == 1
    assert "cannot use PostgreSQL" in line(out, "FAIL  state database")
    assert_no_secrets(out, "hunter2")
