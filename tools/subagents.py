"""`sessions_spawn`, `sessions_send` and `subagents`: work handed to a child session that runs in the background and
announces its result, messages between sessions, and this session's children managed."""

from __future__ import annotations

from typing import Any, Protocol

from tools.base import RunInfo

__all__ = ["Spawner"]


class Spawner(Protocol):
    """Children and messages between sessions, as the tools ask for them; each call raises LookupError (no such child
    or session) or ValueError (refused: a cap, a policy) with a message for the model."""

    async def spawn(
        self,
        run: RunInfo,
        task: str,
        *,
        agent: str | None = None,
        label: str | None = None,
        model: str | None = None,
        timeout_seconds: float | None = None,
    ) -> dict[str, Any]: ...
    async def send(self, run: RunInfo, session_key: str, message: str, *, wait_seconds: float) -> dict[str, Any]: ...
    async def children(self, run: RunInfo) -> list[dict[str, Any]]: ...
    async def kill(self, run: RunInfo, child: str) -> dict[str, Any]: ...
    async def steer(self, run: RunInfo, child: str, message: str) -> dict[str, Any]: ...
