"""Transcripts: one append-only JSONL file per session; a torn last line after a crash is skipped, not fatal."""

from __future__ import annotations

import asyncio
import logging
import os
import re
from collections.abc import Sequence
from pathlib import Path

from pydantic import TypeAdapter, ValidationError

from agent.compaction import SUMMARY_HEADER, is_summary
from agent.messages import Message

log = logging.getLogger(__name__)
_MESSAGE = TypeAdapter(Message)
# A summary's header as its line holds it (the transcript's own JSON encoder): a line without it is no summary.
_SUMMARY_MARK = TypeAdapter(str).dump_json(SUMMARY_HEADER)[1:-1]
# What the store's session ids look like (secrets.token_urlsafe); nothing else becomes a file name.
_SESSION_ID = re.compile(r"[A-Za-z0-9_-]{16,128}")


def transcript_for(state_dir: Path, session_id: str) -> Path:
    """Where the transcript of a session id lives: `state_dir/transcripts/<session_id>.jsonl`.

    ValueError for anything that is not a session id (16 to 128 of A-Z a-z 0-9 _ -), so no path can escape.
    """
    if not _SESSION_ID.fullmatch(session_id):
        raise ValueError(f"not a session id: {session_id!r}")
    return state_dir / "transcripts" / f"{session_id}.jsonl"


async def read_transcript(path: Path) -> list[Message]:
    """Every message in the transcript, skipping (with a warning) lines that do not parse.

    Reads the whole file each time (nothing is cached); reading and parsing run off the event loop, in one hop.
    """
    return await asyncio.to_thread(load_transcript, path)


async def append_transcript(path: Path, messages: Sequence[Message]) -> None:
    """Append messages, one JSON object per line, in a single write; cost does not grow with the file."""
    if messages:
        data = b"".join(_MESSAGE.dump_json(message) + b"\n" for message in messages)
        await asyncio.to_thread(_append, path, data)


def load_transcript(path: Path) -> list[Message]:
    """read_transcript for callers already off the event loop."""
    data = _read(path)
    return _parse(path, data) if data else []


def load_history(path: Path) -> list[Message]:
    """What a run sends the model: the transcript from its latest compaction summary on (all of it if there is none),
    as `since_last_summary(load_transcript(path))` would give it, but parsing only those lines. A turn then costs
    what the model is sent, not what the file has gathered since the session began. Call it off the event loop."""
    data = _read(path)
    start = _latest_summary(data)
    first_line = data.count(b"\n", 0, start) + 1
    return _parse(path, data[start:], first_line) if data else []


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return b""


def _latest_summary(data: bytes) -> int:
    """Where the line of the latest summary starts (0 if there is none): lines are searched for the summary's header
    from the end, and only a line that holds it is parsed (a message may quote the header without being a summary).
    """
    end = len(data)
    while (found := data.rfind(_SUMMARY_MARK, 0, end)) >= 0:
        start = data.rfind(b"\n", 0, found) + 1
        stop = data.find(b"\n", found)
        if _is_summary_line(data[start : stop if stop >= 0 else len(data)]):
            return start
        end = start
    return 0


def _is_summary_line(line: bytes) -> bool:
    try:
        return is_summary(_MESSAGE.validate_json(line))
    except ValidationError:
        return False


def _append(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as handle:
        size = handle.seek(0, os.SEEK_END)
        if size:
            handle.seek(size - 1)
            if handle.read(1) != b"\n":
                data = b"\n" + data  # never glue a new message onto a torn line: both would be lost
        handle.write(data)  # append mode: lands at the end wherever the read left the position


def _parse(path: Path, data: bytes, first_line: int = 1) -> list[Message]:
    """The messages in `data`, whose first line is line `first_line` of the file (for the warnings)."""
    lines = data.split(b"\n")
    last = lines.pop()  # b"" when the file ends with a newline, as every whole write does
    messages: list[Message] = []
    for number, line in enumerate(lines, start=first_line):
        if not line.strip():
            continue
        try:
            messages.append(_MESSAGE.validate_json(line))
        except ValidationError:
            log.warning("%s:%d: skipped a line that is not a message", path, number)
    if last.strip():
        try:
            messages.append(_MESSAGE.validate_json(last))  # a write can stop just before its newline
        except ValidationError:
            number = first_line + len(lines)
            log.warning("%s:%d: skipped a torn last line (a write cut short by a crash?)", path, number)
    return messages
