"""The admin commands through the real CLI: `bot config show` masks every secret, `bot pairing revoke` and
`bot approvals rules revoke` are obeyed by a running `bot run` from its next message, `bot service install`."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from configs import config_dict, telegram
from fakes.llm import FakeLLM, Reply, ToolCallSpec
from fakes.telegram import FakeTelegram
from helpers import bot_run, eventually

OWNER = 4242
STRANGER = 555
STARTED = "channel telegram account main started"

SECRETS = {
    "TG_TOKEN": "123456:tg-token-VALUE-abcdef",
    "OR_KEYS": "sk-or-first-key-111,sk-or-second-key-222",
    "AUTH_HEADER": "header-secret-333",
    "SLACK_BOT": "xoxb-slack-bot-444",
    "SLACK_APP": "xapp-slack-app-555",
    "SLACK_SIGNING": "signing-secret-666",
    "GH_TOKEN": "ghp_github_token_777",
    "MCP_PLAIN": "plain-mcp-value-888",
    "WHISPER_KEY": "wk-transcribe-999",
}
SHOWN_CONFIG = """\
defaults:
  model: openrouter/some-model
  workspace_root: ${WS_ROOT}
providers:
  openrouter:
    kind: openai
    base_url: http://127.0.0.1:9/api/v1
    api_keys: ${OR_KEYS}
    headers: {X-Title: switchboard, Authorization: "Bearer ${AUTH_HEADER}"}
channels:
  telegram:
    accounts:
      main:
        token: ${TG_TOKEN}
        api_base_url: "http://127.0.0.1:9/bot${TG_TOKEN}/"
      spare:
        token: written-into-the-file-1234
  slack:
    accounts:
      work: {bot_token: "${SLACK_BOT}", app_token: "${SLACK_APP}", signing_secret: "${SLACK_SIGNING}"}
mcp:
  servers:
    github: {command: github-mcp, env: {GITHUB_TOKEN: "${GH_TOKEN}", MODE: "${MCP_PLAIN}"}}
media:
  transcription: {base_url: "https://api.example.com/v1", api_key: "${WHISPER_KEY}"}
"""


def cli_env(**extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("SWITCHBOARD")}
    return {key: value for key, value in env.items() if not key.endswith("_API_KEY")} | extra


def bot(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bot", *args], capture_output=True, text=True, env=env or cli_env(), timeout=60
    )


async def run_cli(*args: str) -> tuple[int, str]:
    """The CLI beside a running bot (asynchronously: the fakes serve from this test's event loop)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await process.communicate()
    return process.returncode or 0, out.decode()


# --- bot config show ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("as_json", [False, True], ids=["yaml", "json"])
def test_config_show_prints_the_effective_config_with_every_secret_masked(tmp_path: Path, as_json: bool) -> None:
    path = tmp_path / "bindings.yaml"
    path.write_text(SHOWN_CONFIG)
    env = cli_env(WS_ROOT=str(tmp_path / "ws"), **SECRETS)
    result = bot("config", "show", "--config", str(path), *(["--json"] if as_json else []), env=env)
    assert result.returncode == 0, result.stderr
    output = result.stdout + result.stderr
    values = [*SECRETS.values(), *SECRETS["OR_KEYS"].split(","), "written-into-the-file-1234"]
    leaked = [value for value in values if value in output or value[:8] in output]
    assert leaked == []
    shown: dict[str, Any] = json.loads(result.stdout) if as_json else yaml.safe_load(result.stdout)
    telegram = shown["channels"]["telegram"]["accounts"]
    assert telegram["main"]["token"] == telegram["spare"]["token"] == "***"
    assert telegram["main"]["api_base_url"] == "http://127.0.0.1:9/bot***/"  # a secret inside another value
    assert telegram["main"]["dm_policy"] == "pairing"  # the channel plugin's defaults are filled in
    slack = shown["channels"]["slack"]["accounts"]["work"]
    assert slack["bot_token"] == slack["app_token"] == slack["signing_secret"] == "***"
    provider = shown["providers"]["openrouter"]
    assert provider["api_keys"] == ["***", "***"]  # how many keys, nothing of them
    assert provider["headers"] == {"X-Title": "***", "Authorization": "***"}
    assert provider["base_url"] == "http://127.0.0.1:9/api/v1"
    assert shown["mcp"]["servers"]["github"]["env"] == {"GITHUB_TOKEN": "***", "MODE": "***"}
    assert shown["media"]["transcription"]["api_key"] == "***"
    assert shown["defaults"]["workspace_root"] == str(tmp_path / "ws")  # ${VAR} substituted
    assert shown["defaults"]["max_tool_iterations"] == 50  # defaults written out
    assert shown["agents"][0]["id"] == "main"
    assert shown["agents"][0]["model"] == shown["defaults"]["model"] is not None  # inherited, shown as applied
    assert shown["agents"][0]["workspace"] == str(tmp_path / "ws" / "main")


def test_config_show_without_providers_shows_the_environments_with_their_keys_masked(tmp_path: Path) -> None:
    path = tmp_path / "bindings.yaml"
    path.write_text("defaults: {model: openrouter/some-model}\n")
    result = bot(
        "config", "show", "--json", "--config", str(path), env=cli_env(OPENROUTER_API_KEY="sk-or-env-key-4321")
    )
    assert result.returncode == 0, result.stderr
    assert "sk-or-env" not in result.stdout + result.stderr
    assert json.loads(result.stdout)["providers"]["openrouter"]["api_key"] == "***"


def test_config_show_shows_the_non_owner_profile_as_applied_like_bot_tools_not_owner(tmp_path: Path) -> None:
    path = tmp_path / "bindings.yaml"
    path.write_text(
        "defaults: {model: openrouter/some-model}\n"
        "agents: [{id: main}, {id: quiet, tools: {deny: [web_fetch]}}]\n"
        "tools:\n  non_owner: {allow: [cron], deny: [memory_get]}\n"
    )
    result = bot("config", "show", "--json", "--config", str(path))
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    # the default deny list with the config's deny added; allow lifts cron out of group:automation
    assert shown["tools"]["non_owner"] == {
        "deny": ["group:runtime", "write", "edit", "memory_write", "group:mcp", "group:automation", "group:sessions",
                 "memory_get"],
        "allow": ["cron"],
        "only": [],
    }  # fmt: skip
    agents = {agent["id"]: agent["non_owner_tools"] for agent in shown["agents"]}
    assert "cron" in agents["main"] and "read" in agents["main"]  # cron exists under `bot run`, and is lifted
    assert not {"exec", "write", "memory_get", "sessions_send"} & set(agents["main"])
    assert agents["quiet"] == [name for name in agents["main"] if name != "web_fetch"]  # the agent's own layer too
    for agent, names in agents.items():  # the same lists as `bot tools --not-owner` gives
        listed = bot("tools", "--config", str(path), "--agent", agent, "--not-owner")
        assert listed.returncode == 0, listed.stderr
        kept = listed.stdout.split("kept (")[1].split("removed (")[0].splitlines()[1:]
        assert [line.split()[0] for line in kept] == names


def test_config_show_refuses_a_broken_config_like_config_check(tmp_path: Path) -> None:
    path = tmp_path / "bindings.yaml"
    path.write_text("agents:\n  - id: main\n    modle: x\n")
    result = bot("config", "show", "--config", str(path))
    assert result.returncode == 1 and result.stdout == ""
    assert "bindings.yaml:3" in result.stderr


# --- bot pairing revoke against a running bot ----------------------------------------------------------------------


def pairing_config(llm: FakeLLM, tg: FakeTelegram, tmp_path: Path) -> dict[str, Any]:
    account = telegram(tg, streaming="off", dm_policy="pairing")
    return config_dict(tmp_path, llm, account, owners=[f"telegram:{OWNER}"])


def pairing_code(text: str) -> str:
    found = re.search(r"pairing code is ([A-Z2-9]{8})", text)
    assert found is not None, text
    return found.group(1)


async def test_a_revoked_pairing_makes_the_sender_a_stranger_again_on_the_running_bot(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg = fake_telegram
    fake_llm.script("Hello, paired friend.")
    async with bot_run(pairing_config(fake_llm, tg, tmp_path), tmp_path, STARTED) as path:
        config = ("--config", str(path))
        await tg.private_message("hello?", user_id=STRANGER, name="Stranger")
        [first] = await tg.wait_sent(STRANGER, 1)
        code = pairing_code(first)
        code_listed, listed = await run_cli("pairing", "list", *config)
        assert code_listed == 0 and code in listed and f"({STRANGER})" in listed
        approved = await run_cli("pairing", "approve", "telegram", code, *config)
        assert approved == (0, "Approved Stranger: the bot tells them they may talk now.\n")
        welcome = "You're approved: I'm listening now."  # the running bot sends what the CLI recorded, unprompted
        await eventually(lambda: tg.sent[STRANGER][1:] == [welcome], "the welcome after `bot pairing approve`")

        await tg.private_message("now?", user_id=STRANGER, name="Stranger")
        await eventually(lambda: "Hello, paired friend." in tg.sent[STRANGER], "the paired sender's answer")
        assert tg.sent[STRANGER][1:] == [welcome, "Hello, paired friend."]  # told once
        code_listed, listed = await run_cli("pairing", "list", *config)
        assert code_listed == 0 and "No pending pairing requests." in listed
        assert re.search(rf"telegram/main  {STRANGER}  Stranger  approved by cli", listed), listed

        revoked = await run_cli("pairing", "revoke", "telegram", str(STRANGER), *config)
        assert revoked == (0, f"Revoked {STRANGER} on telegram: removed 1 approval.\n")
        answered = len(tg.sent[STRANGER])
        await tg.private_message("still friends?", user_id=STRANGER, name="Stranger")
        await tg.wait_sent(STRANGER, answered + 1)
        again = pairing_code(tg.sent[STRANGER][-1])  # a stranger again: a new code, and the model hears nothing
        assert again != code and len(fake_llm.requests) == 1

        code_listed, listed = await run_cli("pairing", "list", *config)
        assert again in listed and "Approved" not in listed
        # Revoking drops the pending request too; then there is nothing left to revoke.
        assert await run_cli("pairing", "revoke", "telegram", str(STRANGER), *config) == (
            0, f"Revoked {STRANGER} on telegram: removed 1 pending request.\n",
        )  # fmt: skip
        status, said = await run_cli("pairing", "revoke", "telegram", str(STRANGER), *config)
        assert status == 1 and "has no pairing and no pending request" in said
        assert len(fake_llm.requests) == 1


async def test_a_pairing_approved_while_the_bot_is_stopped_is_told_when_it_starts(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg = fake_telegram
    settings = pairing_config(fake_llm, tg, tmp_path)
    async with bot_run(settings, tmp_path, STARTED) as path:
        await tg.private_message("hello?", user_id=STRANGER, name="Stranger")
        code = pairing_code((await tg.wait_sent(STRANGER, 1))[0])
    approved = await run_cli("pairing", "approve", "telegram", code, "--config", str(path))
    assert approved == (0, "Approved Stranger: the bot tells them they may talk now.\n")
    assert tg.sent[STRANGER][1:] == []
    async with bot_run(settings, tmp_path, STARTED):
        await eventually(lambda: tg.sent[STRANGER][1:] == ["You're approved: I'm listening now."], "the welcome")
    assert len(fake_llm.requests) == 0


# --- bot approvals rules against a running bot ---------------------------------------------------------------------


def approvals_config(llm: FakeLLM, tg: FakeTelegram, tmp_path: Path) -> dict[str, Any]:
    return config_dict(tmp_path, llm, telegram(tg, streaming="off", dm_policy="open"), owners=[f"telegram:{OWNER}"])


def cards(tg: FakeTelegram) -> list[dict[str, Any]]:
    return [call for call in tg.calls("sendMessage") if call["chat_id"] == OWNER and "reply_markup" in call]


def buttons_of(card: dict[str, Any]) -> dict[str, str]:
    markup = card["reply_markup"]
    markup = json.loads(markup) if isinstance(markup, str) else markup
    return {button["text"]: button["callback_data"] for row in markup["inline_keyboard"] for button in row}


def card_message(tg: FakeTelegram, data: str) -> int:
    approval_id = data.split(":")[1]
    for (chat_id, message_id), stored in tg.messages.items():
        if chat_id == OWNER and approval_id in stored.visible:
            return message_id
    raise AssertionError(f"no message shows approval request {approval_id}")


def exec_result(llm: FakeLLM, request: int) -> dict[str, Any]:
    message = llm.requests[request].body["messages"][-1]
    assert message["role"] == "tool"
    result: dict[str, Any] = json.loads(message["content"])
    return result


async def test_a_revoked_allow_always_rule_asks_again_on_the_running_bot(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg = fake_telegram
    command = Reply.tool_calls(ToolCallSpec("exec", {"command": "touch always.txt"}))
    fake_llm.script(command, "First.", command, "Second, unasked.", command, "Third, denied.")
    async with bot_run(approvals_config(fake_llm, tg, tmp_path), tmp_path, STARTED) as path:
        config = ("--config", str(path))
        assert await run_cli("approvals", "rules", "list", *config) == (0, 'No "Allow always" rules.\n')
        await tg.private_message("one", user_id=OWNER, name="Owner")
        await eventually(lambda: len(cards(tg)) == 1, "the approval card")
        always = buttons_of(cards(tg)[0])["Allow always"]
        await tg.callback_query(always, message_id=card_message(tg, always), chat_id=OWNER, user_id=OWNER, name="Boss")
        await eventually(lambda: "First." in tg.sent[OWNER], "the first answer")

        status, listed = await run_cli("approvals", "rules", "list", "--json", *config)
        assert status == 0, listed
        [rule] = [json.loads(line) for line in listed.splitlines()]
        assert rule["agent"] == "main" and rule["executable"].endswith("/touch") and rule["args"] == ["always.txt"]
        assert rule["approved_by"] == "Boss"
        status, listed = await run_cli("approvals", "rules", "list", *config)
        assert status == 0 and listed.startswith(f"{rule['id']}  main  ") and "always.txt" in listed

        await tg.private_message("two", user_id=OWNER, name="Owner")
        await eventually(lambda: "Second, unasked." in tg.sent[OWNER], "the second answer")
        assert len(cards(tg)) == 1 and exec_result(fake_llm, 3)["status"] == "ok"  # the rule held: not asked

        status, said = await run_cli("approvals", "rules", "revoke", rule["id"][:6], *config)
        assert status == 0 and said.startswith(f"Revoked {rule['id']}: main asks again before "), said
        await tg.private_message("three", user_id=OWNER, name="Owner")
        await eventually(lambda: len(cards(tg)) == 2, "a new approval card for the same command")
        deny = buttons_of(cards(tg)[1])["Deny"]
        await tg.callback_query(deny, message_id=card_message(tg, deny), chat_id=OWNER, user_id=OWNER)
        await eventually(lambda: "Third, denied." in tg.sent[OWNER], "the third answer")
        assert exec_result(fake_llm, 5)["status"] == "denied"

        assert await run_cli("approvals", "rules", "list", *config) == (0, 'No "Allow always" rules.\n')
        status, said = await run_cli("approvals", "rules", "revoke", rule["id"], *config)
        assert status == 1 and 'No "Allow always" rule has an id starting with' in said


# --- bot service install ---------------------------------------------------------------------------------------------


def systemd_analyze() -> str:
    """The installed `systemd-analyze`; where it is missing the test is skipped, saying why in the summary: a unit
    nobody verified is not a pass."""
    found = shutil.which("systemd-analyze")
    if found is None:
        pytest.skip("systemd-analyze is not installed, so the unit was not verified (`make test` installs systemd)")
    return found


def verify_unit(unit: Path) -> None:
    """`systemd-analyze verify` on the unit: no error and no warning about it. Its ExecStart must exist (verify checks
    it): the units here run this venv's `bot`."""
    checked = subprocess.run([systemd_analyze(), "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stderr
    assert unit.name not in checked.stderr and str(unit) not in checked.stderr, checked.stderr


def test_service_install_print_gives_a_unit_that_runs_the_bot_with_restarts(tmp_path: Path) -> None:
    folder = tmp_path / "my bot"
    folder.mkdir()
    path = folder / "bindings.yaml"
    path.write_text("agents:\n  - id: main\n")
    result = bot("service", "install", "--print", "--config", str(path))
    assert result.returncode == 0, result.stderr
    unit = result.stdout
    lines = unit.splitlines()
    bot_script = Path(sys.executable).parent / "bot"
    program = str(bot_script) if bot_script.is_file() else f"{sys.executable} -m bot"
    assert f'ExecStart={program} run --config "{path}"' in lines
    assert f"WorkingDirectory={folder}" in lines
    assert f"EnvironmentFile=-{folder / '.env'}" in lines
    assert {"Restart=on-failure", "RestartSec=5", "WantedBy=multi-user.target", "[Install]"} <= set(lines)
    assert "After=network-online.target" in lines
    written = tmp_path / "switchboard.service"
    written.write_text(unit)
    verify_unit(written)


def test_service_install_user_writes_the_unit_and_says_how_to_enable_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    path = tmp_path / "bindings.yaml"
    path.write_text("agents:\n  - id: main\n")
    env = {key: value for key, value in cli_env().items() if key != "XDG_CONFIG_HOME"} | {"HOME": str(home)}
    result = bot("service", "install", "--user", "--config", str(path), env=env)
    assert result.returncode == 0, result.stderr
    unit = home / ".config" / "systemd" / "user" / "switchboard.service"
    text = unit.read_text()
    assert "ExecStart=" in text and f"run --config {path}\n" in text and "User=" not in text
    assert "WantedBy=default.target" in text.splitlines() and "network-online.target" not in text
    assert f"Wrote {unit}." in result.stdout
    assert "systemctl --user daemon-reload" in result.stdout
    assert "systemctl --user enable --now switchboard.service" in result.stdout
    verify_unit(unit)

    # The same unit again is fine; a unit changed by hand is kept unless --force.
    assert bot("service", "install", "--user", "--config", str(path), env=env).returncode == 0
    unit.write_text(text + "# mine\n")
    refused = bot("service", "install", "--user", "--config", str(path), env=env)
    assert refused.returncode == 1 and "exists and differs" in refused.stderr
    assert unit.read_text().endswith("# mine\n")
    forced = bot("service", "install", "--user", "--force", "--config", str(path), env=env)
    assert forced.returncode == 0 and unit.read_text() == text


def test_a_unit_verified_without_systemd_analyze_is_skipped_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    unit = tmp_path / "switchboard.service"
    unit.write_text("[Service]\nExecStart=/bin/true\n")
    monkeypatch.setenv("PATH", str(tmp_path))  # no systemd-analyze on it

    with pytest.raises(pytest.skip.Exception, match="systemd-analyze is not installed, so the unit was not verified"):
        verify_unit(unit)


def test_verify_unit_fails_on_a_unit_systemd_refuses(tmp_path: Path) -> None:
    unit = tmp_path / "switchboard.service"
    unit.write_text(f"[Service]\nExecStart={tmp_path / 'missing' / 'bot'} run\nRestart=sometimes\n")

    with pytest.raises(AssertionError, match="is not executable"):
        verify_unit(unit)


def test_service_install_needs_the_config_file(tmp_path: Path) -> None:
    result = bot("service", "install", "--print", "--config", str(tmp_path / "missing.yaml"))
    assert result.returncode == 1 and "file not found" in result.stderr
