"""The transcript role (`Transcripts`) and its file implementation, one JSONL file per session (agent.sessions)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from agent.messages import Message
from agent.sessions import append_compaction, append_transcript, load_history, read_transcript, transcript_for

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


class FileTranscripts:
    """Transcripts as files: `state_dir/transcripts/<session_id>.jsonl` (agent.sessions), a torn line skipped."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir

    def path(self, session_id: str) -> Path:
        """The session's file (ValueError for anything that is not a session id)."""
        return transcript_for(self.state_dir, session_id)

    async def append(self, session_id: str, messages: Sequence[Message]) -> None:
        await append_transcript(self.path(session_id), messages)

    async def append_compaction(self, session_id: str, summary: str, kept: Sequence[Message]) -> None:
        await append_compaction(self.path(session_id), summary, kept)

    async def history(self, session_id: str) -> list[Message]:
        return await asyncio.to_thread(load_history, self.path(session_id))

    async def read(self, session_id: str) -> list[Message]:
        return await read_transcript(self.path(session_id))
