"""Media memory: the peak RSS of a real `bot run` while 20 files of 15 MiB each go in and out through Telegram.

Each file is a document sent to the bot in a DM (fetched with getFile and the file download, streamed into the
agent's inbox); for each, the scripted model calls the `message` tool to send back a 15 MiB file of its workspace
(a multipart sendDocument, streamed from disk). The fake Telegram server and the fake LLM run in this process; only
the bot's memory is measured: its RSS when idle after start-up, and its peak (VmHWM, reset through clear_refs
once idle, so start-up does not count) at the end. Streaming keeps
the peak within 40 MiB of idle; a path that read a file whole would add at least 15 MiB per file in flight.

Run with `.venv/bin/python bench/media.py [files] [MiB]`.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

# Run as a script, this file's folder comes first on sys.path and its name would shadow the package.
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from fakes.llm import Reply, ToolCallSpec  # noqa: E402

from bench.harness import FakeLLM, FakeTelegram, bot_process, rss_kib, telegram_config  # noqa: E402

FILES = 20
MIB = 15
TARGET_MIB = 40  # the peak may exceed idle by at most this much


async def wait(condition: object, what: str, timeout: float = 600) -> None:
    """Poll `condition()` until it holds (a benchmark may wait long; it fails loudly if it never does)."""
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up waiting for {what}")
        await asyncio.sleep(0.05)


async def measure(files: int = FILES, mib: int = MIB) -> tuple[int, int, float]:
    """(idle RSS, peak RSS) of the bot in KiB, and the seconds the files took."""
    size = mib * 1024 * 1024
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        outgoing = root / "ws" / "main" / "out"
        outgoing.mkdir(parents=True)
        for index in range(files):
            (outgoing / f"back-{index}.bin").write_bytes(bytes([index % 256]) * size)
        async with FakeTelegram() as telegram, FakeLLM() as llm:
            config = telegram_config(telegram, llm, root, limiter=False, concurrent=1)
            config["tools"] = {"allow": ["message"]}
            config["owners"] = [f"telegram:{telegram.user_id}"]  # the owner's run works in the agent's workspace
            config["channels"]["telegram"]["accounts"]["main"]["media"] = {"max_bytes": size + 1}
            for index in range(files):
                send = {"action": "send", "text": f"Back {index}.", "media": [f"out/back-{index}.bin"]}
                llm.script(Reply.tool_calls(ToolCallSpec("message", send, id=f"c{index}")), "NO_REPLY")
            async with bot_process(config, root) as bot:
                await wait(lambda: bool(telegram.calls("getUpdates")), "the bot to poll")
                await asyncio.sleep(2)  # let start-up settle before the idle figure
                idle = rss_kib(bot.pid, "VmRSS")
                Path(f"/proc/{bot.pid}/clear_refs").write_text("5")  # the peak counts from here, not from start-up
                started = time.perf_counter()
                for index in range(files):
                    data = bytes([(index + 128) % 256]) * size
                    await telegram.media_message("document", data, name=f"in-{index}.bin")
                    await wait(lambda n=index: len(telegram.uploads) > n, f"upload {index + 1}")
                elapsed = time.perf_counter() - started
                peak = rss_kib(bot.pid, "VmHWM")
            inbox = list((root / "ws" / "main" / "inbox").glob("*/*.bin"))
            assert len(inbox) == files and all(path.stat().st_size == size for path in inbox), "a file went missing"
            assert all(len(upload.data) == size for upload in telegram.uploads), "an upload was cut short"
    return idle, peak, elapsed


async def main(files: int = FILES, mib: int = MIB) -> int:
    idle, peak, elapsed = await measure(files, mib)
    grew = (peak - idle) / 1024
    print(f"{files} files of {mib} MiB in and {files} out in {elapsed:.1f} s ({2 * files * mib / elapsed:.0f} MiB/s)")
    print(f"bot RSS idle {idle / 1024:.1f} MiB, peak {peak / 1024:.1f} MiB: +{grew:.1f} MiB (target +{TARGET_MIB})")
    return 0 if grew <= TARGET_MIB else 1


if __name__ == "__main__":
    arguments = [int(value) for value in sys.argv[1:3]]
    sys.exit(asyncio.run(main(*arguments)))
