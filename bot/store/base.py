"""What every part of the state store shares, whatever the backend: its error, its clock, the record base."""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel, ConfigDict

from routing.errors import SwitchboardError

__all__ = ["DEDUPE_SECONDS", "Clock", "Record", "StoreError"]

Clock = Callable[[], float]

DEDUPE_SECONDS = 24 * 60 * 60.0  # platforms redeliver within minutes; a day of dedupe keys is ample


class StoreError(SwitchboardError, RuntimeError):
    """The store cannot be used: closed, or a database this version does not understand."""


class Record(BaseModel):
    """A stored row as the store hands it out: frozen, and JSON-able, so that any backend can hold it."""

    model_config = ConfigDict(frozen=True)
