"""Exec policy settings: the `agents[].exec` config models (security level, ask mode, safe bins, allowlist rules) and
the exact entry "Allow always" stores."""

from __future__ import annotations

import os
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

ExecSecurity = Literal["deny", "allowlist", "full"]
ExecAsk = Literal["off", "on-miss", "always"]
DEFAULT_SAFE_BINS = ("cut", "uniq", "head", "tail", "tr", "wc")


class AllowRule(BaseModel):
    """A config allowlist entry: `{executable: git, args: "status **"}`."""

    model_config = ConfigDict(extra="forbid")

    executable: str
    """A bare name (`git`, found on PATH) or an absolute path (`/usr/bin/git`)."""
    args: str = "**"
    """Whitespace-separated fnmatch globs, one per argument, each matching one whole argument; a final `**` matches
    any remaining arguments (zero or more). "" means no arguments, "**" any arguments, and "*" exactly one argument.
    A program the policy knows (tools/exec_programs.py) still needs every option harmless and every file inside the
    workspace."""

    @field_validator("executable")
    @classmethod
    def _bare_name_or_absolute(cls, value: str) -> str:
        if not value.strip() or value != value.strip():
            raise ValueError("must be a program name such as git or an absolute path such as /usr/bin/git")
        if "/" in value and not os.path.isabs(value):
            raise ValueError(
                "must be a bare program name (git) or an absolute path (/usr/bin/git), not a relative path"
            )
        return value


class AllowEntry(BaseModel):
    """What "Allow always" stores: one exact program and exact arguments, never a pattern."""

    model_config = ConfigDict(frozen=True)

    executable: str
    """The resolved absolute path."""
    args: tuple[str, ...]
    """The exact arguments."""
    sha256: str | None = None
    """For a script (`python3 build.py`, `./run.sh`): the SHA-256 of its content; a changed script asks again."""


class ExecSettings(BaseModel):
    """`agents[].exec` in the config."""

    model_config = ConfigDict(extra="forbid")

    security: ExecSecurity = "allowlist"
    ask: ExecAsk = "on-miss"
    safe_bins: list[str] = Field(default_factory=lambda: list(DEFAULT_SAFE_BINS))
    """Programs that run unasked as pure stdin filters: only programs in the program table, with harmless options
    and no file at all; given a file, a safe bin is judged like any other program."""
    allowlist: list[AllowRule] = Field(default_factory=list)
    approvers: list[str] | None = None
    """`channel:sender_id` keys; None means the config's owners (resolved elsewhere)."""
