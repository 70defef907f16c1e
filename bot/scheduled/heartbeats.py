"""Heartbeats (`agents[].heartbeat`): a periodic turn in the agent's main session for a target chat, asking it to
follow HEARTBEAT.md in its workspace; `HEARTBEAT_OK` (or `NO_REPLY`) sends nothing; outside the active hours nothing
runs. Each is a scheduled job the scheduler runs like any other, under the id `heartbeat-<agent>`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from bot.config.schedules import HEARTBEAT_OK, CronJob, active_minutes
from tools.clock import zone
from tools.owner_files import HEARTBEAT_FILE

if TYPE_CHECKING:
    from bot.config.settings import Config

DEFAULT_PROMPT = (
    f"Heartbeat: read {HEARTBEAT_FILE} in your workspace if it exists and follow it. If nothing needs a person's "
    f"attention, answer exactly {HEARTBEAT_OK}."
)


@dataclass(frozen=True)
class Heartbeat:
    """An agent's heartbeat as the scheduler runs it: a job in the target chat's main session, and its hours."""

    job: CronJob
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
        job = CronJob(
            id=f"heartbeat-{agent.id}",
            name=f"{agent.id} heartbeat",
            agent=agent.id,
            every=beat.every,
            message=beat.prompt or DEFAULT_PROMPT,
            session="main",
            deliver=beat.target,
        )
        tz = beat.tz or config.timezone_for(agent.id)
        found.append(Heartbeat(job, active_minutes(beat.active_hours) if beat.active_hours else None, tz))
    return found
