"""The console channel through the whole gateway: `bot run` reads lines from stdin and prints the answers."""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import sys
from pathlib import Path

from fakes.llm import FakeLLM
from helpers import eventually, unstamped

from channels.base import ChatTarget, InboundMessage, OutboundMessage
from channels.console import ConsoleAdapter
from routing import Peer


async def console_bot(tmp_path: Path, fake_llm: FakeLLM) -> asyncio.subprocess.Process:
    """`bot run` on a config with only the console channel, its stdin and stdout piped (no API keys inherited)."""
    config = tmp_path / "bindings.yaml"
    config.write_text(
        json.dumps(
            {
                "defaults": {"model": "fake/model-a", "workspace_root": str(tmp_path / "ws")},
                "providers": {"fake": {"kind": "anthropic", "base_url": fake_llm.url}},
                "channels": {"console": {"accounts": {"default": {}}}},
                "session": {"queue": {"mode": "followup"}},
            }
        )
    )
    env = {key: value for key, value in os.environ.items() if not key.endswith("_API_KEY")}
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "run", "--config", str(config),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip


async def test_bot_run_serves_the_console_until_its_input_ends(tmp_path: Path, fake_llm: FakeLLM) -> None:
    fake_llm.script("First answer.", "Second answer.")
    process = await console_bot(tmp_path, fake_llm)
    try:
        out, err = await asyncio.wait_for(process.communicate(b"hello\n\nhow are you?\n"), 60)
    finally:
        if process.returncode is None:  # only when something hung: the test does not leave it running
            process.kill()
            await process.wait()
    assert process.returncode == 0, err.decode()
    assert out.decode().splitlines() == ["First answer.", "Second answer."]
    assert [unstamped(request.body["messages"][-1]["content"][-1]["text"]) for request in fake_llm.requests] == [
        "hello",
        "how are you?",
    ]


async def test_bot_run_answers_help_and_new_on_the_console_itself_and_exit_stops(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    fake_llm.script("First answer.", "Second answer.", "Never asked.")
    process = await console_bot(tmp_path, fake_llm)
    assert process.stdin is not None and process.stdout is not None
    try:
        process.stdin.write(b"hello\n")
        assert await asyncio.wait_for(process.stdout.readline(), 60) == b"First answer.\n"
        out, err = await asyncio.wait_for(process.communicate(b"/help\n/new\nagain\n/exit\nnot read\n"), 60)
    finally:
        if process.returncode is None:  # only when something hung: the test does not leave it running
            process.kill()
            await process.wait()
    assert process.returncode == 0, err.decode()
    shown = out.decode()
    assert shown.endswith("Started a new conversation.\nSecond answer.\n")
    assert "Commands:" in shown and "/new or /reset" in shown  # /help: answered by the gateway's command table
    assert "Started a new conversation." in shown
    texts = [
        [unstamped(message["content"][-1]["text"]) for message in request.body["messages"] if message["role"] == "user"]
        for request in fake_llm.requests
    ]
    assert texts == [["hello"], ["again"]]  # neither /help nor /new reached the model; /exit ended the input


async def test_the_console_adapter_delivers_lines_and_prints_replies() -> None:
    received: list[InboundMessage] = []

    async def on_message(message: InboundMessage) -> None:
        received.append(message)

    async def on_action(_: object) -> None:
        raise AssertionError("the console has no buttons to click")

    out = io.StringIO()
    adapter = ConsoleAdapter(source=io.StringIO("one\n\n  \ntwo\n"), out=out, user="ada")
    await adapter.start(on_message, on_action)  # type: ignore[arg-type]
    await eventually(adapter.finished.is_set, "the end of the input")
    assert [(m.text, m.sender_id, m.peer) for m in received] == [
        ("one", "ada", Peer("direct", "ada")),
        ("two", "ada", Peer("direct", "ada")),
    ]
    assert len({m.message_id for m in received}) == 2
    target = ChatTarget(channel="console", peer=Peer("direct", "ada"))
    await adapter.send(target, OutboundMessage(text="Hi Ada."))
    assert out.getvalue() == "Hi Ada.\n"
    await adapter.stop()


async def test_bot_run_serving_the_console_stops_on_sigterm_while_nobody_types(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    process = await console_bot(tmp_path, fake_llm)
    assert process.stdin is not None and process.stderr is not None
    try:
        while b"console" not in await asyncio.wait_for(process.stderr.readline(), 60):
            pass  # its start-up lines: it serves the console and waits on a read that nobody answers
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), 60) == 0  # the input left open, unread, does not hold it
    finally:
        if process.returncode is None:  # only when something hung: the test does not leave it running
            process.kill()
            await process.wait()
