"""Heartbeats (`agents[].heartbeat`): a periodic turn in the agent's main session for a target chat, asking it to
follow HEARTBEAT.md in its workspace; `HEARTBEAT_OK` (or `NO_REPLY`) sends nothing; outside the active hours nothing
runs. Each is a scheduled job the scheduler runs like any other, under the id `heartbeat-<agent>`."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, field_validator

from bot.schedules import Job, interval_seconds, parse_deliver
from tools.clock import zone
from tools.owner_files import HEARTBEAT_FILE

if TYPE_CHECKING:
    from bot.config import Config

HEARTBEAT_OK = "HEARTBEAT_OK"
DEFAULT_PROMPT = (
    f"Heartbeat: read {HEARTBEAT_FILE} in your workspace if it exists and follow it. If nothing needs a person's "
    f"attention, answer exactly {HEARTBEAT_OK}."
)
_HOURS = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)-([01]\d|2[0-4]):([0-5]\d)$")


def _minutes(text: str) -> tuple[int, int]:
    match = _HOURS.match(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not a span of hours such as 08:00-22:00")
    start_h, start_m, end_h, end_m = map(int, match.groups())
    return start_h * 60 + start_m, end_h * 60 + end_m


class HeartbeatConfig(BaseModel):
    """`agents[].heartbeat`."""

    model_config = ConfigDict(extra="forbid")

    every: str  # 30m, 1h (at least a minute)
    target: str  # the chat it speaks in: <channel>[/<account>]:<kind>:<id>[:thread:<id>]
    active_hours: str | None = None  # "08:00-22:00" in `tz`; a span past midnight ("22:00-06:00") wraps
    tz: str | None = None  # IANA zone of the active hours; None: the agent's
    prompt: str | None = None  # what the agent is asked; None: follow HEARTBEAT.md, else HEARTBEAT_OK

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
            _minutes(value)
        return value

    @field_validator("tz")
    @classmethod
    def _zone(cls, value: str | None) -> str | None:
        if value is not None:
            zone(value)
        return value


@dataclass(frozen=True)
class Heartbeat:
    """An agent's heartbeat as the scheduler runs it: a job in the target chat's main session, and its hours."""

    job: Job
    active_hours: tuple[int, int] | None
    tz: str | None

    def active(self, moment: float) -> bool:
        """Whether `moment` falls within the active hours (always, without any)."""
        if self.active_hours is None:
            return True
        local = datetime.fromtimestamp(moment, zone(self.tz))
        minute = local.hour * 60 + local.minute
        start, end = self.active_hours
        return start <= minute < end if start <= end else (minute >= start or minute < end)


def heartbeats(config: Config) -> list[Heartbeat]:
    """The config's heartbeats, one per agent that has one."""
    found = []
    for agent in config.agents:
        beat = agent.heartbeat
        if beat is None:
            continue
        job = Job(
            id=f"heartbeat-{agent.id}",
            name=f"{agent.id} heartbeat",
            agent=agent.id,
            every=beat.every,
            message=beat.prompt or DEFAULT_PROMPT,
            session="main",
            deliver=beat.target,
        )
        tz = beat.tz or config.timezone_for(agent.id)
        found.append(Heartbeat(job, _minutes(beat.active_hours) if beat.active_hours else None, tz))
    return found


def quiet(text: str) -> bool:
    """A heartbeat's answer that sends nothing."""
    return text.strip() in (HEARTBEAT_OK, "NO_REPLY")
