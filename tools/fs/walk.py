"""Walking a workspace folder for find and grep, and matching its paths against a glob."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path

from tools.fs.paths import FsError

SKIPPED_DIRS = frozenset({".git"})  # never walked by find and grep


def _glob_matcher(pattern: str) -> Callable[[str], bool]:
    """A test for paths (relative, '/'-separated) against a glob: `*` and `?` stay within one folder, `**` spans
    folders, `[abc]` is a set. A pattern without '/' is matched against the file name at any depth."""
    if pattern.startswith("/"):
        raise FsError("the glob is matched against paths relative to `path`; do not start it with '/'")
    while pattern.startswith("./"):
        pattern = pattern[2:]
    parts: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        char = pattern[i]
        if char == "*":
            j = i
            while j < n and pattern[j] == "*":
                j += 1
            whole_segment = (i == 0 or pattern[i - 1] == "/") and (j == n or pattern[j] == "/")
            if j - i >= 2 and whole_segment:
                if j < n:  # `**/`: any number of folders, none included
                    parts.append("(?:.*/)?")
                    j += 1
                else:
                    parts.append(".*")
            else:
                parts.append("[^/]*")
            i = j
            continue
        if char == "?":
            parts.append("[^/]")
        elif char == "[" and (close := pattern.find("]", i + 2)) != -1:
            body = pattern[i + 1 : close].replace("\\", "\\\\")
            if body.startswith("!"):
                body = "^" + body[1:]
            elif body.startswith("^"):
                body = "\\" + body
            parts.append(f"[{body}]")
            i = close + 1
            continue
        else:
            parts.append(re.escape(char))
        i += 1
    try:
        compiled = re.compile("".join(parts), re.DOTALL)
    except re.error as error:
        raise FsError(f"invalid glob {pattern!r}: {error}") from None
    if "/" in pattern:
        return lambda path: compiled.fullmatch(path) is not None
    return lambda path: compiled.fullmatch(path.rsplit("/", 1)[-1]) is not None


def _walk(top: Path, cancelled: asyncio.Event) -> Iterator[tuple[os.DirEntry[str], str]]:
    """Every entry under `top` with its path relative to `top`, by name; symlinked folders are never entered
    and `.git` is skipped. Unreadable folders are passed over. Stops when the run is cancelled."""
    stack: list[tuple[str, str]] = [(str(top), "")]
    while stack:
        folder, prefix = stack.pop()
        try:
            with os.scandir(folder) as listing:
                entries = sorted(listing, key=lambda entry: entry.name)
        except OSError:
            continue
        subfolders: list[tuple[str, str]] = []
        for entry in entries:
            if cancelled.is_set():
                return
            if entry.name in SKIPPED_DIRS:
                continue
            relative = prefix + entry.name
            yield entry, relative
            with contextlib.suppress(OSError):
                if entry.is_dir(follow_symlinks=False):
                    subfolders.append((entry.path, relative + "/"))
        stack.extend(reversed(subfolders))
