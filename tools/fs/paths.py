"""Path confinement for the file tools: the real path a name stands for in a workspace, refused outside it."""

from __future__ import annotations

import os
import unicodedata
from pathlib import Path

from routing.errors import ToolError

NAME_CAP = 100  # characters of a file name from outside that are kept (its extension too)


class FsError(ToolError, ValueError):
    """A file-tool failure whose message is written for the model (not found, a directory, binary ...)."""


class PathRefused(FsError):
    """A path the file tools will not touch: outside the workspace (by `..`, absolute, or a symlink), or malformed."""


# --- confinement -----------------------------------------------------------------------------------------------


def resolve_in_workspace(workspace: Path, user_path: str) -> Path:
    """The real path `user_path` names inside `workspace`, every symlink followed; `PathRefused` when outside.

    Relative paths start at the workspace; an absolute path is accepted only when it lies inside it. Nothing is
    decoded: `..%2f` is an odd file name, not a traversal. A path that does not exist yet resolves through its
    existing parents, so a symlinked parent directory or a (dangling) symlink leading out is refused too.
    """
    if "\x00" in user_path:
        raise PathRefused("refused: the path contains a NUL byte")
    root = Path(os.path.realpath(workspace))
    joined = os.path.join(root, user_path)  # an absolute user_path replaces the root here
    real = Path(os.path.realpath(joined))
    if real.is_relative_to(root):
        return real
    lexical = Path(os.path.normpath(joined))
    if lexical.is_relative_to(root):
        raise PathRefused(f"refused: {user_path!r} leads outside the workspace through a symbolic link")
    raise PathRefused(f"refused: {user_path!r} is outside the workspace; paths are relative to the workspace folder")


def safe_file_name(name: str | None, fallback: str = "file", extension: str = "") -> str:
    """A file name from outside (a platform's, a URL's) that stays where it is put: no folders, control
    characters or leading dots, cut to NAME_CAP characters keeping its extension; `fallback` + `extension` when
    nothing usable is left."""
    name = (name or "").replace("\\", "/").rsplit("/", 1)[-1]
    name = "".join("_" if unicodedata.category(char)[0] == "C" else char for char in name)
    name = name.strip().lstrip(".").strip()
    stem, found = os.path.splitext(name)
    if not stem:
        stem, found = fallback, found or extension
    found = found[:16]
    return stem[: NAME_CAP - len(found)] + found


def new_file(workspace: Path, folder: str, name: str) -> Path:
    """Create an empty file for `name` in the workspace's `folder` (made when missing), with ` (2)`, ` (3)` …
    before its extension when the name is taken; never through a symbolic link out of the workspace
    (PathRefused)."""
    resolve_in_workspace(workspace, folder).mkdir(parents=True, exist_ok=True)
    real_folder = resolve_in_workspace(workspace, folder)  # made now: check what it really is
    stem, extension = os.path.splitext(name)
    for number in range(1, 10_000):
        candidate = real_folder / (name if number == 1 else f"{stem} ({number}){extension}")
        try:
            with open(candidate, "xb"):  # exclusive: never an existing file, nor a symbolic link's target
                return candidate
        except FileExistsError:
            continue
    raise FsError(f"no free name for {name!r} in {folder}")


def _rel(root: Path, path: Path) -> str:
    """`path` as the model names it: relative to the workspace, "." for the workspace itself."""
    return path.relative_to(root).as_posix() if path != root else "."
