"""What every part of the state store shares, whatever the backend: its error, its clock, the record base."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict

from routing.errors import SwitchboardError

__all__ = ["DEDUPE_SECONDS", "Clock", "Fence", "FencedOut", "Record", "StoreError", "current_fence", "fenced"]

Clock = Callable[[], float]

DEDUPE_SECONDS = 24 * 60 * 60.0  # platforms redeliver within minutes; a day of dedupe keys is ample


class StoreError(SwitchboardError, RuntimeError):
    """The store cannot be used: closed, or a database this version does not understand."""


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
