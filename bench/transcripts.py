"""Transcript costs: appending one message to a transcript of 10 and of 10,000 lines (it should stay flat),
and, for contrast, reading the whole transcript back (it grows with the file, and happens once per turn).

Run with `.venv/bin/python bench/transcripts.py`. Each append is timed alone and the file is cut back to its
starting size afterwards, outside the timing, so every append sees the same transcript length.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

# Run as a script, this file's folder comes first on sys.path and its name would shadow the package.
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != Path(__file__).resolve().parent]

from agent.messages import AssistantMessage, Message, ToolCall, UserMessage  # noqa: E402
from agent.sessions import append_transcript, read_transcript, transcript_for  # noqa: E402
from bot.store import new_session_id  # noqa: E402

SIZES = (10, 10_000)
APPENDS = 2_000
READS = 20


def line(index: int) -> Message:
    if index % 2:
        call = ToolCall(id=f"c{index}", name="read", arguments={"path": f"notes/{index}.md"})
        return AssistantMessage(text=f"Reading note {index} for you.", tool_calls=[call])
    return UserMessage.of(f"message {index}: what does the note about the meeting on day {index} say?")


async def transcript_of(state_dir: Path, lines: int) -> Path:
    path = transcript_for(state_dir, new_session_id())
    await append_transcript(path, [line(index) for index in range(lines)])
    return path


async def append_microseconds(path: Path) -> list[float]:
    size = path.stat().st_size
    message = [line(1)]
    samples = []
    for _ in range(APPENDS):
        start = time.perf_counter_ns()
        await append_transcript(path, message)
        samples.append((time.perf_counter_ns() - start) / 1000)
        os.truncate(path, size)
    return samples


async def read_milliseconds(path: Path, lines: int) -> list[float]:
    samples = []
    for _ in range(READS):
        start = time.perf_counter_ns()
        assert len(await read_transcript(path)) == lines
        samples.append((time.perf_counter_ns() - start) / 1e6)
    return samples


async def main() -> None:
    print(f"append: one message, median of {APPENDS} appends; read: the whole transcript, median of {READS}")
    with tempfile.TemporaryDirectory() as folder:
        for lines in SIZES:
            path = await transcript_of(Path(folder), lines)
            appends = await append_microseconds(path)
            reads = await read_milliseconds(path, lines)
            p90 = statistics.quantiles(appends, n=10)[-1]
            print(
                f"{lines:>6} lines ({path.stat().st_size / 1024:>7.1f} KiB): "
                f"append {statistics.median(appends):6.1f} µs (p90 {p90:6.1f} µs)   "
                f"read {statistics.median(reads):7.2f} ms"
            )


if __name__ == "__main__":
    asyncio.run(main())
