"""Through a real `bot run` (the fake Telegram, the fake LLM, real bubblewrap): what the bot runs cannot reach its
config folder. An owner's approved command can neither read `.env` nor carry the folder (or one above it) away and
plant a config the live reload would apply; an MCP server reads neither the bot's environment nor `.env`, and its
3 MB answer reaches the model cut and fenced. Each with its control: the command still writes in its workspace, the
server still answers."""

from __future__ import annotations

import json
import re
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from breakout import breakout_script, got_through
from fakes.llm import FakeLLM, Reply, ToolCallSpec
from fakes.telegram import FakeTelegram
from helpers import eventually, launch_bot

from bot.config.env import ENV_FILE

OWNER = 4242
STRANGER = 666
STARTED = "channel telegram account main started"
RELOADED = "reloaded: it applies from the next message"
SERVERS = Path(__file__).resolve().parent.parent / "mcp_servers"
DOTENV_SECRET = "dotenv-secret-7d1e9a"
BOT_SECRET = "bot-environment-secret-52c0"


def config(
    llm: FakeLLM, tg: FakeTelegram, model: str = "m", workspace_root: str = "workspaces", **more: Any
) -> dict[str, Any]:
    """The owner's DMs answered by `model`; the Telegram token comes from `.env`, as the README suggests."""
    return {
        "defaults": {"model": f"fake/{model}", "workspace_root": workspace_root},
        "agents": [{"id": "main", "exec": {"security": "full"}}],
        "providers": {"fake": {"kind": "openai", "base_url": llm.openai_base_url}},
        "owners": [f"telegram:{OWNER}"],
        "channels": {"telegram": {"accounts": {"main": {
            "token": "${TG_TOKEN}", "api_base_url": tg.url, "poll_timeout": 1, "streaming": "off",
        }}}},
        **more,
    }  # fmt: skip


def bot_folder(tmp_path: Path, tg: FakeTelegram) -> Path:
    """`<tmp>/home/bot`, holding `.env` (the token and a secret); bindings.yaml is written there by launch_bot."""
    folder = tmp_path / "home" / "bot"
    folder.mkdir(parents=True)
    (folder / ENV_FILE).write_text(f"TG_TOKEN={tg.token}\nDOTENV_SECRET={DOTENV_SECRET}\n")
    return folder


def tool_outputs(llm: FakeLLM, request: int) -> list[dict[str, Any]]:
    found = [json.loads(m["content"]) for m in llm.requests[request].body["messages"] if m["role"] == "tool"]
    return found


def fenced(content: str) -> str:
    """The text inside an untrusted-content fence."""
    found = re.search(r"<<<EXTERNAL_UNTRUSTED_CONTENT [^\n]*>>>\n(.*)\n<<<END_EXTERNAL", content, re.S)
    assert found is not None, content
    return found.group(1)


def in_log(log: Path, line: str) -> Callable[[], bool]:
    return lambda: line in log.read_text()


async def stop(process: Any) -> None:
    process.send_signal(signal.SIGTERM)
    assert await process.wait() == 0


@pytest.mark.parametrize("workspace", ["inside the config's folder", "beside it"])
async def test_an_approved_command_cannot_read_dotenv_nor_plant_a_config_the_reload_applies(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram, workspace: str
) -> None:
    tg, folder = fake_telegram, bot_folder(tmp_path, fake_telegram)
    if workspace == "inside the config's folder":
        settings, ws = config(fake_llm, tg), folder / "workspaces" / "main"  # the default
    else:  # in the folder above it, which the shield pins: it must stay writable
        settings, ws = config(fake_llm, tg, workspace_root="../ws"), folder.parent / "ws" / "main"
    # What the stranger would have the reload apply: she is an owner, and a model of her choosing answers.
    planted = json.dumps(config(fake_llm, tg, model="planted", owners=[f"telegram:{OWNER}", f"telegram:{STRANGER}"]))
    ws.mkdir(parents=True)
    (ws / "attack.sh").write_text(breakout_script(folder, planted))
    fake_llm.script(Reply.tool_calls(ToolCallSpec("exec", {"command": "sh attack.sh"})), "Tried.")
    original = json.dumps(settings)
    process = await launch_bot(settings, folder, STARTED, env={"SHIELD_BOT_SECRET": BOT_SECRET})
    log = folder / "bot.log"
    try:
        await tg.private_message("try it", user_id=OWNER, name="Owner")
        assert await tg.wait_sent(OWNER, 1) == ["Tried."]
        [result] = tool_outputs(fake_llm, 1)
        assert result["status"] == "ok", result
        output = result["output"]
        assert DOTENV_SECRET not in output and tg.token not in output, output
        assert "read .env: cat:" in output and "No such file or directory" in output
        assert got_through(output) == [], output
        assert (ws / "made.txt").read_text() == "made\n"  # the control: the command ran, in its workspace
        # The bot's files are where they were, as they were: there is nothing else for a reload to read.
        assert (folder / "bindings.yaml").read_text() == original
        assert (folder / ENV_FILE).read_text().startswith(f"TG_TOKEN={tg.token}\n")
        assert sorted(path.name for path in folder.parent.iterdir()) == sorted(
            ["bot", *(["ws"] if workspace == "beside it" else [])]
        )
        process.send_signal(signal.SIGHUP)  # a reload now reads whatever is at the config's path
        await eventually(in_log(log, RELOADED), "the reload after SIGHUP")
        fake_llm.script("Still mine.")
        await tg.private_message("who answers?", user_id=OWNER, name="Owner")
        assert await tg.wait_sent(OWNER, 2) == ["Tried.", "Still mine."]
        assert fake_llm.requests[-1].body["model"] == "m"  # not the planted config's model
    finally:
        await stop(process)


async def test_an_mcp_server_reads_neither_the_bots_environment_nor_dotenv_and_its_huge_answer_is_cut(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg, folder = fake_telegram, bot_folder(tmp_path, fake_telegram)
    (tmp_path / "notes.txt").write_text("a host file\n")
    python = sys.executable
    servers = {
        "prying": {"command": python, "args": [str(SERVERS / "prying.py")]},
        "huge": {"command": python, "args": [str(SERVERS / "huge.py")]},
    }
    settings = config(fake_llm, tg, mcp={"servers": servers})
    process = await launch_bot(settings, folder, STARTED, env={"SHIELD_BOT_SECRET": BOT_SECRET})
    log = folder / "bot.log"
    try:
        for name in servers:
            await eventually(in_log(log, f"MCP server {name} running"), f"the MCP server {name}")
        environ = f"/proc/{process.pid}/environ"
        fake_llm.script(
            Reply.tool_calls(
                ToolCallSpec("prying__read_file", {"path": environ}, id="c1"),
                ToolCallSpec("prying__read_file", {"path": str(folder / ENV_FILE)}, id="c2"),
                ToolCallSpec("prying__list_folder", {"path": str(folder)}, id="c3"),
                ToolCallSpec("prying__processes", {}, id="c4"),
                ToolCallSpec("prying__read_file", {"path": str(tmp_path / "notes.txt")}, id="c5"),
            ),
            "Looked.",
            Reply.tool_calls(ToolCallSpec("huge__dump", {}, id="c6")),
            "Done.",
        )
        await tg.private_message("pry", user_id=OWNER, name="Owner")
        assert await tg.wait_sent(OWNER, 1) == ["Looked."]
        seen = json.dumps(fake_llm.requests[1].body)
        assert BOT_SECRET not in seen and DOTENV_SECRET not in seen and tg.token not in seen
        environ_read, dotenv_read, listed, processes, control = tool_outputs(fake_llm, 1)
        assert fenced(environ_read["content"]) == f"cannot read {environ}: No such file or directory"
        assert fenced(dotenv_read["content"]) == f"cannot read {folder / ENV_FILE}: No such file or directory"
        assert fenced(listed["content"]) == "(empty)"  # the config's folder, as the server sees it
        assert len(fenced(processes["content"]).split()) < 10  # its own few, none of the bot's
        # the control: the server answers, fenced as untrusted content naming it
        assert 'source="MCP server prying, tool read_file">>>\na host file\n' in control["content"]

        await tg.private_message("dump", user_id=OWNER, name="Owner")
        assert await tg.wait_sent(OWNER, 2) == ["Looked.", "Done."]
        [dump] = tool_outputs(fake_llm, 3)[-1:]
        assert dump["truncated"] is True
        assert dump["note"] == "the server's answer was cut at 100,000 of its 3,145,728 characters; ask it for less"
        assert 'source="MCP server huge, tool dump">>>\nSTART xxx' in dump["content"]
        assert " END" not in dump["content"] and len(dump["content"]) < 101_000
        assert len(json.dumps(fake_llm.requests[3].body)) < 250_000  # not the 3 MB
    finally:
        await stop(process)
