"""Time as the model sees it: the agent's time zone, and the short stamp each person's message carries.

The system prompt names only the zone, so its bytes stay the same from turn to turn (a provider can reuse the
cached prefix); when each thing was said travels on the message itself, as `[Wed 2026-11-25 14:03 UTC]`.
"""

from __future__ import annotations

import time
from datetime import datetime, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

__all__ = ["envelope", "local_zone", "stamp", "zone", "zone_name"]


_host: tuple[int, tzinfo] | None = None  # the host's zone as it was read, and in which minute


def local_zone() -> tzinfo:
    """The host's time zone (its offset and name now), read once a minute: every message asks, the C library looks
    at the zone file each time, and a daylight-saving change falls on the start of a minute."""
    global _host
    minute = int(time.time() // 60)
    if _host is None or _host[0] != minute:
        found = datetime.now().astimezone().tzinfo
        assert found is not None  # astimezone() always sets one
        _host = (minute, found)
    return _host[1]


def zone(name: str | None) -> tzinfo:
    """The IANA zone called `name` (None or "": the host's); ValueError names an unknown one."""
    if not name:
        return local_zone()
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {name!r}: use an IANA name such as Europe/Berlin or UTC") from None


def zone_name(where: tzinfo) -> str:
    """How the prompt names a zone: its IANA key, else its abbreviation now (the host's zone may have no key)."""
    return getattr(where, "key", None) or datetime.now(where).tzname() or "UTC"


def stamp(moment: float | datetime, where: tzinfo) -> str:
    """`Wed 2026-11-25 14:03 UTC`: a moment (seconds since the epoch, or a datetime) in the zone, to the minute."""
    when = datetime.fromtimestamp(moment, where) if isinstance(moment, (int, float)) else moment.astimezone(where)
    return when.strftime("%a %Y-%m-%d %H:%M %Z")


def envelope(moment: float | datetime, where: tzinfo) -> str:
    """The stamp as it starts a message: `[Wed 2026-11-25 14:03 UTC]`."""
    return f"[{stamp(moment, where)}]"
