"""Transcripts: one append-only JSONL file per session; a torn last line after a crash is skipped, not fatal."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import quote

import aiofiles
from pydantic import TypeAdapter, ValidationError

from agent.messages import Message

log = logging.getLogger(__name__)
_MESSAGE = TypeAdapter(Message)


def transcript_path(state_dir: Path, session_key: str) -> Path:
    """Where a session's transcript lives; the key is percent-encoded, so no key can leave the folder."""
    return state_dir / "transcripts" / f"{quote(session_key, safe='')}.jsonl"


async def read_transcript(path: Path) -> list[Message]:
    """Every message in the transcript, skipping (with a warning) lines that do not parse."""
    if not path.exists():
        return []
    messages: list[Message] = []
    async with aiofiles.open(path, encoding="utf-8", errors="replace") as handle:
        number = 0
        async for line in handle:
            number += 1
            if not line.strip():
                continue
            try:
                messages.append(_MESSAGE.validate_json(line))
            except ValidationError:
                log.warning("%s:%d: skipped a line that is not a whole message (torn write?)", path, number)
    return messages


async def append_transcript(path: Path, messages: Sequence[Message]) -> None:
    """Append messages, one JSON object per line, in a single write."""
    if not messages:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(_MESSAGE.dump_json(message).decode() + "\n" for message in messages)
    if await _ends_torn(path):
        text = "\n" + text  # never glue a new message onto a torn line: both would be lost
    async with aiofiles.open(path, "a", encoding="utf-8") as handle:
        await handle.write(text)


async def _ends_torn(path: Path) -> bool:
    if not path.exists() or path.stat().st_size == 0:
        return False
    async with aiofiles.open(path, "rb") as handle:
        await handle.seek(-1, 2)
        return await handle.read(1) != b"\n"
