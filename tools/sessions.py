"""`sessions_list` and `sessions_history`: the sessions an agent may see, and what was said in one, read through a
session book the application hands them; another session's words come back wrapped as untrusted content."""

from __future__ import annotations

from typing import Any, Protocol

from tools.base import RunInfo

__all__ = ["SessionBook"]


class SessionBook(Protocol):
    """The sessions as the session tools see them; each call raises LookupError (no such session, or one this run
    may not see) or ValueError (a bad filter) with a message for the model."""

    async def list(
        self,
        run: RunInfo,
        *,
        kinds: list[str] | None = None,
        agent: str | None = None,
        active_minutes: float | None = None,
        limit: int = 20,
    ) -> list[dict[str, Any]]: ...
    async def history(self, run: RunInfo, session_key: str, *, limit: int = 20) -> dict[str, Any]: ...
