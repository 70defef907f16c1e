"""Who wrote what in an agent's workspace: the non-owners' own folders (`memory.scope: sender`) and their writes."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import secrets
import stat
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from routing.errors import ToolError
from tools.base import RunInfo

__all__ = [
    "AUTHORS_FILE",
    "NOBODY_FOLDER",
    "RECORDS_FOLDER",
    "SENDERS_FOLDER",
    "Author",
    "Provenance",
    "ScopeError",
    "clean_name",
    "person_workspace",
    "prepare_root",
    "record_write",
    "run_author",
    "scoped",
    "sender_folder_name",
    "sender_workspace",
]

# Whatever a non-owner writes is theirs, and reaches an owner's run only wrapped as untrusted content naming them:
#   senders/<channel>-<id>/   a non-owner's own folder: with memory.scope: sender it is all their run's tools see,
#                             and everything in it counts as written by that sender
#   .switchboard/authors.json  who else wrote a file (memory.scope: agent): non-owners' write and edit add
#                             themselves, an owner's run replacing the whole file with `write` clears the entry
#   .switchboard/senders/<folder>.json  the sender a folder belongs to, for the name in labels
# The file tools never write under .switchboard/, so no run can erase its own traces with them.
SENDERS_FOLDER = "senders"
RECORDS_FOLDER = ".switchboard"
AUTHORS_FILE = f"{RECORDS_FOLDER}/authors.json"
SENDER_RECORDS = f"{RECORDS_FOLDER}/senders"
MAX_FOLDER_NAME = 80
MAX_NAME = 60
DAMAGED = "unknown (the record of who wrote which file, .switchboard/authors.json, is unreadable)"

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
_NAME_DROP = re.compile(r'["()\x00-\x1f\x7f\u2028\u2029]')
_record_lock = threading.Lock()  # read-modify-write of authors.json, one tool call at a time in this process


class ScopeError(ToolError, ValueError):
    """A non-owner's folder that is not a plain folder inside the agent's workspace (a link leads elsewhere)."""


@dataclass(frozen=True)
class Author:
    """A person who is not an owner: their channel, their id there, and the name they go by."""

    channel: str
    sender_id: str
    name: str | None = None

    @property
    def ref(self) -> str:
        """`channel:id`, without characters that would break a label."""
        return clean_name(f"{self.channel}:{self.sender_id}") or "unknown"

    @property
    def label(self) -> str:
        """`Bo (telegram:555)`, or only the ref when the name is empty."""
        name = clean_name(self.name or "")
        return f"{name} ({self.ref})" if name else self.ref

    def as_json(self) -> dict[str, str | None]:
        return {"channel": self.channel, "id": self.sender_id, "name": self.name}

    @staticmethod
    def from_json(value: Any) -> Author:
        """An Author from `as_json`; ValueError when it is not one."""
        if not isinstance(value, dict):
            raise ValueError("not an author")
        channel, sender_id, name = value.get("channel"), value.get("id"), value.get("name")
        if not isinstance(channel, str) or not isinstance(sender_id, str) or not isinstance(name, str | None):
            raise ValueError("not an author")
        return Author(channel, sender_id, name)


def clean_name(name: str) -> str:
    """A person's name or id as a label may hold it: no quotes, brackets or control characters, spaces collapsed,
    at most MAX_NAME characters."""
    return " ".join(_NAME_DROP.sub(" ", name).split())[:MAX_NAME]


def sender_folder_name(channel: str, sender_id: str) -> str:
    """The folder name of a sender's own files: `<channel>-<id>`, with anything but letters, digits, `_`, `.` and
    `-` replaced; when something was replaced (or cut, or the name would be hidden) a hash of the original is added,
    so two senders never share a folder. Never a path separator, never `.` or `..`."""
    raw = f"{channel}-{sender_id}"
    safe = _UNSAFE.sub("_", raw)[:MAX_FOLDER_NAME].lstrip(".")
    if safe != raw:
        safe = f"{safe}-{hashlib.sha256(raw.encode('utf-8', 'surrogatepass')).hexdigest()[:12]}"
    return safe


def sender_workspace(workspace: Path, channel: str, sender_id: str) -> Path:
    """The folder a non-owner's run works in under `memory.scope: sender`: `<workspace>/senders/<channel>-<id>`."""
    return workspace / SENDERS_FOLDER / sender_folder_name(channel, sender_id)


NOBODY_FOLDER = "_nobody"  # every sender's folder name has a dash: this one is never a person's


@functools.lru_cache(maxsize=4096)  # every non-owner's run asks; the path is the same each time
def person_workspace(workspace: Path, person: str | None) -> Path:
    """The folder of a non-owner's run acting for `person` (`channel:id`); for nobody in particular (None), a
    folder of its own that no person's run shares."""
    if person is None:
        return workspace / SENDERS_FOLDER / NOBODY_FOLDER
    channel, _, sender_id = person.partition(":")
    return sender_workspace(workspace, channel, sender_id)


def run_author(run: RunInfo) -> Author | None:
    """Who writes in this run when it is not an owner: None for an owner's run (and for runs without a sender, such
    as the bot's own), whose writes are the owner's."""
    if run.sender_is_owner or run.sender_id is None:
        return None
    return Author(run.channel, run.sender_id, run.sender_name)


def scoped(run: RunInfo) -> bool:
    """Whether the run works in a non-owner's own folder rather than the agent's whole workspace."""
    return (
        run.workspace is not None
        and run.agent_workspace is not None
        and os.path.normpath(run.workspace) != os.path.normpath(run.agent_workspace)
    )


def _atomic_json(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp"
    try:
        temp.write_text(_json(value), encoding="utf-8")
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            temp.unlink()
        raise


def _created(path: Path, value: Any) -> bool:
    """Write `value` to `path` if nothing is there yet (a new sender's record: one file made, no rename); False when
    something is (a link too). A crash part way leaves a file that does not parse, which the next run replaces."""
    try:
        descriptor = _new_file(path)
    except FileExistsError:
        return False
    try:
        data = memoryview(_json(value).encode())
        while data:
            data = data[os.write(descriptor, data) :]
    except BaseException:
        with contextlib.suppress(OSError):
            path.unlink()
        raise
    finally:
        os.close(descriptor)
    return True


def _new_file(path: Path) -> int:
    """A file made at `path`, open for writing; FileExistsError when something is there."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    try:
        return os.open(path, flags, 0o666)
    except FileNotFoundError:  # the first record of all: its folder is made once, not checked at each one
        path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(path, flags, 0o666)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=1, sort_keys=True)


def prepare_root(run: RunInfo) -> Path | None:
    """The real folder the run's file and memory tools work in, created when missing; None when it has no
    workspace. A non-owner's folder must be a plain folder `senders/<name>` of the agent's workspace (ScopeError
    otherwise), and its sender is recorded for the labels an owner's run shows."""
    if not run.workspace:
        return None
    if not scoped(run):
        Path(run.workspace).mkdir(parents=True, exist_ok=True)
        return Path(os.path.realpath(run.workspace))
    assert run.agent_workspace is not None
    Path(run.agent_workspace).mkdir(parents=True, exist_ok=True)
    agent_root = Path(os.path.realpath(run.agent_workspace))
    home = Path(os.path.normpath(run.workspace))
    name = home.name
    if home.parent != Path(os.path.normpath(run.agent_workspace)) / SENDERS_FOLDER or name in ("", ".", ".."):
        raise ScopeError("this run's folder is not a sender folder of the agent's workspace")
    expected = agent_root / SENDERS_FOLDER / name
    try:
        expected.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise ScopeError(f"{SENDERS_FOLDER}/{name} is not a folder") from None
    # `agent_root` is real: the folder is where it says unless one of the two names below it is a link.
    if any(stat.S_ISLNK(os.lstat(path).st_mode) for path in (expected.parent, expected)):
        raise ScopeError(f"{SENDERS_FOLDER}/{name} leads elsewhere through a symbolic link; refusing to work there")
    author = run_author(run)
    if author is not None:
        record = agent_root / SENDER_RECORDS / f"{name}.json"
        if _created(record, author.as_json()):
            return expected
        with contextlib.suppress(OSError, ValueError):
            if Author.from_json(json.loads(record.read_text(encoding="utf-8"))) == author:
                return expected
        _atomic_json(record, author.as_json())
    return expected


def _folder_label(agent_root: Path, name: str) -> str:
    """The label of the sender owning `senders/<name>`: from its record, else the folder itself."""
    try:
        author = Author.from_json(json.loads((agent_root / SENDER_RECORDS / f"{name}.json").read_text("utf-8")))
    except (OSError, ValueError):
        return f"the sender of {SENDERS_FOLDER}/{clean_name(name)}"
    return author.label


def _load_authors(root: Path) -> dict[str, list[Author]]:
    """authors.json: file → the non-owners who wrote in it. ValueError when it exists but is not readable as such."""
    try:
        raw = (root / AUTHORS_FILE).read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as error:
        raise ValueError(str(error)) from None
    data = json.loads(raw)
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(files, dict):
        raise ValueError("no files")
    return {
        rel: [Author.from_json(item) for item in items]
        for rel, items in files.items()
        if isinstance(rel, str) and isinstance(items, list)
    }


class Provenance:
    """Who wrote the files of one tool call's root: nobody listed means an owner (or the agent in an owner's run);
    otherwise the labels of the non-owners whose text the file holds."""

    def __init__(self, run: RunInfo, root: Path) -> None:
        self.root = root
        self.scoped_label: str | None = None
        if scoped(run):
            author = run_author(run)
            self.scoped_label = author.label if author is not None else f"the sender of {SENDERS_FOLDER}/{root.name}"
        self._records: dict[str, list[Author]] | None = None
        self._damaged = False

    def _recorded(self) -> dict[str, list[Author]]:
        if self._records is None:
            try:
                self._records = _load_authors(self.root)
            except ValueError:
                self._records, self._damaged = {}, True
        return self._records

    def authors(self, rel: str) -> list[str]:
        """The labels of the non-owners who wrote `rel` (a path relative to the root, as the tools name it)."""
        if self.scoped_label is not None:
            return [self.scoped_label]
        labels = [author.label for author in self._recorded().get(rel, [])]
        if self._damaged:
            labels.append(DAMAGED)
        parts = rel.split("/")
        if len(parts) >= 2 and parts[0].casefold() == SENDERS_FOLDER:
            labels.append(_folder_label(self.root, parts[1]))
        return list(dict.fromkeys(labels))


def record_write(run: RunInfo, root: Path, rel: str, *, whole: bool) -> None:
    """Note who wrote `rel` in authors.json: a non-owner is added (replacing the list when they wrote the `whole`
    file); an owner's run that replaced the whole file makes it the owner's again. Nothing is recorded in a
    non-owner's own folder (all of it is theirs), and a damaged record is left as it is: it wraps every file."""
    if scoped(run):
        return
    author = run_author(run)
    with _record_lock:
        try:
            records = _load_authors(root)
        except ValueError:
            return
        known = records.get(rel, [])
        if author is None:
            if not whole or not known:
                return
            del records[rel]
        elif whole:
            records[rel] = [author]
        elif author in known:
            return
        else:
            records[rel] = [*known, author]
        _atomic_json(
            root / AUTHORS_FILE, {"files": {key: [a.as_json() for a in value] for key, value in records.items()}}
        )
