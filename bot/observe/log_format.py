"""How log lines look: text with the turn's context appended compactly, or one JSON object per line; and the
`--log-format` and `--log-level` options that choose them."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Literal

import click

from agent.log_context import FIELDS

__all__ = ["LEVELS", "JsonFormatter", "LogFormat", "TextFormatter", "formatter", "log_options"]

LogFormat = Literal["text", "json"]
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def _context(record: logging.LogRecord) -> dict[str, str]:
    return {name: value for name in FIELDS if (value := getattr(record, name, None)) is not None}


class TextFormatter(logging.Formatter):
    """`2026-11-27 10:40:00,123 INFO bot.turns.turn: message [run=run_ab12 session=agent:main:main telegram/main]`."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:
        line = super().formatMessage(record)
        fields = _context(record)
        if not fields:
            return line
        shown = []
        if "run_id" in fields:
            shown.append(f"run={fields['run_id']}")
        if "session_key" in fields:
            shown.append(f"session={fields['session_key']}")
        if "channel" in fields:
            shown.append(f"{fields['channel']}/{fields.get('account', '')}".rstrip("/"))
        return f"{line} [{' '.join(shown)}]"


class JsonFormatter(logging.Formatter):
    """One object per line: time (UTC, ISO 8601), level, logger, message, the context fields that are set, and
    `exception` / `stack` when the record has them."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **_context(record),
        }
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def formatter(log_format: LogFormat) -> logging.Formatter:
    """The formatter for `--log-format`."""
    return JsonFormatter() if log_format == "json" else TextFormatter()


def log_options(default_level: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """`--log-format text|json` and `--log-level` (passed as `log_format` and `log_level`, upper case)."""

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        command = click.option(
            "--log-level",
            type=click.Choice(LEVELS, case_sensitive=False),
            default=default_level,
            show_default=True,
            callback=lambda _ctx, _param, value: str(value).upper(),
            help="The least severe log lines shown, for every logger (the SDKs' too).",
        )(command)
        return click.option(
            "--log-format",
            type=click.Choice(["text", "json"], case_sensitive=False),
            default="text",
            show_default=True,
            callback=lambda _ctx, _param, value: str(value).lower(),
            help="text, or one JSON object per line (time, level, logger, message, run_id, session_key, ...).",
        )(command)

    return decorate
