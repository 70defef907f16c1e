"""What every part of the state store shares, whatever the backend: its error, its clock, the record base."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from types import TracebackType
from typing import Self

from pydantic import BaseModel, ConfigDict

from routing.errors import SwitchboardError

__all__ = [
    "DEDUPE_SECONDS", "Clock", "Fence", "FencedOut", "Record", "StoreContext", "StoreError", "current_fence", "cutoff",
    "fenced",
]  # fmt: skip

Clock = Callable[[], float]

DEDUPE_SECONDS = 24 * 60 * 60.0  # platforms redeliver within minutes; a day of dedupe keys is ample


class StoreError(SwitchboardError, RuntimeError):
    """The store cannot be used: closed, or a database this version does not understand."""


def cutoff(clock: Clock, older_than_seconds: float) -> float:
    """The time before which finished rows are old enough to prune (either backend's)."""
    if older_than_seconds < 0:
        raise ValueError(f"older_than_seconds cannot be negative: {older_than_seconds}")
    return clock() - older_than_seconds


class StoreContext:
    """A whole store (either backend's) as an `async with` block, which closes it at the end."""

    async def close(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        await self.close()


class Record(BaseModel):
    """A stored row as the store hands it out: frozen, and JSON-able, so that any backend can hold it."""

    model_config = ConfigDict(frozen=True)


class FencedOut(StoreError):
    """Another process took over the session this work was for (its fence moved on): nothing was written, and the
    new holder runs the work again."""


@dataclass(frozen=True)
class Fence:
    """The fencing token of one claim on a session (`lane`): `token` grows with each hand-over between processes;
    `holder` names the lock's owner where the backend can tell whether it still holds it (PostgreSQL: the backend
    pid of the process's lock connection), so that a process that lost its lock writes nothing even before another
    process has taken the session over."""

    lane: str
    token: int
    holder: int | None = None


_FENCE: ContextVar[Fence | None] = ContextVar("switchboard_fence", default=None)


def current_fence() -> Fence | None:
    """The claim the running code works under (`fenced`), None outside a cluster's session."""
    return _FENCE.get()


@contextlib.contextmanager
def fenced(fence: Fence) -> Iterator[None]:
    """Work under `fence` until the block ends (tasks started inside inherit it): a store shared by several processes
    refuses (FencedOut) the writes that finish a turn once the session's fence has moved past it."""
    reset = _FENCE.set(fence)
    try:
        yield
    finally:
        _FENCE.reset(reset)
