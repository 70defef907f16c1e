"""The owners' notices (`health.notify_owners`): one DM to each owner when a channel account stays degraded or
stalled past `health.notify_after`, and one when it is connected again; once per incident."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from agent.cancellation import cancel_and_wait
from channels.base import InboundMessage
from channels.health import UNHEALTHY, HealthSnapshot
from routing import Peer

if TYPE_CHECKING:
    from bot.delivery.outbox import Delivery
    from bot.runs.decisions import Decisions

__all__ = ["CHECK_INTERVAL", "ChannelNotices"]

log = logging.getLogger(__name__)

CHECK_INTERVAL = 5.0  # seconds between two looks at the channels' health


@dataclass
class _Incident:
    """One channel account down: since when the notices saw it so (the gateway's clock), and whom they told."""

    began: float
    told: set[str] = field(default_factory=set)  # the owners (`channel:sender_id`) who got the notice


def _ago(seconds: float) -> str:
    minutes = round(seconds / 60)
    return f"{round(seconds)}s" if seconds < 60 else f"{minutes}m" if minutes < 120 else f"{minutes // 60}h"


class ChannelNotices:
    """Looks at `health()` every `interval` seconds (`check()` looks once) and tells the owners, through `delivery`
    to a direct chat on an account of their channel that is connected, about a channel account down for longer
    than `health.notify_after`, then about its recovery. An owner who cannot be reached yet (every account of
    their channel is down) is told when one comes back, if the incident still lasts."""

    def __init__(
        self,
        decisions: Decisions,
        delivery: Delivery,
        health: Callable[[], list[HealthSnapshot]],
        clock: Callable[[], float],
        *,
        interval: float = CHECK_INTERVAL,
    ) -> None:
        self.decisions = decisions
        self.clock = clock
        self.delivery = delivery
        self.health = health
        self.interval = interval
        self._incidents: dict[tuple[str, str], _Incident] = {}
        self._task: asyncio.Task[None] | None = None
        self._sent = 0  # notices sent by this process: their messages' ids
        self._lock = asyncio.Lock()  # one look at a time: an incident's owners are told once

    def start(self) -> None:
        """Look every `interval` seconds, when the config asks for notices."""
        if self.decisions.config.health.notify_owners and self.decisions.config.owners:
            self._task = asyncio.create_task(self._keep_checking(), name="channel notices")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None

    async def _keep_checking(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.check()
            except Exception:
                log.exception("checking the channels' health for the owners' notices failed")

    async def check(self) -> None:
        """Look at every channel account once: tell the owners what is due (nothing unless `notify_owners`)."""
        if not self.decisions.config.health.notify_owners:
            return
        async with self._lock:
            await self._check()

    async def _check(self) -> None:
        now = self.clock()
        channels = self.health()
        reachable = {(item.channel, item.account) for item in channels if item.state == "connected"}
        for item in channels:
            key = (item.channel, item.account)
            incident = self._incidents.get(key)
            if item.state in UNHEALTHY:
                if incident is None:
                    incident = self._incidents[key] = _Incident(began=now)
                if now - incident.began >= self.decisions.config.health.notify_after:
                    text = (
                        f"Channel {item.channel}/{item.account} has been {item.state} for {_ago(now - incident.began)}"
                        + (f": {item.last_error}" if item.last_error else ".")
                    )
                    incident.told |= await self._tell(text, reachable, exclude=incident.told)
            elif incident is not None and item.state in ("connected", "stopped"):
                del self._incidents[key]
                if incident.told and item.state == "connected":
                    down = _ago(now - incident.began)
                    text = f"Channel {item.channel}/{item.account} is connected again (it was down for {down})."
                    await self._tell(text, reachable, only=incident.told)

    async def _tell(
        self,
        text: str,
        reachable: set[tuple[str, str]],
        *,
        exclude: set[str] | None = None,
        only: set[str] | None = None,
    ) -> set[str]:
        """DM `text` to each owner (those in `only`, but not those in `exclude`) who has a connected account on their
        channel; the owners it was sent to."""
        told = set()
        for owner in self.decisions.config.owners:
            if (exclude is not None and owner in exclude) or (only is not None and owner not in only):
                continue
            channel, sender_id = owner.split(":", 1)
            account = next((acc for ch, acc in sorted(reachable) if ch == channel), None)
            if account is None:
                continue
            self._sent += 1
            message = InboundMessage(
                channel=channel,
                account=account,
                peer=Peer("direct", sender_id),
                sender_id=sender_id,
                message_id=f"health-notice-{self._sent}",
            )
            try:
                await self.delivery.reply(message, text)
            except Exception:
                log.exception("could not send the channel notice to owner %s", owner)
                continue
            told.add(owner)
        return told
