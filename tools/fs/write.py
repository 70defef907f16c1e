"""The `write` and `edit` tools: replace a file, or one passage of it, atomically; owner files for owners only."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, Field

from tools.base import RunInfo, Tool, ToolContext, ToolResult
from tools.fs.files import _atomic_write, _decode_text, _existing_mode, _make_parents, _open_regular
from tools.fs.paths import FsError, PathRefused, _rel, resolve_in_workspace
from tools.fs.runner import GROUP, _in_workspace
from tools.owner_files import owner_file
from tools.provenance import RECORDS_FOLDER, record_write

MAX_EDIT_BYTES = 8 * 1024 * 1024


# --- write --------------------------------------------------------------------------------------------------


class WriteArgs(BaseModel):
    """The write tool's parameters."""

    path: str = Field(
        description="The file to write, relative to your workspace folder, e.g. 'src/app.py'. Missing folders "
        "are created."
    )
    content: str = Field(description="The complete new content of the file (UTF-8 text); it replaces all of it.")


def _writable(root: Path, user_path: str, run: RunInfo) -> tuple[Path, str]:
    """Where a write to `user_path` lands, and its name; refused for an owner file (AGENTS.md, skills/...) unless
    an owner started the run, since those files speak in every session of the agent, the owners' included."""
    target = resolve_in_workspace(root, user_path)
    rel = _rel(root, target)
    if owner_file(rel) and not run.sender_is_owner:
        raise PathRefused(
            f"refused: {rel} shapes every conversation of this agent; only a run started by an owner may change it"
        )
    if rel.split("/", 1)[0].casefold() == RECORDS_FOLDER:
        raise PathRefused(
            f"refused: {RECORDS_FOLDER}/ holds the bot's own records of this workspace (the memory "
            "index, who wrote which file); the file tools do not write there"
        )
    return target, rel


def _write(root: Path, args: WriteArgs, run: RunInfo) -> dict[str, Any]:
    target, rel = _writable(root, args.path, run)
    mode = _existing_mode(target, rel)
    _make_parents(target, rel)
    data = args.content.encode("utf-8")
    _atomic_write(target, data, mode)
    record_write(run, root, rel, whole=True)
    return {"path": rel, "bytes": len(data), "created": mode is None}


class WriteTool(Tool):
    name: ClassVar[str] = "write"
    label: ClassVar[str] = "Write a file"
    group: ClassVar[str | None] = GROUP
    description: ClassVar[str] = (
        "Create a file in your workspace folder, or replace all of an existing file's content (paths are relative "
        "to the workspace; missing folders are created). The write is atomic: the file is either all old or all "
        "new, never half written, and an existing file keeps its permissions. To change part of a file use "
        "`edit` instead. Paths outside the workspace, including through symbolic links, are refused."
    )
    parameters: ClassVar[type[BaseModel]] = WriteArgs

    async def execute(self, call_id: str, args: WriteArgs, ctx: ToolContext) -> ToolResult:
        return await _in_workspace(self.name, ctx, lambda root: _write(root, args, ctx.run))


# --- edit ---------------------------------------------------------------------------------------------------


class EditArgs(BaseModel):
    """The edit tool's parameters."""

    path: str = Field(description="The file to change, relative to your workspace folder.")
    old_text: str = Field(
        min_length=1,
        description="The exact text to replace, character for character (spaces, indentation and line breaks "
        "included). It must occur exactly once in the file: include enough surrounding lines to make it unique.",
    )
    new_text: str = Field(description="The text that takes its place (empty to delete old_text).")


def _occurrences(text: str, needle: str) -> int:
    """How many places `needle` starts at in `text`, overlapping ones included."""
    count, start = 0, text.find(needle)
    while start != -1:
        count += 1
        start = text.find(needle, start + 1)
    return count


def _edit(root: Path, args: EditArgs, run: RunInfo) -> dict[str, Any]:
    target, rel = _writable(root, args.path, run)
    with _open_regular(target, rel) as handle:
        info = os.fstat(handle.fileno())
        if info.st_size > MAX_EDIT_BYTES:
            raise FsError(f"{rel} is too large to edit ({info.st_size:,} bytes; the limit is {MAX_EDIT_BYTES:,})")
        data = handle.read(MAX_EDIT_BYTES + 1)
    text = _decode_text(data, rel)
    count = _occurrences(text, args.old_text)
    if count == 0:
        hint = "read the file first and copy the text exactly"
        if "\r\n" in text and "\n" in args.old_text and "\r\n" not in args.old_text:
            hint += " (this file's lines end in \\r\\n)"
        raise FsError(f"old_text was not found in {rel}; {hint}")
    if count > 1:
        raise FsError(f"old_text occurs {count} times in {rel}; include more surrounding text so it is unique")
    if args.new_text == args.old_text:
        raise FsError("new_text is the same as old_text; nothing would change")
    index = text.index(args.old_text)
    changed = text[:index] + args.new_text + text[index + len(args.old_text) :]
    _atomic_write(target, changed.encode("utf-8"), stat.S_IMODE(info.st_mode))
    record_write(run, root, rel, whole=False)
    return {"path": rel, "replaced": 1, "line": text.count("\n", 0, index) + 1}


class EditTool(Tool):
    name: ClassVar[str] = "edit"
    label: ClassVar[str] = "Edit a file"
    group: ClassVar[str | None] = GROUP
    description: ClassVar[str] = (
        "Change part of a text file in your workspace folder (paths are relative to the workspace): replaces "
        "old_text with new_text. old_text must match the file exactly and occur exactly once; if it is not found "
        "or occurs several times nothing is changed and the error says so: read the file and include more "
        "surrounding lines. The file is rewritten atomically and keeps its permissions. Returns the line where "
        "the change starts. Paths outside the workspace, including through symbolic links, are refused."
    )
    parameters: ClassVar[type[BaseModel]] = EditArgs

    async def execute(self, call_id: str, args: EditArgs, ctx: ToolContext) -> ToolResult:
        return await _in_workspace(self.name, ctx, lambda root: _edit(root, args, ctx.run))
