"""What a log line is about: the run, session, channel and account of the turn that wrote it, kept in a context
variable and copied onto every record by ContextFilter (the agent layer sets the run; `bot` sets the rest)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from types import MappingProxyType

__all__ = ["FIELDS", "ContextFilter", "current", "log_context"]

# The fields, in the order they are shown; each is a LogRecord attribute (None when not set).
FIELDS = ("run_id", "session_key", "channel", "account")

_EMPTY: Mapping[str, str] = MappingProxyType({})
_context: ContextVar[Mapping[str, str]] = ContextVar("switchboard_log_context", default=_EMPTY)


def current() -> Mapping[str, str]:
    """The fields set here (a task inherits those of the code that created it)."""
    return _context.get()


@contextlib.contextmanager
def log_context(**fields: str | None) -> Iterator[None]:
    """Within the block, the lines this task (and the tasks it creates) writes carry `fields` besides the ones
    already set; a field given as None is cleared. Unknown names are a bug: ValueError."""
    unknown = set(fields) - set(FIELDS)
    if unknown:
        raise ValueError(f"unknown log context fields: {', '.join(sorted(unknown))}")
    merged = {**_context.get(), **fields}
    token = _context.set(MappingProxyType({key: value for key, value in merged.items() if value is not None}))
    try:
        yield
    finally:
        _context.reset(token)


class ContextFilter(logging.Filter):
    """Copies the context fields onto each record (`record.run_id` …, None when unset); a field the record already
    has (given with `extra=`) is kept."""

    def filter(self, record: logging.LogRecord) -> bool:
        fields = _context.get()
        for name in FIELDS:
            if getattr(record, name, None) is None:
                setattr(record, name, fields.get(name))
        return True
