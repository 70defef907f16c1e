"""Secrets kept out of the logs: one filter on the log handler rewrites every record, whichever logger wrote it."""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Iterable, Mapping
from typing import TextIO

from agent.log_context import ContextFilter
from bot.observe.log_format import LogFormat, formatter

__all__ = ["REDACTED", "Redactor", "configure_logging", "secret_values"]

REDACTED = "<redacted>"
MIN_SECRET_LENGTH = 6  # shorter values would blot out ordinary words; no real credential is this short
# Environment variables whose values are taken as secrets before the config is even read.
_SECRET_NAME = re.compile(r"(TOKEN|KEY|KEYS|SECRET|PASSWORD|PASSWD)$", re.IGNORECASE)
_FORMATTER = logging.Formatter()


class Redactor(logging.Filter):
    """Replaces every known secret in a record's message, arguments, exception and stack text with REDACTED."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self._secrets: set[str] = set()
        self._pattern: re.Pattern[str] | None = None
        self.add(secrets)

    def add(self, secrets: Iterable[str]) -> None:
        """Learn more secrets (a comma-separated list counts as its parts too)."""
        for secret in secrets:
            for part in {secret, *secret.split(",")}:
                if len(part.strip()) >= MIN_SECRET_LENGTH:
                    self._secrets.add(part.strip())
        if self._secrets:  # longest first, so a secret that contains another is replaced whole
            ordered = sorted(self._secrets, key=len, reverse=True)
            self._pattern = re.compile("|".join(map(re.escape, ordered)), re.IGNORECASE)  # a lowercased copy too

    def redact(self, text: str) -> str:
        return text if self._pattern is None else self._pattern.sub(REDACTED, text)

    def filter(self, record: logging.LogRecord) -> bool:
        if self._pattern is None:
            return True
        message = record.getMessage()
        redacted = self.redact(message)
        if redacted != message:
            record.msg, record.args = redacted, None
        if record.exc_info and not record.exc_text:
            record.exc_text = _FORMATTER.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.redact(record.exc_text)
        if record.stack_info:
            record.stack_info = self.redact(record.stack_info)
        return True


def secret_values(environ: Mapping[str, str]) -> list[str]:
    """The values of environment variables named like credentials (`*_TOKEN`, `*_API_KEY`, `*_SECRET` …)."""
    return [value for name, value in environ.items() if _SECRET_NAME.search(name) and value]


def configure_logging(
    level: int,
    stream: TextIO | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    log_format: LogFormat = "text",
) -> Redactor:
    """The process's one log handler (on the root logger), redacting from its first line; the secrets the config
    names are added to the returned Redactor once it is loaded. Each line carries the turn's context
    (agent.log_context), as text or as one JSON object (bot.observe.log_format)."""
    redactor = Redactor(secret_values(os.environ if environ is None else environ))
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(formatter(log_format))
    handler.addFilter(ContextFilter())
    handler.addFilter(redactor)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    return redactor
