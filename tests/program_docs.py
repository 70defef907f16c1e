"""What the installed programs say about their options, from their `--help` and man page (`man -P cat`): the option
spellings they document, each option's description, and whether a description reads like writing files or running
programs. The exec program tables (tools/exec_programs.py) are checked against this, not against themselves."""

from __future__ import annotations

import functools
import os
import re
import subprocess

# English, ASCII hyphens, and lines long enough that an option's spellings stay on one line.
ENV = {**os.environ, "LC_ALL": "C", "MANWIDTH": "250"}

_OPTION = re.compile(r"(?<![\w\[-])(--?[A-Za-z0-9?][\w-]*)")
_NEGATABLE = re.compile(r"--\[no-\]([\w-]+)")  # git's `--[no-]mailmap`: both spellings
_GAP = re.compile(r"\s{2,}")  # between an option's spellings and its description on the same line
_VERSION = re.compile(r"(\d+(?:\.\d+)+)\s*$")

# What a description says when its option writes a file, runs a program, deletes or reads a list of files.
_WRITES = r"\b(?:writes?|prints?|outputs?)\b[^.;|]{0,40}?\b(?:to|into)\s+(?:a\s+)?(?:specific\s+)?file\b"
_DANGER: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("writes a file", re.compile(_WRITES, re.I)),
    ("edits files", re.compile(r"\bin[ -]place\b", re.I)),
    ("runs a program", re.compile(r"\b(?:execute|run)s?\s+(?:the\s+|a\s+)?(?:command|program|shell)\b", re.I)),
    ("runs a program", re.compile(r"\b(?:PROG|PROGRAM|COMMAND|CMD)\b")),  # the metavariable of a program to run
    ("runs a program", re.compile(r"\bexternal\s+[^.]{0,30}?\b(?:helper|program|filter|driver|diff)", re.I)),
    ("runs a program", re.compile(r"\b(?:pager|gpg)\b", re.I)),
    ("reads a file list", re.compile(r"\bnames?\b[^.]{0,40}\b(?:from|in)\s+(?:the\s+)?(?:file|FILE|F)\b")),
    ("reads a file list", re.compile(r"\bstarting points from\b", re.I)),
    ("deletes files", re.compile(r"\bdelete\s+(?:the\s+)?(?:files?|directories)\b", re.I)),
)


def run(argv: list[str]) -> str:
    """What a program prints (stdout and stderr: `git log -h` prints its usage and exits 129)."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, env=ENV, stdin=subprocess.DEVNULL, timeout=60)
    except FileNotFoundError:
        raise AssertionError(f"{argv[0]} is not installed here: the exec tables describe it") from None
    return done.stdout + done.stderr


@functools.cache
def man_page(page: str) -> str:
    """The man page as text, without hyphenation or justification (a phrase stays findable)."""
    try:
        done = subprocess.run(["man", "--nh", "--nj", "-P", "cat", page], capture_output=True, text=True, env=ENV,
                              timeout=60)  # fmt: skip
    except FileNotFoundError:
        raise AssertionError("man is not installed: apt-get install man-db (`make test` installs it)") from None
    if done.returncode != 0 or not done.stdout.strip():
        raise AssertionError(f"no man page {page} here ({done.stderr.strip()}): install man-db and the manual pages")
    return done.stdout


@functools.cache
def documentation(command: str) -> str:
    """The help and man page of `command`: a program ("sort"), a git subcommand ("git log"), or "git" (git's own
    options, before the subcommand)."""
    name, *sub = command.split()
    if name == "git" and sub:
        pages = [f"git-{sub[0]}"] + (["git-log"] if sub == ["show"] else [])  # show is log's builtin: log's options
        return run(["git", sub[0], "-h"]) + "".join(man_page(page) for page in pages)
    if name == "git":
        return man_page("git")
    # The shell's echo (the one the table describes) has no --help; coreutils' echo has the same three options.
    return run(["/bin/echo" if name == "echo" else name, "--help"]) + man_page(name)


def installed_version(program: str) -> tuple[str, tuple[int, ...]]:
    """The first line of `program --version` ("wc (GNU coreutils) 9.1") and the version in it."""
    first = run([program, "--version"]).splitlines()[0]
    found = _VERSION.search(first)
    return first, version(found.group(1) if found else "0")


def version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def documented_options(text: str) -> set[str]:
    """Every option spelling the text names anywhere (`-n`, `--lines`, find's `-name`), `--[no-]x` as both."""
    found = set(_OPTION.findall(text))
    for name in _NEGATABLE.findall(text):
        found |= {f"--{name}", f"--no-{name}"}
    return found


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _entry_end(lines: list[str], start: int, base: int) -> int:
    """Where the description of the entry whose spellings are on line `start - 1` (indented `base`) ends: at the
    first line indented no deeper, or at the next option nearly as shallow (--help indents long-only options more)."""
    end = start
    while end < len(lines):
        line = lines[end]
        if line.strip() and _indent(line) <= base:
            break
        if line.lstrip().startswith("-") and _indent(line) <= base + 4:
            break
        end += 1
    return end


def descriptions(text: str) -> dict[str, list[str]]:
    """Option spelling -> the description of each entry that lists it. An entry is a line starting with option
    spellings (`-o, --output=FILE`), then its description: after two spaces on that line, and on the lines indented
    below it."""
    lines = text.splitlines()
    found: dict[str, list[str]] = {}
    index = 0
    while index < len(lines):
        stripped = lines[index].strip()
        if not stripped.startswith("-"):
            index += 1
            continue
        head, *rest = _GAP.split(stripped, maxsplit=1)
        end = _entry_end(lines, index + 1, _indent(lines[index]))
        described = " ".join([*rest, *(line.strip() for line in lines[index + 1 : end])])
        for option in documented_options(head):
            found.setdefault(option, []).append(described)
        index = end
    return found


def dangerous_wording(description: str) -> str | None:
    """What a description says that reads like writing files, running programs, deleting or reading a file list:
    `writes a file ("write result to FILE")`; None when it says nothing of the kind."""
    for what, pattern in _DANGER:
        found = pattern.search(description)
        if found:
            return f'{what} ("{found.group(0)}")'
    return None


def normalized(text: str) -> str:
    """Whitespace collapsed and case folded: a phrase is found however the page wrapped it."""
    return " ".join(text.split()).casefold()
