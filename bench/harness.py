"""What the end-to-end benchmarks share: a real `bot run` process on the fake Telegram and fake LLM, and its RSS."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from fakes.llm import FakeLLM
from fakes.telegram import FakeTelegram


def rss_kib(pid: int, field: str) -> int:
    """VmRSS (now) or VmHWM (peak) of a process, in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (/proc/<pid>/stat), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def telegram_config(
    telegram: FakeTelegram, llm: FakeLLM, folder: Path, *, limiter: bool, concurrent: int = 4
) -> dict[str, Any]:
    """One open Telegram account on the fakes, an instant model, no tools, and `followup` so every DM gets its own
    reply; an owner who sends nothing (an owner-less bot would also tell each sender how to become one); everything
    else is the default."""
    return {
        "owners": ["telegram:1"],
        "defaults": {"model": "fake/instant", "workspace_root": str(folder / "ws"), "max_concurrent": concurrent},
        "providers": {"fake": {"kind": "openai", "base_url": llm.openai_base_url}},
        "channels": {
            "telegram": {
                "accounts": {
                    "main": {
                        "token": telegram.token,
                        "api_base_url": telegram.url,
                        "dm_policy": "open",
                        "rate_limit": limiter,
                    }
                }
            }
        },
        "session": {"queue": {"mode": "followup"}},
        "tools": {"deny": ["*"]},
    }


@contextlib.asynccontextmanager
async def bot_process(config: dict[str, Any], folder: Path) -> AsyncIterator[asyncio.subprocess.Process]:
    """`bot run` on `config` (written to folder/bindings.yaml; state in folder/state), without API keys from the
    environment; stopped with SIGTERM at the end (killed if it takes over 30 seconds)."""
    (folder / "bindings.yaml").write_text(json.dumps(config))
    env = {key: value for key, value in os.environ.items() if not key.endswith("_API_KEY")}
    bot = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "run", "--config", str(folder / "bindings.yaml"),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL, env=env,
    )  # fmt: skip
    try:
        yield bot
    finally:
        bot.terminate()
        try:
            await asyncio.wait_for(bot.wait(), 30)
        finally:
            if bot.returncode is None:
                bot.kill()
                await bot.wait()
