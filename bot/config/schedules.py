"""Scheduled jobs as settings: the one flat job object and when a job fires, on any clock; and a heartbeat's settings.

A job has exactly one schedule: `cron` (five fields, in `tz`), `every` (an interval of at least a minute, with a
small jitter fixed per job so that jobs made together do not all fire in the same second) or `at` (one moment).
Times are seconds since the epoch, so the scheduler and its tests can run on an injected clock.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from datetime import datetime, tzinfo
from typing import Literal

from cronsim import CronSim, CronSimError
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from routing import Peer
from tools.clock import zone
from tools.message import parse_to

__all__ = [
    "CronJob",
    "duration_seconds",
    "interval_seconds",
    "jitter_seconds",
    "next_fire",
    "parse_deliver",
    "previous_fire",
]

MIN_INTERVAL_SECONDS = 60
MAX_JITTER_SECONDS = 30.0
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_INTERVAL = re.compile(r"(\d+)\s*([smhd])")


def duration_seconds(text: str) -> int:
    """`30s`, `30m`, `2h`, `1h30m`, `1d` as seconds; ValueError for anything else."""
    compact = text.strip().lower().replace(" ", "")
    parts = _INTERVAL.findall(compact)
    if not compact or "".join(f"{count}{unit}" for count, unit in parts) != compact:
        raise ValueError(f"{text!r} is not an interval such as 30m, 2h or 1h30m")
    return sum(int(count) * _UNITS[unit] for count, unit in parts)


def interval_seconds(text: str) -> int:
    """`30m`, `2h`, `1h30m`, `1d` as seconds; ValueError for anything else or less than a minute."""
    seconds = duration_seconds(text)
    if seconds < MIN_INTERVAL_SECONDS:
        raise ValueError(f"{text!r} is shorter than a minute")
    return seconds


def jitter_seconds(job_id: str, interval: int) -> float:
    """How late this job fires in each interval: fixed by its id, at most 5 % of the interval and 30 s."""
    fraction = int.from_bytes(hashlib.sha256(job_id.encode()).digest()[:4], "big") / 2**32
    return fraction * min(interval * 0.05, MAX_JITTER_SECONDS)


def parse_deliver(text: str) -> tuple[str, str | None, Peer, str | None]:
    """A job's `deliver` (the message tool's `to`, plus an optional `:thread:<id>`) as (channel, account or None,
    peer, thread id or None); ValueError if malformed."""
    head, sep, thread = text.strip().partition(":thread:")
    if sep and not thread.strip():
        raise ValueError(f"`deliver` names no thread id after :thread: (got {text!r})")
    channel, account, peer = parse_to(head)
    return channel, account, peer, thread.strip() or None


class CronJob(BaseModel):
    """One scheduled job, the same in bindings.yaml, in the `cron` tool's arguments and in `--json` output."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(
        default_factory=lambda: secrets.token_hex(4),
        pattern=r"^[A-Za-z0-9_-]{1,64}$",
        description="The job's id, 1 to 64 of A-Z, a-z, 0-9, `_` and `-` (`bot cron run <id>` runs it now); made "
        "at random when absent.",
    )
    name: str = Field(default="", description="A name for people, shown in listings.")
    agent: str | None = Field(
        default=None, description="The agent that runs the job; none: the default agent (or the agent that made it)."
    )
    cron: str | None = Field(
        default=None,
        description='A cron expression of five fields, such as "0 9 * * 1-5", in `tz`; one of `cron`, `every` and '
        "`at`.",
    )
    every: str | None = Field(
        default=None,
        description="An interval such as 30m, 2h or 1d, at least a minute, with a small jitter fixed per job; one "
        "of `cron`, `every` and `at`.",
    )
    at: str | None = Field(
        default=None,
        description="One moment, ISO 8601 (2026-11-25T09:00); without an offset it is in `tz`; one of `cron`, "
        "`every` and `at`.",
    )
    tz: str | None = Field(
        default=None,
        description="IANA time zone of `cron` and of an `at` without an offset; none: the host's zone.",
    )
    message: str = Field(min_length=1, description="What the agent is asked when the job runs.")
    session: Literal["isolated", "main"] = Field(
        default="isolated",
        description="`isolated`: the job's own session, `agent:<agent>:cron:<id>`; `main`: the target chat's own "
        "session, so the turn sees that conversation.",
    )
    deliver: str | None = Field(
        default=None,
        description="The chat the answer goes to, `<channel>[/<account>]:<kind>:<id>` plus an optional "
        "`:thread:<id>`; none: the chat the job was made in (required for jobs in the file).",
    )
    enabled: bool = Field(default=True, description="Whether the job runs; false keeps it without running it.")

    @field_validator("tz")
    @classmethod
    def _known_zone(cls, value: str | None) -> str | None:
        if value is not None:
            zone(value)  # ValueError names an unknown zone
        return value

    @field_validator("deliver")
    @classmethod
    def _a_target(cls, value: str | None) -> str | None:
        if value is not None:
            parse_deliver(value)
        return value.strip() if value is not None else None

    @field_validator("cron")
    @classmethod
    def _five_fields(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if len(value.split()) != 5:
            raise ValueError(f"{value!r} must have five fields: minute hour day-of-month month day-of-week")
        try:
            CronSim(value, datetime.now())
        except CronSimError as error:
            raise ValueError(f"{value!r} is not a cron expression: {error}") from None
        return value.strip()

    @field_validator("every")
    @classmethod
    def _an_interval(cls, value: str | None) -> str | None:
        if value is not None:
            interval_seconds(value)
        return value

    @field_validator("at")
    @classmethod
    def _a_moment(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                datetime.fromisoformat(value.strip())
            except ValueError:
                raise ValueError(f"{value!r} is not an ISO 8601 time such as 2026-11-25T09:00") from None
        return value

    @model_validator(mode="after")
    def _one_schedule(self) -> CronJob:
        given = [name for name in ("cron", "every", "at") if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError(f"a job needs exactly one of cron, every or at (got {', '.join(given) or 'none'})")
        return self

    def zone(self) -> tzinfo:
        """The job's time zone (the host's when it names none)."""
        return zone(self.tz)

    def moment(self) -> float:
        """An `at` job's moment in seconds since the epoch (a time without an offset is in the job's zone)."""
        assert self.at is not None
        moment = datetime.fromisoformat(self.at.strip())
        return (moment if moment.tzinfo is not None else moment.replace(tzinfo=self.zone())).timestamp()


def next_fire(job: CronJob, after: float, anchor: float) -> float | None:
    """When `job` next fires strictly after `after` (seconds since the epoch), or None when it never will (an `at`
    in the past). `anchor` is when an `every` job's intervals are counted from (when it was made)."""
    if job.at is not None:
        fires = job.moment()
        return fires if fires > after else None
    if job.every is not None:
        interval = interval_seconds(job.every)
        offset = anchor + jitter_seconds(job.id, interval)
        periods = max(int((after - offset) // interval) + 1, 1)
        return offset + periods * interval
    assert job.cron is not None
    start = datetime.fromtimestamp(after, job.zone())
    return next(iter(CronSim(job.cron, start))).timestamp()


def previous_fire(job: CronJob, before: float, anchor: float) -> float | None:
    """The latest moment at or before `before` when `job` was due, or None when it never was (a later `at`, or an
    `every` job's first interval not yet over)."""
    if job.at is not None:
        fired = job.moment()
        return fired if fired <= before else None
    if job.every is not None:
        interval = interval_seconds(job.every)
        offset = anchor + jitter_seconds(job.id, interval)
        periods = int((before - offset) // interval)
        return offset + periods * interval if periods >= 1 else None
    assert job.cron is not None
    for moment in CronSim(job.cron, datetime.fromtimestamp(before + 1, job.zone()), reverse=True):
        if moment.timestamp() <= before:
            return moment.timestamp()
    return None  # pragma: no cover - a valid expression always has an earlier time


# --- heartbeats (`agents[].heartbeat`; bot.scheduled.heartbeats runs them) ---------------------------------------

HEARTBEAT_OK = "HEARTBEAT_OK"  # a heartbeat's answer when nothing needs a person's attention
_HOURS = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)-([01]\d|2[0-4]):([0-5]\d)$")


def active_minutes(text: str) -> tuple[int, int]:
    match = _HOURS.match(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not a span of hours such as 08:00-22:00")
    start_h, start_m, end_h, end_m = map(int, match.groups())
    return start_h * 60 + start_m, end_h * 60 + end_m


class HeartbeatConfig(BaseModel):
    """`agents[].heartbeat`."""

    model_config = ConfigDict(extra="forbid")

    every: str = Field(description="How often it runs: an interval such as 30m or 1h, at least a minute.")
    target: str = Field(
        description="The chat it speaks in, whose own session it runs in: `<channel>[/<account>]:<kind>:<id>` plus "
        "an optional `:thread:<id>`."
    )
    active_hours: str | None = Field(
        default=None,
        description='When it may run, such as "08:00-22:00" in `tz`; a span past midnight ("22:00-06:00") wraps; '
        "none: at any hour.",
    )
    tz: str | None = Field(default=None, description="IANA time zone of `active_hours`; none: the agent's time zone.")
    prompt: str | None = Field(
        default=None,
        description="What the agent is asked; none: to follow HEARTBEAT.md in its workspace if it exists, and to "
        "answer HEARTBEAT_OK (which sends nothing) when nothing needs a person.",
    )

    @field_validator("every")
    @classmethod
    def _interval(cls, value: str) -> str:
        interval_seconds(value)
        return value

    @field_validator("target")
    @classmethod
    def _target(cls, value: str) -> str:
        parse_deliver(value)
        return value.strip()

    @field_validator("active_hours")
    @classmethod
    def _hours(cls, value: str | None) -> str | None:
        if value is not None:
            active_minutes(value)
        return value

    @field_validator("tz")
    @classmethod
    def _zone(cls, value: str | None) -> str | None:
        if value is not None:
            zone(value)
        return value


def quiet(text: str) -> bool:
    """A heartbeat's answer that sends nothing."""
    return text.strip() in (HEARTBEAT_OK, "NO_REPLY")
