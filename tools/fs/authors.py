"""Who wrote a workspace file: the non-owners whose text it holds, and the source line naming them."""

from __future__ import annotations

import contextlib
from pathlib import Path

from tools.fs.files import _open_regular
from tools.fs.paths import FsError
from tools.memory import MAX_SCANNED, is_memory_file, note_authors
from tools.provenance import Provenance

UNCHECKED = "unknown (a memory file whose notes could not be checked)"


# --- who wrote it -----------------------------------------------------------------------------------------------


def _authors(provenance: Provenance, rel: str, data: bytes | None) -> list[str]:
    """The non-owners whose text `rel` holds: from tools.provenance, and for a memory file the authors its notes'
    headings name in `data`, its content (None or over MAX_SCANNED: it could not be checked)."""
    authors = provenance.authors(rel)
    if is_memory_file(rel):
        found = note_authors(data) if data is not None and len(data) <= MAX_SCANNED else [UNCHECKED]
        authors = list(dict.fromkeys([*authors, *found]))
    return authors


def _written_by(provenance: Provenance, target: Path, rel: str) -> list[str]:
    """`_authors` of a file `read` shows a window of: a memory file is scanned whole, so that the window cannot
    leave out the heading that names its author."""
    data: bytes | None = None
    if is_memory_file(rel):
        with contextlib.suppress(FsError, OSError), _open_regular(target, rel) as handle:
            data = handle.read(MAX_SCANNED + 1)
    return _authors(provenance, rel, data)


def _source(what: str, authors: list[str]) -> str:
    return f"{what}, written by {', '.join(authors)} (not an owner)"
