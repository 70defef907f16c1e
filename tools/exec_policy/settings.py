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

    executable: str = Field(
        description="The program: a bare name (`git`, found on PATH) or an absolute path (`/usr/bin/git`)."
    )
    args: str = Field(
        default="**",
        description="Whitespace-separated globs, one per argument, each matching a whole argument; a final `**` "
        'matches any remaining ones: `""`, no arguments; `"**"`, any; `"*"`, exactly one. A program the policy '
        "knows still needs every option harmless and every file inside the workspace.",
    )

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

    security: ExecSecurity = Field(
        default="allowlist",
        description="`deny`: no command runs; `allowlist`: a command runs unasked only when every part of it is "
        'allowed (a safe bin reading stdin, an `allowlist` rule, an "Allow always" entry); `full`: every command '
        "runs unasked (unless `ask: always`). A command naming the bot's config file or state directory is denied "
        "whatever this says.",
    )
    ask: ExecAsk = Field(
        default="on-miss",
        description="`on-miss`: a command that is not allowed asks an approver; `off`: it is refused instead; "
        "`always`: every command asks.",
    )
    safe_bins: list[str] = Field(
        default_factory=lambda: list(DEFAULT_SAFE_BINS),
        description="Programs that run unasked as pure stdin filters (`... | wc -l`): only programs the policy "
        "knows, with harmless options and no file at all; given a file, a safe bin is judged like any other program.",
    )
    allowlist: list[AllowRule] = Field(
        default_factory=list,
        description="Programs, with globs for their arguments, that run unasked under `security: allowlist`; empty: "
        'even `date` or `ls` asks until a rule or an "Allow always" covers it.',
    )
    approvers: list[str] | None = Field(
        default=None,
        description="`<channel>:<user id>` of who may approve; none: the config's owners (resolved elsewhere).",
    )
