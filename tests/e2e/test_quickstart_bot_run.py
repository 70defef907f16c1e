"""The quick start (docs/quickstart.md) as a new user runs it, in the checkout, against the fake Telegram and a fake
model: `bot init --telegram` with the token written to .env, then exactly the next commands it prints (`bot config
check`, `bot doctor`, `make run CONFIG=…`), /whoami, `bot owners add`, "list my files" and a command tapped Allow."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shlex
import signal
import stat
import subprocess
from pathlib import Path
from typing import Any

from dotenv import dotenv_values
from fakes.llm import FakeLLM, Reply, ToolCallSpec
from fakes.telegram import FakeTelegram
from helpers import WAIT, environment, eventually, tool_result

ROOT = Path(__file__).resolve().parents[2]
OWNER = 4242
STARTED = "channel telegram account default started"


async def run(command: list[str], *, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """One of the quick start's commands, in the checkout, without any token or key in the environment (the fakes
    answer it from this test's loop, so it runs beside it)."""
    process = await asyncio.create_subprocess_exec(
        *command, cwd=ROOT, env=environment(),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        out, err = await asyncio.wait_for(process.communicate(stdin.encode()), WAIT * 2)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode is not None
    return subprocess.CompletedProcess(command, process.returncode, out.decode(), err.decode())


def allow_once(call: dict[str, Any]) -> str:
    markup = call["reply_markup"]
    markup = json.loads(markup) if isinstance(markup, str) else markup
    [data] = [
        button["callback_data"] for row in markup["inline_keyboard"] for button in row if "Allow once" in button["text"]
    ]
    return str(data)


def running_in(group: int) -> list[int]:
    """The live processes (zombies left out) of a process group, from /proc."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            stat = Path(f"/proc/{entry}/stat").read_text()
            state, _, pgrp = stat[stat.rindex(")") + 2 :].split()[:3]  # after "pid (comm) ": state, ppid, pgrp
            if int(pgrp) == group and state not in ("Z", "X"):
                found.append(int(entry))
    return found


async def test_the_quick_start_works_as_written_against_the_fake_telegram(
    tmp_path: Path, fake_telegram: FakeTelegram, fake_llm: FakeLLM
) -> None:
    tg = fake_telegram
    config = tmp_path / "bindings.yaml"
    # 2. Write the config, in the checkout: the token pasted (here on stdin), checked with Telegram, written to .env.
    # The fakes stand in for Telegram (--api-base-url) and the model (an OpenAI-compatible endpoint on this machine).
    init = await run(
        [
            ".venv/bin/bot", "init", "--config", str(config), "--telegram", "--check-token", "--write-env",
            "--api-base-url", tg.url, "--provider", "openai-compatible", "--base-url", fake_llm.openai_base_url,
            "--model", "m",
        ],
        stdin=f"{tg.token}\n\n",  # the token, then Enter: the local model needs no key
    )  # fmt: skip
    assert init.returncode == 0, init.stderr
    assert f"Telegram accepted the token: @{tg.username}" in init.stderr
    assert tg.token not in init.stdout + init.stderr + config.read_text()
    assert dotenv_values(tmp_path / ".env") == {"TELEGRAM_BOT_TOKEN": tg.token}
    assert stat.S_IMODE((tmp_path / ".env").stat().st_mode) == 0o600
    lines = init.stdout.splitlines()
    assert "Still to set" not in init.stdout
    steps = [shlex.split(line) for line in lines[lines.index("Next:") + 1 :]]
    quoted = shlex.quote(str(config))
    assert lines[lines.index("Next:") :] == [
        "Next:",
        f"  .venv/bin/bot config check --config {quoted}",
        f"  .venv/bin/bot doctor --config {quoted}",
        f"  make run CONFIG={quoted}",
    ]

    # 3. The next commands, exactly as printed: the token is read from .env by each.
    check = await run(steps[0])
    assert (check.returncode, check.stdout, check.stderr) == (0, f"{config}: valid (1 agents, 0 bindings)\n", "")
    doctor = await run(steps[1])
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert re.search(rf"^ok +telegram/default +@{tg.username} ", doctor.stdout, re.MULTILINE), doctor.stdout
    assert "FAIL" not in doctor.stdout.replace("0 FAIL", "")
    assert tg.token not in doctor.stdout + doctor.stderr

    # 4. make run (the checkout is installed already: never reinstalled by a test)
    make = [*steps[2][:1], "--no-print-directory", "-o", ".venv/.installed", *steps[2][1:]]
    log_path = tmp_path / "run.log"
    with log_path.open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            *make, cwd=ROOT, env=environment(), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
            start_new_session=True,  # make, and the bot it starts: one process group, ended together
        )  # fmt: skip

    def log_text() -> str:
        return log_path.read_text(errors="replace")

    try:
        await eventually(lambda: STARTED in log_text() or process.returncode is not None, STARTED)
        assert STARTED in log_text(), log_text()
        await tg.wait_calls("getUpdates", 1)
        # Said once the gateway is up, which may be a moment after the first poll: the channel starts first.
        await eventually(lambda: "No owner yet" in log_text() or process.returncode is not None, "the no-owner hint")
        assert "No owner yet" in log_text() and "/whoami" in log_text() and "bot owners add" in log_text()

        # 5. /whoami in a DM, then bot owners add with the id it gave
        await tg.private_message("/whoami", user_id=OWNER, name="Ann")
        [answer] = await tg.wait_sent(OWNER, 1)
        assert answer.startswith(f"Your id: telegram:{OWNER}"), answer
        added = await run([".venv/bin/bot", "owners", "add", f"telegram:{OWNER}", "--config", str(config)])
        assert added.returncode == 0, added.stderr
        assert added.stdout.startswith(f"Added telegram:{OWNER} to owners")
        await eventually(lambda: "reloaded: it applies from the next message" in log_text(), "the reload")

        # 6. "List my files": the agent asks to run ls, which waits for the owner's tap on Allow once.
        fake_llm.script(Reply.tool_calls(ToolCallSpec("exec", {"command": "ls"})), "Your workspace is empty.")
        await tg.private_message("list my files", user_id=OWNER, name="Ann")
        await tg.wait_for(lambda: any("reply_markup" in call for call in tg.calls("sendMessage")), "the approval card")
        [card] = [call for call in tg.calls("sendMessage") if "reply_markup" in call]
        assert card["chat_id"] == OWNER and "<pre>ls</pre>" in card["text"], card
        [card_id] = [mid for (chat, mid), stored in tg.messages.items() if chat == OWNER and stored.reply_markup]
        assert len(fake_llm.requests) == 1  # nothing runs before the tap
        await tg.callback_query(allow_once(card), message_id=card_id, chat_id=OWNER, user_id=OWNER, name="Ann")
        await tg.wait_texts(OWNER, lambda texts: texts[-1:] == ["Your workspace is empty."])
        listed = tool_result(fake_llm, 1)
        assert listed.get("exit_code") == 0, listed
        assert len(fake_llm.requests) == 2
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGINT)  # Ctrl-C at the terminal: make and the bot it started stop
        await asyncio.wait_for(process.wait(), WAIT)
        await eventually(lambda: not running_in(process.pid), "every process of make run to end")
    assert "Stopping: letting running answers finish" in log_text() and "Traceback" not in log_text(), log_text()
