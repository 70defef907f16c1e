"""Workspace files only an owner's run may write: the bootstrap files every session's prompt holds, and skills."""

from __future__ import annotations

from pathlib import PurePosixPath

__all__ = ["BOOTSTRAP_FILES", "SKILLS_FOLDER", "owner_file"]

BOOTSTRAP_FILES = ("AGENTS.md", "SOUL.md", "USER.md", "TOOLS.md")
SKILLS_FOLDER = "skills"
_NAMES = frozenset(name.casefold() for name in BOOTSTRAP_FILES)


def owner_file(rel: str) -> bool:
    """Whether `rel` (a path relative to the workspace, as the file tools name it) is a bootstrap file or lies
    in the skills folder. Compared without case: on a case-insensitive disk `agents.md` is AGENTS.md."""
    parts = PurePosixPath(rel).parts
    if not parts:
        return False
    return (len(parts) == 1 and parts[0].casefold() in _NAMES) or parts[0].casefold() == SKILLS_FOLDER
