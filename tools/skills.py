"""Skills: folders with a SKILL.md (YAML front matter, then Markdown instructions), found in the workspace, in
the configured folders and among Switchboard's own, each offered to a run or reported with why it is not.

The format is the one agentskills.io, OpenClaw, ZeroClaw, nanobot and hermes share, so their skill folders load
unchanged: `name` and `description` are required, `license`, `compatibility`, `metadata` and `allowed-tools` are
read, any other key is tolerated, and OpenClaw's gating (`metadata.openclaw`: `always`, `os`, `requires.bins`,
`requires.anyBins`, `requires.env`, `requires.config`) decides whether the skill can work here.
"""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import json
import os
import re
import shutil
import stat
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from tools.yaml_tree import YamlTree, parse_yaml

__all__ = [
    "SHIPPED_SKILLS",
    "SKILL_FILE",
    "Skill",
    "SkillEntry",
    "SkillProblem",
    "SkillReport",
    "SkillSearch",
    "SkillSource",
    "find_skills",
    "skill_file",
]

SKILL_FILE = "SKILL.md"
SHIPPED_SKILLS = Path(__file__).resolve().parent / "shipped_skills"  # package data (pyproject: package-data)
NAME_CAP = 64
DESCRIPTION_CAP = 1024
FRONT_MATTER_CAP = 64 * 1024  # bytes of a SKILL.md read to find its front matter
# The older names of OpenClaw's metadata key, still found in skills written for it.
GATE_KEYS = ("openclaw", "clawdbot", "moltbot")

SkillSource = Literal["workspace", "dirs", "shipped"]
_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")
_PLATFORMS = {"linux": "linux", "darwin": "darwin", "win32": "win32", "cygwin": "win32"}


class Skill(BaseModel):
    """A skill a run may use: its name, what it is for, and the real path of its SKILL.md (the folder around it
    is what the `read` tool may open, read-only, even outside the workspace)."""

    model_config = ConfigDict(frozen=True)

    name: str
    description: str
    file: str
    source: SkillSource

    @property
    def folder(self) -> str:
        """The skill's folder (real path)."""
        return os.path.dirname(self.file)


@dataclass(frozen=True)
class SkillProblem:
    """Something wrong in a SKILL.md, at a 1-based line of the file."""

    file: str
    line: int
    message: str

    def render(self) -> str:
        return f"{self.file}:{self.line}: {self.message}"


@dataclass(frozen=True)
class SkillEntry:
    """One skill folder found: `skill` when it is offered, else `reason` (and `problems` for a bad front
    matter). `name` is the front matter's, or the folder's when the front matter could not be read."""

    name: str
    source: SkillSource
    file: str
    description: str = ""
    skill: Skill | None = None
    reason: str | None = None
    problems: tuple[SkillProblem, ...] = ()
    needs_programs: bool = False  # whether it is offered depends on programs found on PATH


@dataclass(frozen=True)
class SkillReport:
    """Every skill folder found for an agent, in precedence order, and notes on sources that could not be read."""

    entries: tuple[SkillEntry, ...] = ()
    notes: tuple[str, ...] = ()

    @functools.cached_property
    def eligible(self) -> tuple[Skill, ...]:
        """The skills offered, sorted by name."""
        return tuple(sorted((entry.skill for entry in self.entries if entry.skill), key=lambda skill: skill.name))

    @property
    def needs_programs(self) -> bool:
        """Whether what is offered depends on the programs found on PATH."""
        return any(entry.needs_programs for entry in self.entries)

    def find(self, name: str) -> Skill | None:
        """The offered skill called `name`, if any."""
        return next((skill for skill in self.eligible if skill.name == name), None)


@dataclass(frozen=True)
class SkillSearch:
    """Where to look and what decides eligibility: `folders` in precedence order (a name found earlier wins),
    the agent's allow list (globs; None: all), the environment, a test for bindings.yaml keys, the paths no
    skill folder may hold (the bot's config file and state directory) and the PATH programs are looked up on."""

    folders: Sequence[tuple[SkillSource, Path]]
    allow: Sequence[str] | None = None
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)
    has_config: Callable[[str], bool] = lambda key: False
    protected: Sequence[str] = ()
    path: str | None = None  # None: the environment's PATH


# --- the front matter -------------------------------------------------------------------------------------------


def _name(value: str) -> str:
    if len(value) > NAME_CAP or not _NAME.match(value):
        raise ValueError(
            f"must be lowercase letters, digits and hyphens, starting with a letter or digit, at most {NAME_CAP}"
        )
    return value


def _description(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty: it tells the model when to use the skill")
    if len(value) > DESCRIPTION_CAP:
        raise ValueError(f"must be at most {DESCRIPTION_CAP:,} characters (it is {len(value):,})")
    return value


def _json_text(value: object) -> object:
    """`metadata` written as one line of JSON text, as OpenClaw's own skills often have it."""
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            return json.loads(value)
    return value


def _as_list(value: object) -> object:
    return [value] if isinstance(value, str) else value


Names = Annotated[list[str], BeforeValidator(_as_list)]


class FrontMatter(BaseModel):
    """A SKILL.md's front matter: agentskills.io's fields; other keys (OpenClaw's `homepage`, `user-invocable`
    …) are tolerated."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    name: Annotated[str, AfterValidator(_name)]
    description: Annotated[str, AfterValidator(_description)]
    license: str | None = None
    compatibility: str | None = None
    metadata: Annotated[dict[str, Any] | None, BeforeValidator(_json_text)] = None
    allowed_tools: Annotated[list[str] | None, BeforeValidator(_as_list)] = Field(default=None, alias="allowed-tools")


class Requirements(BaseModel):
    """`metadata.openclaw.requires`: programs on PATH (all of `bins`, one of `anyBins`), environment variables,
    and bindings.yaml keys the skill needs."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    bins: Names = Field(default_factory=list)
    any_bins: Names = Field(default_factory=list, alias="anyBins")
    env: Names = Field(default_factory=list)
    config: Names = Field(default_factory=list)


class Gate(BaseModel):
    """`metadata.openclaw`: what the skill needs to work here; `always` offers it regardless."""

    model_config = ConfigDict(extra="ignore")

    always: bool = False
    os: Names = Field(default_factory=list)
    requires: Requirements = Field(default_factory=Requirements)


@dataclass(frozen=True)
class _Parsed:
    front: FrontMatter
    gate: Gate


def _problems(error: ValidationError, tree: YamlTree, file: str, at: tuple[str | int, ...] = ()) -> list[SkillProblem]:
    """A pydantic error as problems at their lines."""
    found = []
    for detail in error.errors(include_url=False, include_input=False):
        loc = (*at, *detail["loc"])
        where = ".".join(str(part) for part in loc)
        kind = detail["type"]
        if kind == "missing":
            message = "required key is missing"
        elif kind == "value_error":
            message = str((detail.get("ctx") or {}).get("error", detail["msg"]))
        else:
            message = detail["msg"][:1].lower() + detail["msg"][1:]
        found.append(SkillProblem(file, tree.line_of(loc), f"{where}: {message}" if where else message))
    return found


def parse_skill(text: str, file: str) -> _Parsed | list[SkillProblem]:
    """A SKILL.md's front matter, checked; or what is wrong with it, each at its line of `file`."""
    lines = text.split("\n")
    if lines[0].lstrip("\ufeff").rstrip() != "---":
        return [SkillProblem(file, 1, "no front matter: SKILL.md must start with a `---` line, then name, description")]
    end = next((index for index in range(1, len(lines)) if lines[index].rstrip() in ("---", "...")), None)
    if end is None:
        return [SkillProblem(file, 1, "the front matter opened here is never closed by a `---` line")]
    tree = parse_yaml("\n".join(["---", *lines[1:end]]))  # with its opening line, so that lines are the file's
    if tree.problems:
        return [SkillProblem(file, problem.line, problem.message) for problem in tree.problems]
    if not isinstance(tree.data, dict):
        return [SkillProblem(file, 2, "the front matter must be keys and values (name: …, description: …)")]
    try:
        front = FrontMatter.model_validate(tree.data)
    except ValidationError as error:
        return _problems(error, tree, file)
    metadata = front.metadata or {}
    key = next((key for key in GATE_KEYS if key in metadata), None)
    try:
        gate = Gate.model_validate(metadata[key] or {}) if key else Gate()
    except ValidationError as error:
        return _problems(error, tree, file, ("metadata", key or ""))
    return _Parsed(front, gate)


_cache: dict[str, tuple[tuple[int, int, int], _Parsed | list[SkillProblem]]] = {}
_cache_lock = threading.Lock()


def _read_skill(file: str) -> _Parsed | list[SkillProblem]:
    """parse_skill of the file, cached by its inode, size and change time: a run re-reads only what changed."""
    fd = os.open(file, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO must not hang the search
    with open(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return [SkillProblem(file, 1, "SKILL.md is not a regular file")]
        stamp = (info.st_ino, info.st_size, info.st_mtime_ns)
        with _cache_lock:
            cached = _cache.get(file)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        text = handle.read(FRONT_MATTER_CAP).decode("utf-8", errors="replace")
    parsed = parse_skill(text, file)
    with _cache_lock:
        _cache[file] = (stamp, parsed)
    return parsed


# --- eligibility ------------------------------------------------------------------------------------------------


def _plural(word: str, items: Sequence[str]) -> str:
    return f"{word}{'s' if len(items) != 1 else ''} {', '.join(items)}"


def _missing(gate: Gate, search: SkillSearch) -> list[str]:
    """What the skill needs that is not here, one phrase each (empty: it can work)."""
    if gate.always:
        return []
    needs = gate.requires
    path = search.path if search.path is not None else search.environ.get("PATH", os.defpath)
    missing: list[str] = []
    platform = _PLATFORMS.get(sys.platform, sys.platform)
    if gate.os and platform not in gate.os:
        missing.append(f"runs only on {', '.join(gate.os)} (this is {platform})")
    if bins := [name for name in needs.bins if shutil.which(name, path=path) is None]:
        missing.append(f"needs the {_plural('program', bins)} on PATH")
    if needs.any_bins and not any(shutil.which(name, path=path) for name in needs.any_bins):
        missing.append(f"needs one of the programs {', '.join(needs.any_bins)} on PATH")
    if env := [name for name in needs.env if not search.environ.get(name)]:
        missing.append(f"needs the environment {_plural('variable', env)}")
    if keys := [key for key in needs.config if not search.has_config(key)]:
        missing.append(f"needs {', '.join(keys)} set in bindings.yaml")
    return missing


def _entry(source: SkillSource, root: str, folder: str, seen: dict[str, SkillEntry], search: SkillSearch) -> SkillEntry:
    """The skill in `folder` (a folder of `root` holding a SKILL.md), offered or with why not."""
    real = os.path.realpath(folder)
    file = os.path.realpath(os.path.join(real, SKILL_FILE))
    base = SkillEntry(os.path.basename(folder), source, os.path.join(folder, SKILL_FILE))
    if not (Path(real).is_relative_to(root) and Path(file).is_relative_to(real)):
        return replace(base, reason=f"leads outside {root} through a symbolic link")
    if any(Path(path).is_relative_to(real) for path in search.protected):
        return replace(base, reason="the folder holds the bot's config file or state directory")
    try:
        parsed = _read_skill(file)
    except OSError as error:
        return replace(base, reason=f"cannot be read: {error.strerror or type(error).__name__}")
    base = replace(base, file=file)
    if isinstance(parsed, list):
        return replace(base, reason="bad front matter", problems=tuple(parsed))
    front = parsed.front
    entry = replace(base, name=front.name, description=front.description)
    if front.name in seen:
        earlier = seen[front.name]
        return replace(entry, reason=f"shadowed by the {earlier.source} skill {earlier.file}")
    seen[front.name] = entry
    if search.allow is not None and not any(fnmatch.fnmatchcase(front.name, glob) for glob in search.allow):
        return replace(entry, reason="not in the agent's allow list (agents[].skills)")
    needs = parsed.gate.requires
    if not parsed.gate.always and (needs.bins or needs.any_bins):
        entry = replace(entry, needs_programs=True)
    if missing := _missing(parsed.gate, search):
        return replace(entry, reason="; ".join(missing))
    return replace(entry, skill=Skill(name=front.name, description=front.description, file=file, source=source))


def find_skills(search: SkillSearch) -> SkillReport:
    """Every skill folder (a folder holding a SKILL.md, one level down) of each source, in precedence order;
    hidden folders are skipped. Reads folders and files: call it off the event loop."""
    entries: list[SkillEntry] = []
    notes: list[str] = []
    seen: dict[str, SkillEntry] = {}
    for source, folder in search.folders:
        root = os.path.realpath(folder)
        try:
            with os.scandir(root) as listing:
                names = sorted(entry.name for entry in listing if not entry.name.startswith("."))
        except FileNotFoundError:
            if source != "workspace":  # a workspace without skills/ is the usual case
                notes.append(f"{source}: {folder} does not exist")
            continue
        except OSError as error:
            notes.append(f"{source}: {folder} cannot be read ({error.strerror or type(error).__name__})")
            continue
        for name in names:
            candidate = os.path.join(folder, name)
            if os.path.isfile(os.path.join(candidate, SKILL_FILE)):
                entries.append(_entry(source, root, candidate, seen, search))
    return SkillReport(tuple(entries), tuple(notes))


# --- reading inside a skill -------------------------------------------------------------------------------------


def skill_file(skills: Sequence[Skill], user_path: str) -> Path | None:
    """The real file an absolute `user_path` names inside one of `skills`' folders, every link followed; None
    when it lies in none of them (a sibling of a skill folder, or a link that leads out of one)."""
    if "\x00" in user_path or not os.path.isabs(user_path):
        return None
    real = Path(os.path.realpath(user_path))
    return real if any(real.is_relative_to(skill.folder) for skill in skills) else None
