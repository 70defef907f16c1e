"""The `grep` tool: search the workspace's text files line by line, matches in non-owners' files fenced apart."""

from __future__ import annotations

import asyncio
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, Field

from tools.base import RunInfo, Tool, ToolContext, ToolResult
from tools.fs.authors import _authors, _source
from tools.fs.files import _O_NOFOLLOW, _O_NONBLOCK, SNIFF_BYTES
from tools.fs.paths import FsError, _rel, resolve_in_workspace
from tools.fs.runner import GROUP, _in_workspace
from tools.fs.walk import _glob_matcher, _walk
from tools.provenance import Provenance
from tools.untrusted import wrap_untrusted

MAX_GREP_MATCHES = 200
MAX_GREP_FILE_BYTES = 2 * 1024 * 1024
MAX_GREP_LINE_CHARS = 300


# --- grep ---------------------------------------------------------------------------------------------------


class GrepArgs(BaseModel):
    """The grep tool's parameters."""

    pattern: str = Field(
        min_length=1,
        description="A Python regular expression searched for in each line, e.g. 'def \\w+_test' or "
        "'TODO|FIXME'; start it with (?i) to ignore case.",
    )
    path: str = Field(
        default=".",
        description="The folder (searched recursively) or the single file to search, relative to your workspace "
        "folder; '.' is all of it.",
    )
    glob: str | None = Field(
        default=None,
        description="Only search files whose path matches this glob, e.g. '*.py' (any depth) or 'src/**/*.ts'.",
    )


def _is_regular(entry: os.DirEntry[str]) -> bool:
    """A plain file (not a link, folder or device); False when it cannot be told."""
    try:
        return entry.is_file(follow_symlinks=False)
    except OSError:
        return False


def _cut_line(line: str, start: int) -> str:
    """At most MAX_GREP_LINE_CHARS of `line`, around the match at `start` when the line is long."""
    if len(line) <= MAX_GREP_LINE_CHARS:
        return line
    room = MAX_GREP_LINE_CHARS - 2
    begin = 0 if start < room // 2 else start - room // 4
    piece = line[begin : begin + room]
    return ("…" if begin else "") + piece + ("…" if begin + room < len(line) else "")


def _grep(root: Path, args: GrepArgs, run: RunInfo, cancelled: asyncio.Event) -> dict[str, Any]:
    try:
        regex = re.compile(args.pattern)
    except re.error as error:
        raise FsError(f"invalid regular expression {args.pattern!r}: {error}") from None
    wanted = _glob_matcher(args.glob) if args.glob else None
    base = resolve_in_workspace(root, args.path)
    rel = _rel(root, base)
    if not base.exists():
        raise FsError(f"no such file or folder: {rel}")
    if base.is_dir():
        candidates: Iterator[tuple[str, str]] = (
            (entry.path, _rel(root, Path(entry.path)))
            for entry, relative in _walk(base, cancelled)
            if _is_regular(entry) and (wanted is None or wanted(relative))
        )
    else:
        candidates = iter([(str(base), rel)])
    provenance = Provenance(run, root)
    found: list[dict[str, Any]] = []
    others: list[dict[str, Any]] = []  # matches in files non-owners wrote: they come back wrapped
    written_by: dict[str, None] = {}
    skipped = {"binary": 0, "too_large": 0, "unreadable": 0}
    searched = 0
    truncated = False
    for file_path, file_rel in candidates:
        try:
            fd = os.open(file_path, os.O_RDONLY | _O_NOFOLLOW | _O_NONBLOCK)
            with open(fd, "rb") as handle:
                info = os.fstat(handle.fileno())
                if not stat.S_ISREG(info.st_mode):
                    continue
                if info.st_size > MAX_GREP_FILE_BYTES:
                    skipped["too_large"] += 1
                    continue
                data = handle.read(MAX_GREP_FILE_BYTES + 1)
        except OSError:
            skipped["unreadable"] += 1
            continue
        if b"\x00" in data[:SNIFF_BYTES]:
            skipped["binary"] += 1
            continue
        searched += 1
        authors: list[str] | None = None  # looked up at the file's first match
        for number, line in enumerate(data.decode("utf-8", errors="replace").split("\n"), start=1):
            match = regex.search(line)
            if match is None:
                continue
            if len(found) + len(others) == MAX_GREP_MATCHES:
                truncated = True
                break
            if authors is None:
                authors = _authors(provenance, file_rel, data)
                written_by.update(dict.fromkeys(authors))
            hit = {"path": file_rel, "line": number, "text": _cut_line(line.rstrip("\r"), match.start())}
            (others if authors else found).append(hit)
        if truncated:
            break
    payload: dict[str, Any] = {
        "path": rel,
        "pattern": args.pattern,
        "matches": found,
        "files_searched": searched,
        "skipped": {reason: count for reason, count in skipped.items() if count},
        "truncated": truncated,
    }
    if others:
        lines = "\n".join(f"{hit['path']}:{hit['line']}: {hit['text']}" for hit in others)
        payload["untrusted_matches"] = wrap_untrusted(lines, _source("grep matches (path:line: text)", [*written_by]))
        payload["written_by"] = [*written_by]
    if truncated:
        payload["note"] = f"stopped at {MAX_GREP_MATCHES} matches; narrow the pattern, path or glob"
    return payload


class GrepTool(Tool):
    name: ClassVar[str] = "grep"
    label: ClassVar[str] = "Search in files"
    group: ClassVar[str | None] = GROUP
    description: ClassVar[str] = (
        "Search the text files in your workspace (or one folder or file of it; paths are relative to the "
        "workspace) for a regular expression, line by line. Returns each match's path, line number and line "
        f"(long lines cut to {MAX_GREP_LINE_CHARS} characters around the match), at most {MAX_GREP_MATCHES} "
        "matches. Narrow it with `glob`, e.g. '*.py'. Binary files, files over "
        f"{MAX_GREP_FILE_BYTES // (1024 * 1024)} MiB, the .git folder and symbolic links are skipped. Matches "
        "in files someone other than an owner wrote come back apart, in `untrusted_matches`, fenced as untrusted "
        "content ('path:line: text' lines)."
    )
    parameters: ClassVar[type[BaseModel]] = GrepArgs

    async def execute(self, call_id: str, args: GrepArgs, ctx: ToolContext) -> ToolResult:
        return await _in_workspace(self.name, ctx, lambda root: _grep(root, args, ctx.run, ctx.cancelled))
