"""The value types of bindings.yaml's keys (ids, agent names, model refs, time zones, owners, durations, skill
globs) and the base of its sections."""

from __future__ import annotations

import math
import re
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict

from agent.providers.config import split_model
from bot.config.schedules import duration_seconds
from routing import normalize_account, normalize_agent_id, normalize_peer_kind
from tools.clock import zone

_CHANNEL = re.compile(r"^[a-z0-9][a-z0-9_-]*$")


def _id(value: object) -> object:
    if isinstance(value, bool):
        raise ValueError("must be an id (text or a number), not true/false")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        text = value.strip()
        if not text:
            raise ValueError("must not be empty")
        return text
    raise ValueError("must be an id (text or a number)")


def _name(value: object) -> object:
    text = _id(value)
    return normalize_agent_id(text) if isinstance(text, str) else text


def _channel(value: object) -> object:
    if not isinstance(value, str):
        return value
    text = value.strip().lower()
    if not _CHANNEL.match(text):
        raise ValueError("must be a channel name such as telegram, discord or slack")
    return text


def _account(value: object) -> object:
    text = _id(value)
    if not isinstance(text, str) or text == "*":
        return text
    return normalize_account(text)


def _peer_kind(value: object) -> object:
    if isinstance(value, str):
        try:
            return normalize_peer_kind(value)
        except ValueError:
            return value  # the Literal check below reports it with the valid choices
    return value


def user_ref(value: object) -> object:
    if not isinstance(value, str):
        return value
    channel, sep, user = value.strip().partition(":")
    if not sep or not channel.strip() or not user.strip():
        raise ValueError("must be <channel>:<user id>, e.g. telegram:123456789")
    return f"{channel.strip().lower()}:{user.strip()}"


def _model_ref(value: object) -> object:
    if not isinstance(value, str):
        return value
    split_model(value)  # ValueError names the expected shape
    return value.strip()


def _time_zone(value: object) -> object:
    if not isinstance(value, str):
        return value
    zone(value.strip())  # ValueError names an unknown zone
    return value.strip()


Id = Annotated[str, BeforeValidator(_id)]
# An IANA time zone name (Europe/Berlin, UTC): the zone an agent's message stamps and prompt are written in.
TimeZone = Annotated[str, BeforeValidator(_time_zone)]
ModelRef = Annotated[str, BeforeValidator(_model_ref)]
# Agent ids and identity names: lowercase, and safe inside session keys and file paths.
Name = Annotated[str, BeforeValidator(_name)]
ChannelName = Annotated[str, BeforeValidator(_channel)]
AccountMatch = Annotated[str, BeforeValidator(_account)]
PeerKindName = Annotated[Literal["direct", "group", "channel"], BeforeValidator(_peer_kind)]
UserRef = Annotated[str, BeforeValidator(user_ref)]


def _duration(value: object) -> object:
    if isinstance(value, bool):
        raise ValueError("must be a duration such as 30s, 10m or 1h")
    if isinstance(value, str):  # the file's scalars arrive as text: `90` and `0.5` are seconds too
        text = value
        try:
            value = float(text)
        except ValueError:
            return float(duration_seconds(text))
    if isinstance(value, int | float):
        if not math.isfinite(value):
            raise ValueError("must be a duration such as 30s, 10m or 1h")
        if value < 0:
            raise ValueError("must not be negative")
        return float(value)
    return value


Duration = Annotated[float, BeforeValidator(_duration)]  # seconds; written as 30s, 10m, 1h (or a number)


class Section(BaseModel):
    """A section of bindings.yaml (or a part of one): every key known, any other an error."""

    model_config = ConfigDict(extra="forbid")


def _skill_glob(value: object) -> object:
    if isinstance(value, str) and not value.strip():
        raise ValueError("must be a skill name or a glob such as git-*")
    return value.strip() if isinstance(value, str) else value


SkillGlob = Annotated[str, BeforeValidator(_skill_glob)]
