"""How a channel account is doing, as its adapter reports it: a state, when it last heard from and reached the
platform, how often it reconnected, and its last error (its secrets masked). The gateway reads it for `bot status`,
`/status`, the metrics and the owners' notices."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict

__all__ = ["UNHEALTHY", "ChannelHealth", "ChannelState", "HealthSnapshot"]

log = logging.getLogger(__name__)

ChannelState = Literal["starting", "connected", "degraded", "stalled", "stopped"]
UNHEALTHY: frozenset[ChannelState] = frozenset({"degraded", "stalled"})
MAX_ERROR_CHARS = 300


class HealthSnapshot(BaseModel):
    """A channel account's health at one moment (times are seconds since the epoch)."""

    model_config = ConfigDict(frozen=True)

    channel: str
    account: str
    state: ChannelState
    since: float  # when it entered `state`
    last_inbound: float | None = None  # the last update, event or envelope the platform sent
    last_success: float | None = None  # the last platform call that succeeded
    reconnects: int = 0
    last_error: str | None = None


class ChannelHealth:
    """Kept by an adapter as `adapter.health` and written by it as things happen; one log line per incident (when
    the account turns degraded or stalled, and when it recovers), never one per failed attempt."""

    def __init__(
        self,
        channel: str,
        account: str,
        *,
        secrets: Sequence[str] = (),
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.channel = channel
        self.account = account
        self._secrets = [secret for secret in secrets if secret]
        self._clock = clock
        self._state: ChannelState = "starting"
        self._since = clock()
        self._last_inbound: float | None = None
        self._last_success: float | None = None
        self._reconnects = 0
        self._last_error: str | None = None

    @property
    def state(self) -> ChannelState:
        return self._state

    def set(self, state: ChannelState, error: str | None = None) -> None:
        """Enter `state` (a repeat of the current one changes nothing but the error); `error` says why."""
        if error is not None:
            self.failed(error)
        if state == self._state:
            return
        before, self._state, self._since = self._state, state, self._clock()
        where = f"channel {self.channel} account {self.account}"
        if state in UNHEALTHY and before not in UNHEALTHY:
            log.warning("%s is %s: %s", where, state, self._last_error or "no reason given")
        elif state == "connected" and before in UNHEALTHY:
            log.info("%s recovered (was %s)", where, before)

    def heard(self) -> None:
        """The platform sent something (an update, an event, an envelope, a pong)."""
        self._last_inbound = self._clock()

    def reached(self) -> None:
        """A call to the platform succeeded."""
        self._last_success = self._clock()

    def reconnected(self) -> None:
        """A new connection (or HTTP session) replaced a lost or stalled one."""
        self._reconnects += 1

    def failed(self, error: str) -> None:
        """Remember `error` as the last one, with the account's secrets masked and at most a few hundred characters."""
        for secret in self._secrets:
            error = error.replace(secret, "***")
        self._last_error = error[:MAX_ERROR_CHARS]

    def snapshot(self) -> HealthSnapshot:
        return HealthSnapshot(
            channel=self.channel,
            account=self.account,
            state=self._state,
            since=self._since,
            last_inbound=self._last_inbound,
            last_success=self._last_success,
            reconnects=self._reconnects,
            last_error=self._last_error,
        )
