"""Low-level file handling for the file tools: open regular files only, write atomically, tell text from binary."""

from __future__ import annotations

import contextlib
import io
import os
import secrets
import stat
from pathlib import Path

from tools.fs.paths import FsError, PathRefused

SNIFF_BYTES = 8 * 1024  # a NUL byte in this much of the start makes a file binary
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # opening a FIFO must not hang the thread


# --- file helpers -----------------------------------------------------------------------------------------------


def _open_regular(target: Path, rel: str) -> io.BufferedReader:
    """`target` opened for reading, if it is a regular file (not a directory, FIFO or device)."""
    if not os.path.lexists(target):
        raise FsError(f"no such file: {rel} (use ls or find to see what exists)")
    if target.is_dir():
        raise FsError(f"{rel} is a directory, not a file; use ls to see what is in it")
    fd = os.open(target, os.O_RDONLY | _O_NOFOLLOW | _O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise FsError(f"{rel} is not a regular file")
        return open(fd, "rb")  # the caller closes it
    except BaseException:
        os.close(fd)
        raise


def _existing_mode(target: Path, rel: str) -> int | None:
    """The permission bits of the file `target` replaces, or None when it is new."""
    try:
        info = os.lstat(target)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if stat.S_ISDIR(info.st_mode):
        raise FsError(f"{rel} is a directory, not a file")
    if stat.S_ISLNK(info.st_mode):  # resolved paths hold no links; one appeared since
        raise PathRefused(f"refused: {rel} is a symbolic link")
    if not stat.S_ISREG(info.st_mode):
        raise FsError(f"{rel} is not a regular file")
    return stat.S_IMODE(info.st_mode)


def _make_parents(target: Path, rel: str) -> None:
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise FsError(f"cannot create the folders for {rel}: part of that path is a file") from None


def _atomic_write(target: Path, data: bytes, mode: int | None) -> None:
    """Write `data` to a new file beside `target`, then rename it over `target`: readers see the old file or the
    new one, never half of one. `mode` is the replaced file's; a new file gets the usual umask default."""
    temp = target.parent / f".{target.name[:100]}.{secrets.token_hex(6)}.tmp"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW, 0o666)
    try:
        with open(fd, "wb") as handle:
            if mode is not None:
                os.fchmod(handle.fileno(), mode)
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, target)  # replaces a link itself, never what it points to
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


def _decode_text(data: bytes, rel: str) -> str:
    if b"\x00" in data[:SNIFF_BYTES]:
        raise FsError(f"{rel} is a binary file, not shown")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise FsError(f"{rel} is a binary file (not UTF-8 text), not shown") from None
