"""An approved command is not the bot: outside the sandbox it keeps the host's files, but runs in a PID namespace
of its own (no view of the bot's processes or environment, nothing outlives it) with the bot's config and state
hidden. Real bubblewrap, through the real exec tool."""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from fakes.llm import FakeLLM, Reply, ToolCallSpec
from fakes.telegram import FakeTelegram
from helpers import bot_run, eventually, read_state

from tools.base import RunInfo, ToolContext, invoke
from tools.exec import Authorization, ExecTool, ProcessTable

SECRET = "sk-shield-test-4f1c"
OWNER = 4242
STARTED = "channel telegram account main started"


async def allow(command: str, ctx: ToolContext) -> Authorization:
    return Authorization(allowed=True, status="allowed")


@pytest.fixture
def bot(tmp_path: Path) -> dict[str, Path]:
    """A bot's folder: its config, its state (with a database) and an agent workspace beside them."""
    (tmp_path / "bindings.yaml").write_text("owners: [telegram:1]\n")
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "state.db").write_text("approvals\n")
    (tmp_path / "ws").mkdir()
    (tmp_path / "notes.txt").write_text("a host file\n")
    return {"config": tmp_path / "bindings.yaml", "state": tmp_path / "state", "ws": tmp_path / "ws"}


@pytest.fixture
async def table(bot: dict[str, Path]) -> AsyncIterator[ProcessTable]:
    processes = ProcessTable(hide=[str(bot["config"]), str(bot["state"])])
    yield processes
    await processes.close()


async def shielded(table: ProcessTable, bot: dict[str, Path], command: str) -> dict[str, Any]:
    ctx = ToolContext(
        RunInfo(agent="main", session_key="agent:main:dm", workspace=str(bot["ws"]), sender_is_owner=True)
    )
    result = await invoke(ExecTool(allow, table), "c1", {"command": command}, ctx)
    details: dict[str, Any] = json.loads(result.text)
    return details


async def test_the_hosts_files_stay_but_the_bots_config_and_state_are_hidden(
    table: ProcessTable, bot: dict[str, Path]
) -> None:
    config, state = bot["config"], bot["state"]
    host = await shielded(table, bot, f"cat {bot['ws'].parent / 'notes.txt'}; echo made > here.txt")
    assert host["output"] == "a host file\n"  # the control: an owner's command keeps the host's files
    assert (bot["ws"] / "here.txt").read_text() == "made\n"
    attempts = [
        f"cat {config}",
        f"echo 'security: full' >> {config}",
        f"ls -A {state}",
        f"cat {state}/state.db",
        f"echo forged > {state}/state.db",
        f"rm -rf {state}",
        f"mv {config} {config}.old",
    ]
    for command in attempts:
        details = await shielded(table, bot, command)
        assert "approvals" not in details["output"] and "owners" not in details["output"], command
    assert config.read_text() == "owners: [telegram:1]\n"
    assert (state / "state.db").read_text() == "approvals\n"


async def test_the_bots_processes_and_environment_are_out_of_sight(
    table: ProcessTable, bot: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHIELD_TEST_KEY", SECRET)
    details = await shielded(
        table, bot, "cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'; ls /proc | grep -c '^[0-9]'"
    )
    assert SECRET not in details["output"]
    assert int(details["output"].splitlines()[-1]) < 10  # only the command's own few processes
    bot_pid = os.getpid()  # the test process stands for the bot here
    seen = await shielded(table, bot, f"test -r /proc/{bot_pid}/environ && grep -c {SECRET} /proc/{bot_pid}/environ")
    assert SECRET not in seen["output"] and seen["status"] == "error"


async def test_nothing_a_command_starts_outlives_it(table: ProcessTable, bot: dict[str, Path]) -> None:
    token = secrets.token_hex(8)  # names this test's daemon apart from any other process on the machine
    daemon = f"setsid sh -c 'echo $$ > daemon.pid; sleep 987; :' {token} >/dev/null 2>&1 &"
    details = await shielded(table, bot, f"{daemon} while [ ! -s daemon.pid ]; do :; done; echo started")
    assert details["output"] == "started\n"
    await gone(token)


async def gone(token: str) -> None:
    """Wait until no process names `token`: the kernel empties a PID namespace once its first process ends, a moment
    after the command's result is in; nobody here kills anything, and a survivor (`sleep 987`) would stay far longer
    than the wait."""
    await eventually(
        lambda: not [pid for pid in os.listdir("/proc") if pid.isdigit() and token.encode() in _cmdline(pid)],
        f"the daemon {token} to be gone with its command",
    )


def _cmdline(pid: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


async def test_without_bubblewrap_a_shielded_command_is_refused_never_run_bare(
    table: ProcessTable, bot: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    details = await shielded(table, bot, "touch ran.txt")
    assert details["status"] == "error"
    assert "cannot run commands apart from the bot" in details["error"] and "bubblewrap" in details["error"]
    assert not (bot["ws"] / "ran.txt").exists()


# --- through a real `bot run`: the owner's own unsandboxed command, allowed without asking ------------------------


async def test_an_owners_command_in_a_real_bot_cannot_reach_the_bot(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg = fake_telegram
    state = tmp_path / "state"
    token = secrets.token_hex(8)  # names this test's daemon apart from any other process on the machine
    # The bot's own paths are spelled so that the policy's text check does not see them: the shield must hold.
    probe = (
        "cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c SHIELD_BOT_SECRET; "
        # the bot's `--config` argument; the bracket keeps grep's own command line (also in /proc) from matching
        "cat /proc/*/cmdline 2>/dev/null | tr '\\0' '\\n' | grep -c -x -e '--conf[i]g'; "
        'home="$PWD/../.."; s="$home/sta"; s="${s}te"; c="$home/bind"; c="${c}ings.yaml"; '
        'ls -A "$s" | wc -l; cat "$c" 2>/dev/null | wc -c; echo x 2>/dev/null > "$s/state.db"; '
        f"setsid sh -c 'echo $$ > daemon.pid; sleep 988; :' {token} >/dev/null 2>&1 & "
        "while [ ! -s daemon.pid ]; do :; done; echo done"
    )
    fake_llm.script(Reply.tool_calls(ToolCallSpec("exec", {"command": probe})), "Looked.")
    config = {
        "defaults": {"model": "fake/m", "workspace_root": str(tmp_path / "ws")},
        "agents": [{"id": "main", "exec": {"security": "full"}}],
        "providers": {"fake": {"kind": "openai", "base_url": fake_llm.openai_base_url}},
        "owners": [f"telegram:{OWNER}"],
        "channels": {"telegram": {"accounts": {"main": {
            "token": tg.token, "api_base_url": tg.url, "poll_timeout": 1, "streaming": "off",
        }}}},
    }  # fmt: skip
    async with bot_run(config, tmp_path, STARTED, env={"SHIELD_BOT_SECRET": SECRET}):
        await tg.private_message("look around", user_id=OWNER, name="Owner")
        await tg.wait_sent(OWNER, 1)
        [result] = [json.loads(m["content"]) for m in fake_llm.requests[1].body["messages"] if m["role"] == "tool"]
        assert result["status"] == "ok", result
        assert "sandbox" not in result  # the owner's DM: not the sandbox, the host's files
        # the secret in no process's environment; no state listed; the config empty; then the daemon gone
        assert result["output"].splitlines() == ["0", "0", "0", "0", "done"]
        await gone(token)
    assert read_state(state, "SELECT count(*) FROM approvals") == [(0,)]  # the database is intact and readable
