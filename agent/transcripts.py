"""The transcript role (`Transcripts`) and its file implementation, one JSONL file per session (agent.sessions)."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from agent.messages import Message
from agent.sessions import (
    append_compaction,
    append_transcript,
    as_messages,
    load_history,
    read_transcript,
    transcript_for,
)

__all__ = ["FileTranscripts", "Transcripts"]


class Transcripts(Protocol):
    """Where each session's transcript is kept: appended to by every turn, read back as a run's history."""

    async def append(self, session_id: str, messages: Sequence[Message]) -> None:
        """Append `messages` to the session's transcript, all or none."""
        ...

    async def append_compaction(self, session_id: str, summary: str, kept: Sequence[Message]) -> None:
        """Append a compaction record holding `summary`, then the messages compaction `kept`, all or none: from now
        on the session's history starts there."""
        ...

    async def history(self, session_id: str) -> list[Message]:
        """What a run sends the model: the summary of the latest compaction record, then the messages after it (the
        whole transcript if it has none); lines that do not parse are skipped with a warning."""
        ...

    async def read(self, session_id: str) -> list[Message]:
        """Every message of the transcript, each compaction record as its summary message; lines that do not parse
        are skipped with a warning."""
        ...


HISTORY_MESSAGES_KEPT = 10_000  # messages of parsed histories FileTranscripts keeps, the most recently used first


class FileTranscripts:
    """Transcripts as files: `state_dir/transcripts/<session_id>.jsonl` (agent.sessions), a torn line skipped.

    The histories of the most recently used sessions (HISTORY_MESSAGES_KEPT messages in all) are kept parsed, each
    with the file size it stands for, and
    extended by what this object appends: a run reads its history without parsing the file again. A file of another
    size than the one kept (written by someone else, or compacted) is read anew."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self._histories: OrderedDict[str, tuple[int, list[Message]]] = OrderedDict()  # id -> (size, history)
        self._kept = 0  # messages in self._histories

    def path(self, session_id: str) -> Path:
        """The session's file (ValueError for anything that is not a session id)."""
        return transcript_for(self.state_dir, session_id)

    async def append(self, session_id: str, messages: Sequence[Message]) -> None:
        appended = await append_transcript(self.path(session_id), messages)
        kept = self._histories.get(session_id)
        if appended is None or kept is None:
            return
        if kept[0] == appended.before:  # what is kept is the file up to this write: it goes on with what was written
            self._keep(session_id, appended.after, kept[1] + as_messages(appended.records))
        else:
            self._forget(session_id)

    async def append_compaction(self, session_id: str, summary: str, kept: Sequence[Message]) -> None:
        self._forget(session_id)  # the history starts at the new record: read it anew
        await append_compaction(self.path(session_id), summary, kept)

    async def history(self, session_id: str) -> list[Message]:
        path = self.path(session_id)
        kept, size = self._histories.get(session_id), _size(path)
        if kept is not None and kept[0] == size:
            self._histories.move_to_end(session_id)
            return list(kept[1])
        # A new session has no file yet: nothing to read, so no trip off the event loop.
        size, history = (0, []) if size == 0 else await asyncio.to_thread(_sized_history, path)
        self._keep(session_id, size, history)
        return list(history)

    async def read(self, session_id: str) -> list[Message]:
        return await read_transcript(self.path(session_id))

    def _keep(self, session_id: str, size: int, history: list[Message]) -> None:
        self._forget(session_id)
        self._histories[session_id] = (size, history)
        self._kept += len(history)
        while self._kept > HISTORY_MESSAGES_KEPT and len(self._histories) > 1:
            self._forget(next(iter(self._histories)))  # the least recently used

    def _forget(self, session_id: str) -> None:
        kept = self._histories.pop(session_id, None)
        if kept is not None:
            self._kept -= len(kept[1])


def _size(path: Path) -> int:
    """The file's size (0 when there is none yet: the same empty history)."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _sized_history(path: Path) -> tuple[int, list[Message]]:
    """The history and the file size it was read at (taken first: a write meanwhile only makes it read anew)."""
    size = _size(path)
    return size, load_history(path)
