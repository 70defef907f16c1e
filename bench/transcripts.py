"""Transcript costs at 10, 1,000 and 10,000 lines: appending one message (it should stay flat), starting a run (it
should stay flat too) and, for contrast, reading the whole transcript back (it grows with the file).

Starting a run reads the history the model is sent, agent.sessions.load_history (what bot/runs/conversation.py calls):
the transcript from its latest compaction record on. The long transcripts are long sessions as compaction keeps them
bounded: a compaction record every EVERY lines (compaction runs whenever the history outgrows the model), the latest
TAIL lines before the end, so a run there starts from a summary and the same TAIL lines the 10-line transcript holds
in all. The done-when of issue 14: a run start at 10,000 lines costs at most twice what it costs at 10.

Run with `.venv/bin/python bench/transcripts.py`. Each append is timed alone and the file is cut back to its
starting size afterwards, outside the timing, so every append sees the same transcript length.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

# Run as a script, this file's folder comes first on sys.path and its name would shadow the package.
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != Path(__file__).resolve().parent]

from agent.messages import AssistantMessage, Message, ToolCall, UserMessage  # noqa: E402
from agent.sessions import (  # noqa: E402
    append_compaction,
    append_transcript,
    load_history,
    read_transcript,
    transcript_for,
)
from bot.store import new_session_id  # noqa: E402

SIZES = (10, 1_000, 10_000)
TAIL = 10  # lines after the latest compaction record: the whole of the shortest transcript
EVERY = 250  # lines from one compaction record to the next
APPENDS = 2_000
STARTS = 500
READS = 20
# A summary of a realistic size (about 2 KB: a few hundred words of notes).
SUMMARY = " ".join(f"The user asked about the meeting notes of day {day}; they were read." for day in range(30))


def line(index: int) -> Message:
    if index % 2:
        call = ToolCall(id=f"c{index}", name="read", arguments={"path": f"notes/{index}.md"})
        return AssistantMessage(text=f"Reading note {index} for you.", tool_calls=[call])
    return UserMessage.of(f"message {index}: what does the note about the meeting on day {index} say?")


def compactions(lines: int) -> list[int]:
    """The line numbers (from 0) of the compaction records: the latest TAIL lines before the end, then every
    EVERY lines before it; none in a transcript of TAIL lines or fewer."""
    return sorted(range(lines - TAIL - 1, -1, -EVERY))


async def transcript_of(state_dir: Path, lines: int) -> Path:
    path = transcript_for(state_dir, new_session_id())
    records = compactions(lines)
    await append_transcript(path, [line(index) for index in range(records[0] if records else lines)])
    for at, following in itertools.pairwise([*records, lines]):
        await append_compaction(path, SUMMARY, [line(index) for index in range(at + 1, following)])
    return path


async def timed(times: int, work: Callable[[], object], reset: Callable[[], object] = lambda: None) -> list[float]:
    """Microseconds each of `times` runs of `work` took (awaited when it returns an awaitable); `reset` runs after
    each, outside the timing."""
    samples = []
    for _ in range(times):
        start = time.perf_counter_ns()
        done = work()
        if inspect.isawaitable(done):
            await done
        samples.append((time.perf_counter_ns() - start) / 1000)
        reset()
    return samples


async def measure(path: Path, lines: int) -> tuple[list[float], list[float], list[float]]:
    """Microseconds of each append, run start and whole read, after checking that the reads give what they should:
    the summary and the tail, and every line (each compaction record read as its summary message)."""
    assert len(load_history(path)) == (TAIL + 1 if compactions(lines) else lines)
    assert len(await read_transcript(path)) == lines
    size = path.stat().st_size
    appends = await timed(APPENDS, lambda: append_transcript(path, [line(1)]), lambda: os.truncate(path, size))
    starts = await timed(STARTS, lambda: load_history(path))
    reads = await timed(READS, lambda: read_transcript(path))
    return appends, starts, reads


async def main() -> None:
    print(
        f"append: one message, median of {APPENDS}; run start: load_history, median of {STARTS}; "
        f"read all: the whole transcript, median of {READS}"
    )
    starts: dict[int, float] = {}
    with tempfile.TemporaryDirectory() as folder:
        for lines in SIZES:
            path = await transcript_of(Path(folder), lines)
            appends, runs, reads = await measure(path, lines)
            starts[lines] = statistics.median(runs)
            p90 = statistics.quantiles(appends, n=10)[-1]
            print(
                f"{lines:>6} lines ({path.stat().st_size / 1024:>7.1f} KiB, {len(compactions(lines)):>2} compactions): "
                f"append {statistics.median(appends):6.1f} µs (p90 {p90:6.1f} µs)   "
                f"run start {starts[lines]:6.1f} µs   read all {statistics.median(reads) / 1000:7.2f} ms"
            )
    print(f"run start at {SIZES[-1]:,} lines / at {SIZES[0]:,} lines: {starts[SIZES[-1]] / starts[SIZES[0]]:.2f}x")


if __name__ == "__main__":
    asyncio.run(main())
