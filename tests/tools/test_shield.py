"""An approved command is not the bot: outside the sandbox it keeps the host's files, but runs in a PID namespace
of its own (no view of the bot's processes or environment, nothing outlives it) with the bot's config folder (`.env`
included) and state hidden, and pinned: neither they nor any folder above them can be renamed or replaced from
inside, as root or not. Real bubblewrap, through the real exec tool."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import tempfile
from asyncio.subprocess import PIPE, STDOUT
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from breakout import breakout_script, got_through
from configs import config_dict, telegram
from fakes.llm import FakeLLM, Reply, ToolCallSpec
from fakes.telegram import FakeTelegram
from helpers import bot_run, eventually, read_state

from bot.config.env import ENV_FILE
from tools.base import RunInfo, ToolContext, invoke
from tools.exec import Authorization, ExecTool, ProcessTable
from tools.sandbox import BotFolders, SandboxSettings, shield_argv

SECRET = "sk-shield-test-4f1c"
OWNER = 4242
STARTED = "channel telegram account main started"


async def allow(command: str, ctx: ToolContext) -> Authorization:
    return Authorization(allowed=True, status="allowed")


def make_bot(folder: Path) -> dict[str, Path]:
    """A bot's folder as `bot init` lays it out: its config and `.env`, its state (with a database) and the default
    agent workspace inside; a host file beside it."""
    folder.mkdir(parents=True)
    (folder / "bindings.yaml").write_text("owners: [telegram:1]\n")
    (folder / ENV_FILE).write_text(f"TELEGRAM_BOT_TOKEN={SECRET}\n")
    (folder / "state").mkdir()
    (folder / "state" / "state.db").write_text("approvals\n")
    (folder / "workspaces" / "main").mkdir(parents=True)
    (folder.parent / "notes.txt").write_text("a host file\n")
    return {"config": folder / "bindings.yaml", "state": folder / "state", "ws": folder / "workspaces" / "main"}


def folders_of(bot: dict[str, Path]) -> BotFolders:
    return BotFolders(config=str(bot["config"].parent), state=str(bot["state"]))


@pytest.fixture
def bot(tmp_path: Path) -> dict[str, Path]:
    return make_bot(tmp_path / "home" / "bot")


@pytest.fixture
async def table(bot: dict[str, Path]) -> AsyncIterator[ProcessTable]:
    processes = ProcessTable(hide=folders_of(bot))
    yield processes
    await processes.close()


async def shielded(
    table: ProcessTable, bot: dict[str, Path], command: str, sandbox: SandboxSettings | None = None
) -> dict[str, Any]:
    ctx = ToolContext(
        RunInfo(
            agent="main", session_key="agent:main:dm", workspace=str(bot["ws"]), sender_is_owner=True, sandbox=sandbox
        )
    )
    result = await invoke(ExecTool(allow, table), "c1", {"command": command}, ctx)
    details: dict[str, Any] = json.loads(result.text)
    return details


async def test_the_hosts_files_stay_but_the_bots_config_and_state_are_hidden(
    table: ProcessTable, bot: dict[str, Path]
) -> None:
    config, state = bot["config"], bot["state"]
    host = await shielded(table, bot, f"cat {config.parent.parent / 'notes.txt'}; echo made > here.txt")
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
        'ls -A "$s" 2>/dev/null | wc -l; cat "$c" 2>/dev/null | wc -c; echo x 2>/dev/null > "$s/state.db"; '
        f"setsid sh -c 'echo $$ > daemon.pid; sleep 988; :' {token} >/dev/null 2>&1 & "
        "while [ ! -s daemon.pid ]; do :; done; echo done"
    )
    fake_llm.script(Reply.tool_calls(ToolCallSpec("exec", {"command": probe})), "Looked.")
    config = config_dict(
        tmp_path, fake_llm, telegram(tg, streaming="off"), agents=[{"id": "main", "exec": {"security": "full"}}],
        owners=[f"telegram:{OWNER}"],
    )  # fmt: skip
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


# --- the config's whole folder: hidden, and pinned where it is ----------------------------------------------------


@pytest.mark.parametrize("workspace", ["inside the config's folder", "beside it"])
async def test_the_config_folder_cannot_be_read_moved_or_replaced_from_the_shield_or_the_sandbox(
    tmp_path: Path, workspace: str
) -> None:
    bot = make_bot(tmp_path / "home" / "bot")
    if workspace == "beside it":  # in a folder above the hidden one, which the shield pins: it must stay writable
        bot["ws"] = tmp_path / "home" / "ws"
    folder = bot["config"].parent
    (bot["ws"] / "attack.sh").parent.mkdir(parents=True, exist_ok=True)
    (bot["ws"] / "attack.sh").write_text(breakout_script(folder))
    table = ProcessTable(hide=folders_of(bot))
    try:
        # Under the shield the command works on the host's files: each way must fail. In the sandbox the folders it
        # sees above the workspace are its own throwaway ones: what it does there must leave the host as it was.
        for sandbox in (None, SandboxSettings(mode="all")):
            (bot["ws"] / "made.txt").unlink(missing_ok=True)
            output = (await shielded(table, bot, "sh attack.sh", sandbox))["output"]
            assert SECRET not in output and "owners" not in output, output
            if sandbox is None:
                assert got_through(output) == [], output
                listed = "workspaces " if workspace != "beside it" else ""
                assert f"list the folder: {listed}\n" in output, output
            assert (bot["ws"] / "made.txt").read_text() == "made\n"  # the control: the workspace is the command's
            assert bot["config"].read_text() == "owners: [telegram:1]\n"
            assert (folder / ENV_FILE).read_text() == f"TELEGRAM_BOT_TOKEN={SECRET}\n"
            assert (bot["state"] / "state.db").read_text() == "approvals\n"
            assert sorted(path.name for path in (tmp_path / "home").iterdir()) == sorted(
                ["bot", "notes.txt", *(["ws"] if workspace == "beside it" else [])]
            )
    finally:
        await table.close()


@pytest.fixture
def reachable_folder() -> Iterator[Path]:
    """A folder another user can reach (pytest's own are root's alone), removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="switchboard-shield-", dir="/tmp"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


async def test_a_bot_that_is_not_root_is_shielded_the_same(reachable_folder: Path) -> None:
    """bubblewrap works differently for a user (a user namespace of its own, no setuid): the pins hold there too,
    and a namespace the command makes gets the mounts locked."""
    bot = make_bot(reachable_folder / "home" / "bot")
    (bot["ws"] / "attack.sh").write_text(breakout_script(bot["config"].parent))
    user = 65534  # nobody
    for path in [reachable_folder, *reachable_folder.rglob("*")]:
        os.chown(path, user, user)
    argv = shield_argv(["/bin/sh", "attack.sh"], str(bot["ws"]), folders_of(bot), bwrap=shutil.which("bwrap") or "")
    if os.geteuid() == 0:
        argv = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", "--", *argv]
    process = await asyncio.create_subprocess_exec(
        *argv, cwd=bot["ws"], env={"PATH": "/usr/bin:/bin", "HOME": "/"}, stdout=PIPE, stderr=STDOUT
    )
    output = (await asyncio.wait_for(process.communicate(), 60))[0].decode()
    assert process.returncode == 0, output
    assert SECRET not in output and "owners" not in output, output
    assert got_through(output) == [], output
    assert (bot["ws"] / "made.txt").read_text() == "made\n"
    assert bot["config"].read_text() == "owners: [telegram:1]\n"
    assert sorted(path.name for path in (reachable_folder / "home").iterdir()) == ["bot", "notes.txt"]
