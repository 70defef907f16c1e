"""Nothing lost, nothing twice: a real `bot run` process is SIGKILLed mid-run, started again, and every
message still gets exactly one reply."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections import Counter
from pathlib import Path

from fakes.bridge import FakeBridge
from fakes.llm import FakeLLM, Reply
from helpers import eventually


def write_config(path: Path, llm: FakeLLM, bridge: FakeBridge) -> Path:
    config = {
        "defaults": {"model": "fake/model-a", "workspace_root": str(path / "ws")},
        "providers": {"fake": {"kind": "openai", "base_url": llm.openai_base_url, "timeout_seconds": 60}},
        "channels": {"loopback": {"accounts": {"default": {"url": bridge.url, "poll_timeout": 1}}}},
        "session": {"queue": {"debounce_ms": 0}},
    }
    file = path / "bindings.yaml"
    file.write_text(json.dumps(config))
    return file


async def start_bot(config: Path) -> asyncio.subprocess.Process:
    env = {key: value for key, value in os.environ.items() if not key.endswith("_API_KEY")}
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "run", "--config", str(config),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip


def replies_per_chat(bridge: FakeBridge) -> Counter[str]:
    return Counter(body["target"]["peer"]["id"] for body in bridge.sent)


async def test_a_sigkill_mid_run_loses_nothing_and_answers_once(tmp_path: Path, fake_llm: FakeLLM) -> None:
    async with FakeBridge() as bridge:
        config = write_config(tmp_path, fake_llm, bridge)
        fake_llm.script(Reply.stall(120))  # the first answer never comes: the process dies waiting for it
        bot = await start_bot(config)
        try:
            await bridge.say("question from alice", sender="alice")
            await eventually(lambda: len(fake_llm.requests) == 1, "alice's turn to reach the model")  # mid-run
            bot.send_signal(signal.SIGKILL)
            await bot.wait()
        finally:
            if bot.returncode is None:
                bot.kill()
        assert bridge.sent == []

        await bridge.say("question from bob, sent while the bot was down", sender="bob")
        fake_llm.script("An answer.", "Another answer.")
        bot = await start_bot(config)
        try:
            await eventually(lambda: sum(replies_per_chat(bridge).values()) >= 2, "both replies")
            await asyncio.sleep(2.5)  # time for a duplicate to show up, if there were going to be one
            assert replies_per_chat(bridge) == {"alice": 1, "bob": 1}
            assert len(fake_llm.requests) == 3  # alice's turn once before the kill and once after; bob's once
            bot.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(bot.wait(), 30) == 0
        finally:
            if bot.returncode is None:
                bot.kill()
                await bot.wait()
