"""The `ls` and `find` tools: what a workspace folder holds, and the paths in it that match a glob."""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, Field

from tools.base import Tool, ToolContext, ToolResult
from tools.fs.paths import FsError, _rel, resolve_in_workspace
from tools.fs.runner import GROUP, _in_workspace
from tools.fs.walk import _glob_matcher, _walk

MAX_LS_ENTRIES = 1000
MAX_FIND_RESULTS = 1000


# --- ls -----------------------------------------------------------------------------------------------------


class LsArgs(BaseModel):
    """The ls tool's parameters."""

    path: str = Field(
        default=".", description="The folder to list, relative to your workspace folder; '.' is the workspace."
    )


def _entry_kind(entry: os.DirEntry[str]) -> str:
    if entry.is_symlink():
        return "link"
    if entry.is_dir(follow_symlinks=False):
        return "dir"
    if entry.is_file(follow_symlinks=False):
        return "file"
    return "other"


def _ls(root: Path, args: LsArgs) -> dict[str, Any]:
    target = resolve_in_workspace(root, args.path)
    rel = _rel(root, target)
    if not target.exists():
        raise FsError(f"no such folder: {rel}")
    if not target.is_dir():
        raise FsError(f"{rel} is a file, not a folder; use read to see it")
    with os.scandir(target) as listing:
        entries = sorted(listing, key=lambda entry: entry.name)
    shown: list[dict[str, Any]] = []
    for entry in entries[:MAX_LS_ENTRIES]:
        item: dict[str, Any] = {"name": entry.name, "type": "other"}
        with contextlib.suppress(OSError):  # the entry may vanish while we look
            item["type"] = _entry_kind(entry)
            if item["type"] == "file":
                item["size"] = entry.stat(follow_symlinks=False).st_size
        shown.append(item)
    payload: dict[str, Any] = {
        "path": rel,
        "entries": shown,
        "total": len(entries),
        "truncated": len(entries) > MAX_LS_ENTRIES,
    }
    if payload["truncated"]:
        payload["note"] = f"only the first {MAX_LS_ENTRIES} of {len(entries)} entries are shown; use find to narrow"
    return payload


class LsTool(Tool):
    name: ClassVar[str] = "ls"
    label: ClassVar[str] = "List a folder"
    group: ClassVar[str | None] = GROUP
    description: ClassVar[str] = (
        "List a folder in your workspace (paths are relative to the workspace; default: the workspace itself). "
        "Each entry has its name, its type (file, dir, link or other) and, for files, the size in bytes; sorted "
        f"by name, at most {MAX_LS_ENTRIES} entries. Symbolic links are shown, not followed. Paths outside the "
        "workspace are refused."
    )
    parameters: ClassVar[type[BaseModel]] = LsArgs

    async def execute(self, call_id: str, args: LsArgs, ctx: ToolContext) -> ToolResult:
        return await _in_workspace(self.name, ctx, lambda root: _ls(root, args))


# --- find ---------------------------------------------------------------------------------------------------


class FindArgs(BaseModel):
    """The find tool's parameters."""

    pattern: str = Field(
        min_length=1,
        description="A glob, e.g. '**/*.py', 'src/*.ts', 'README*'. `*` and `?` match within one folder name, "
        "`**` matches any number of folders, [abc] one of the characters. A pattern without '/' matches file "
        "names at any depth ('*.md' finds every .md file).",
    )
    path: str = Field(
        default=".", description="The folder to search in, relative to your workspace folder; '.' is all of it."
    )


def _find(root: Path, args: FindArgs, cancelled: asyncio.Event) -> dict[str, Any]:
    matches = _glob_matcher(args.pattern)
    base = resolve_in_workspace(root, args.path)
    rel = _rel(root, base)
    if not base.is_dir():
        raise FsError(f"no such folder: {rel}" if not base.exists() else f"{rel} is a file, not a folder")
    found: list[str] = []
    truncated = False
    for entry, relative in _walk(base, cancelled):
        if not matches(relative):
            continue
        if len(found) == MAX_FIND_RESULTS:
            truncated = True
            break
        is_dir = False
        with contextlib.suppress(OSError):
            is_dir = entry.is_dir(follow_symlinks=False)
        found.append(_rel(root, Path(entry.path)) + ("/" if is_dir else ""))
    found.sort()
    payload: dict[str, Any] = {"path": rel, "pattern": args.pattern, "matches": found, "truncated": truncated}
    if truncated:
        payload["note"] = f"stopped at {MAX_FIND_RESULTS} matches; use a narrower pattern or path"
    return payload


class FindTool(Tool):
    name: ClassVar[str] = "find"
    label: ClassVar[str] = "Find files"
    group: ClassVar[str | None] = GROUP
    description: ClassVar[str] = (
        "Find files and folders by name in your workspace with a glob such as '**/*.py' (paths are relative to "
        "the workspace). Returns matching paths relative to the workspace, folders ending in '/', at most "
        f"{MAX_FIND_RESULTS}. The .git folder is skipped and symbolic links to folders are not entered. To search "
        "inside files use `grep`."
    )
    parameters: ClassVar[type[BaseModel]] = FindArgs

    async def execute(self, call_id: str, args: FindArgs, ctx: ToolContext) -> ToolResult:
        return await _in_workspace(self.name, ctx, lambda root: _find(root, args, ctx.cancelled))
