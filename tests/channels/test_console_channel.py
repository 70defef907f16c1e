"""The console channel through the whole gateway: `bot run` reads lines from stdin and prints the answers."""

from __future__ import annotations

import asyncio
import io
import json
import os
import sys
from pathlib import Path

from fakes.llm import FakeLLM
from helpers import eventually, unstamped

from channels.base import ChatTarget, InboundMessage, OutboundMessage
from channels.console import ConsoleAdapter
from routing import Peer


async def test_bot_run_serves_the_console_until_its_input_ends(tmp_path: Path, fake_llm: FakeLLM) -> None:
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
    fake_llm.script("First answer.", "Second answer.")
    env = {key: value for key, value in os.environ.items() if not key.endswith("_API_KEY")}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "run", "--config", str(config),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip
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
