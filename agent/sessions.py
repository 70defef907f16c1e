"""Transcripts: one append-only JSONL file per session; a torn last line after a crash is skipped, not fatal."""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, BinaryIO, Literal, NamedTuple

from pydantic import BaseModel, Field, TypeAdapter, ValidationError

from agent.compaction import summary_message
from agent.messages import Message

log = logging.getLogger(__name__)


class Compaction(BaseModel):
    """A transcript record: compaction replaced everything before it with `summary`; the messages it kept follow.

    Only compaction writes it (append_compaction), and nothing a person types can become one: a message is always
    a record of another role, whatever its text says. Transcripts written before this record existed hold their
    summaries as ordinary user messages, which now read as ordinary messages (the next overflow compacts again).
    """

    role: Literal["compaction"] = "compaction"
    summary: str


Line = Annotated[Message | Compaction, Field(discriminator="role")]  # one line of a transcript
_LINE = TypeAdapter(Line)
# How a compaction record's line starts. The transcript's JSON encoder writes no line breaks and escapes every quote
# inside a string, so a line can start with these bytes only if it is a compaction record: nothing else is parsed.
_RECORD = b'{"role":"compaction"'
_BLOCK = 64 * 1024  # bytes read at a time, backwards from the end, looking for the latest compaction record
# What the store's session ids look like (secrets.token_urlsafe); nothing else becomes a file name.
_SESSION_ID = re.compile(r"[A-Za-z0-9_-]{16,128}")


@functools.lru_cache(maxsize=4096)  # a turn asks several times; building a Path costs more than the lookup
def transcript_for(state_dir: Path, session_id: str) -> Path:
    """Where the transcript of a session id lives: `state_dir/transcripts/<session_id>.jsonl`.

    ValueError for anything that is not a session id (16 to 128 of A-Z a-z 0-9 _ -), so no path can escape.
    """
    if not _SESSION_ID.fullmatch(session_id):
        raise ValueError(f"not a session id: {session_id!r}")
    return state_dir / "transcripts" / f"{session_id}.jsonl"


async def read_transcript(path: Path) -> list[Message]:
    """Every message in the transcript, each compaction record as its summary message (the transcript as the model
    was shown it over time), skipping (with a warning) lines that do not parse.

    Reads the whole file each time (nothing is cached); reading and parsing run off the event loop, in one hop.
    """
    return await asyncio.to_thread(load_transcript, path)


async def append_transcript(path: Path, messages: Sequence[Message]) -> Appended | None:
    """Append messages, one JSON object per line, in a single write; cost does not grow with the file. What was
    written (None for nothing), for a reader that keeps the history it parsed (agent.transcripts)."""
    return await _append_lines(path, messages)


async def append_compaction(path: Path, summary: str, kept: Sequence[Message]) -> None:
    """Append a compaction record holding `summary`, then the messages compaction kept, in a single write: from now
    on the session's history starts there."""
    await _append_lines(path, [Compaction(summary=summary), *kept])


def load_transcript(path: Path) -> list[Message]:
    """read_transcript for callers already off the event loop."""
    return as_messages(_parse(path, _read(path)))


def load_history(path: Path) -> list[Message]:
    """What a run sends the model: the summary of the transcript's latest compaction record, then the messages after
    it (the whole transcript if it has none). Only that tail is read, backwards from the end in blocks, and parsed:
    starting a run costs what the model is sent, not what the file has gathered since the session began. A record
    torn by a crash is skipped, and the history starts at the one before. Call it off the event loop."""
    tail, offset = _tail(path)
    return as_messages(_parse(path, tail, offset))


def encode_line(record: Message | Compaction) -> bytes:
    """One line of a transcript, without its newline: JSON with no line break in it, NUL and every other control
    character escaped (so it also fits a PostgreSQL TEXT column)."""
    return _LINE.dump_json(record)


def decode_line(line: bytes | str) -> Message | Compaction:
    """One line of a transcript as its record; ValidationError when it is not one."""
    return _LINE.validate_json(line)


class Appended(NamedTuple):
    """One write to a transcript: the file's size before and after it, and the records written, as parsing their
    lines gives them back."""

    before: int
    after: int
    records: list[Message | Compaction]


async def _append_lines(path: Path, lines: Sequence[Message | Compaction]) -> Appended | None:
    if not lines:
        return None
    encoded = [encode_line(line) for line in lines]
    # On the event loop: a write of a few lines to the page cache costs less than a trip to a thread and back (with
    # bench/pipeline.py's 1,000 sessions, the trip and the GIL handed back and forth cost more than the write).
    before, after = _append(path, b"".join(line + b"\n" for line in encoded))
    return Appended(before, after, [decode_line(line) for line in encoded])


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return b""


def _tail(path: Path) -> tuple[bytes, int]:
    """The transcript from the line of its latest whole compaction record on (all of it if it has none), and where
    that line starts in the file."""
    try:
        with path.open("rb") as handle:
            return _tail_of(handle)
    except FileNotFoundError:
        return b"", 0


def _tail_of(handle: BinaryIO) -> tuple[bytes, int]:
    """_tail on an open file: blocks are read from the end backwards until one holds the start of a record's line
    that parses, so the cost follows the length of the tail, not of the file."""
    position = handle.seek(0, os.SEEK_END)
    later: list[bytes] = []  # the blocks read so far, the one nearest the end first
    marker = b"\n" + _RECORD
    following = b""  # the bytes just after the block being searched, as many as a marker can run on into
    while position > 0:
        start = max(position - _BLOCK, 0)
        handle.seek(start)
        block = handle.read(position - start)
        head = b"" if start else b"\n"  # the file's start begins a line as a newline does
        window = head + block + following
        stop = len(window)
        while (found := window.rfind(marker, 0, stop)) >= 0:
            line_start = found + 1 - len(head)  # in `block`
            tail = block[line_start:] + b"".join(reversed(later))
            if _is_compaction(tail.partition(b"\n")[0]):
                return tail, start + line_start
            stop = found + len(marker) - 1  # look before this one: it was torn by a crash
        later.append(block)
        following = (block + following)[: len(marker) - 1]
        position = start
    return b"".join(reversed(later)), 0


def _is_compaction(line: bytes) -> bool:
    try:
        return isinstance(_LINE.validate_json(line), Compaction)
    except ValidationError:
        return False


def _append(path: Path, data: bytes) -> tuple[int, int]:
    """Write `data` at the end of the file; its size before and after."""
    try:
        return _append_to(path, data)
    except FileNotFoundError:  # the first transcript of all: its folder is made once, not checked at each write
        path.parent.mkdir(parents=True, exist_ok=True)
        return _append_to(path, data)


def _append_to(path: Path, data: bytes) -> tuple[int, int]:
    # System calls, not a Python file object: opening one costs two calls more (its size, whether it is a terminal),
    # and every call counts at each message.
    descriptor = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        size = os.lseek(descriptor, 0, os.SEEK_END)
        if size and os.pread(descriptor, 1, size - 1) != b"\n":
            data = b"\n" + data  # never glue a new line onto a torn one: both would be lost
        written = 0
        while written < len(data):  # append mode: each piece lands at the end
            written += os.write(descriptor, data[written:])
    finally:
        os.close(descriptor)
    return size, size + len(data)


def _parse(path: Path, data: bytes, offset: int = 0) -> list[Message | Compaction]:
    """The records in `data`, which starts `offset` bytes into the file. A warning names a line it skips by its line
    number when `data` starts the file, by its byte offset otherwise (a tail read does not count the lines before).
    """
    lines = data.split(b"\n")  # the last is b"" when the file ends with a newline, as every whole write does
    records: list[Message | Compaction] = []
    at = offset
    for number, line in enumerate(lines, start=1):
        if line.strip():
            try:
                records.append(_LINE.validate_json(line))  # the last line too: a write can stop just before its newline
            except ValidationError:
                where = f"{path}:{number}" if offset == 0 else f"{path} at byte {at}"
                torn = number == len(lines)
                what = "a torn last line (a write cut short by a crash?)" if torn else "a line that is not a record"
                log.warning("%s: skipped %s", where, what)
        at += len(line) + 1
    return records


def as_messages(records: Sequence[Message | Compaction]) -> list[Message]:
    """The records as the model is shown them: a compaction record becomes its summary message."""
    return [summary_message(record.summary) if isinstance(record, Compaction) else record for record in records]
