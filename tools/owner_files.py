"""Workspace files only an owner's run may write: the files the bot hands to owners' runs as their instructions (the
bootstrap files every session's prompt holds, HEARTBEAT.md that every heartbeat is told to follow) and skills."""

from __future__ import annotations

from pathlib import PurePosixPath

__all__ = ["BOOTSTRAP_FILES", "HEARTBEAT_FILE", "SKILLS_FOLDER", "owner_file"]

BOOTSTRAP_FILES = ("AGENTS.md", "SOUL.md", "USER.md", "TOOLS.md")
HEARTBEAT_FILE = "HEARTBEAT.md"
SKILLS_FOLDER = "skills"
# What makes a folder a skill, and holds its instructions: a `skills.dirs` folder may lie inside the workspace too.
_SKILL_FILE = "skill.md"
_NAMES = frozenset(name.casefold() for name in (*BOOTSTRAP_FILES, HEARTBEAT_FILE))


def owner_file(rel: str) -> bool:
    """Whether `rel` (a path relative to the workspace, as the file tools name it) is a bootstrap file or
    HEARTBEAT.md, lies in the skills folder, or is a skill's SKILL.md anywhere. Compared without case: on a
    case-insensitive disk `agents.md` is AGENTS.md."""
    parts = PurePosixPath(rel).parts
    if not parts:
        return False
    top, last = parts[0].casefold(), parts[-1].casefold()
    return (len(parts) == 1 and top in _NAMES) or top == SKILLS_FOLDER or last == _SKILL_FILE
