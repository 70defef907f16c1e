"""Exec policy evaluation: judge a classified command against the settings, the stored entries and the workspace, and
decide allow, ask or deny, with the reason and what "Allow always" would store."""

from __future__ import annotations

import fnmatch
import hashlib
import os
import re
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel

from tools.exec_policy.arguments import files, program_use
from tools.exec_policy.classify import Cmd, Parsed, basename, interpreter, parse
from tools.exec_policy.settings import AllowEntry, AllowRule, ExecSettings
from tools.exec_policy.tables import NEVER_STORE, NEVER_STORE_REAL, SHELLS
from tools.exec_programs import (
    BUILD_TOOLS,
    GIT_DRIVER_ATTRIBUTES,
    HARMLESS_GIT_CONFIG,
    PIP_BUILDS,
    PIP_NAMES,
    PROGRAMS,
    STANDARD_STREAMS,
    SYSTEM_TREES,
    ValueKind,
)
from tools.shell_words import Risk, short


class Verdict(BaseModel):
    decision: Literal["allow", "ask", "deny"]
    reason: str
    """One sentence for the approval message, or for the model when denied."""
    always: list[AllowEntry]
    """What "Allow always" would store for this command; empty means nothing is storable."""
    offer_always: bool
    """Whether to show an "Allow always" button: only when asking, not under ask: always, and something is storable."""


_TEXT_LIMIT = 120


# --- Files ----------------------------------------------------------------------------------------------------------


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _file_problem(value: str, cwd: str | None, root: str | None) -> str | None:
    """Where `value` is when reading it cannot run unasked ("outside the workspace", "under /proc"...), else None."""
    if value == "-" or value in STANDARD_STREAMS:
        return None
    if cwd is None or root is None:
        return "in a directory that is not known"
    joined = os.path.join(cwd, value)
    for path in (os.path.normpath(joined), os.path.realpath(joined)):
        for tree in SYSTEM_TREES:
            if _under(path, tree):
                return f"under {tree}"
    if not _under(os.path.realpath(joined), root):
        return "outside the workspace"
    return None


def _looks_like_path(value: str) -> bool:
    return value.startswith((".", "/", "~")) or "/" in value


# --- Values ---------------------------------------------------------------------------------------------------------

_NUMBER = re.compile(r"[+-]?[0-9][0-9.]*[A-Za-z%]{0,3}")
_FIELD_LIST = re.compile(r"[0-9,-]+")


def _value_problem(option: str, kind: ValueKind, value: str, cwd: str | None, root: str | None) -> str | None:
    shown = f"{option} {short(value)}" if option else short(value)
    if kind == "number" and not _NUMBER.fullmatch(value):
        return f"{shown} is not a number"
    if kind == "fields" and not _FIELD_LIST.fullmatch(value):
        return f"{shown} is not a list of fields"
    if kind == "format" and "%G" in value:
        return f"{shown} asks git to verify signatures, which runs gpg"
    if kind == "read" or (kind == "gitarg" and _looks_like_path(value)):
        where = _file_problem(value, cwd, root)
        if where is not None:
            return f"{option} reads {short(value)}, which is {where}" if option else f"{short(value)} is {where}"
    return None


# --- Context --------------------------------------------------------------------------------------------------------


@dataclass
class _Context:
    settings: ExecSettings
    stored: Sequence[AllowEntry]
    resolve: Callable[[str], str | None]
    root: str | None  # the workspace, resolved
    cwd: str | None  # where this segment runs, None once a `cd` made it unknown


def _cd_target(cmd: Cmd, cwd: str | None) -> str | None:
    """Where `cd DIR` leaves the shell: DIR resolved when literal, else unknown (None)."""
    args = cmd.argv[1:]
    if cwd is None or len(args) != 1 or args[0].startswith("-") or cmd.all_risks():
        return None
    return os.path.realpath(os.path.join(cwd, args[0]))


def _walk(cmd: Cmd | None) -> list[Cmd]:
    levels: list[Cmd] = []
    while cmd is not None:
        levels.append(cmd)
        cmd = cmd.inner
    return levels


# --- Programs that load code from the working tree ------------------------------------------------------------------


def _script_of(cmd: Cmd, ctx: _Context) -> str | None:
    """The file a command runs as code: an interpreter's or shell's script (no options before it), or the program
    itself when it is a file in the workspace. None for any other command."""
    name, args = basename(cmd.argv[0]), cmd.argv[1:]
    if name in SHELLS or (interpreter(name) not in (None, "deno") and name not in ("bun", "bunx")):
        if not args or args[0].startswith("-") or ctx.cwd is None:
            return None
        return os.path.realpath(os.path.join(ctx.cwd, args[0]))
    resolved = ctx.resolve(cmd.argv[0])
    if resolved is not None and ctx.root is not None and _under(os.path.realpath(resolved), ctx.root):
        return os.path.realpath(resolved)
    return None


def _sha256(path: str) -> str | None:
    try:
        with open(path, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()
    except OSError:
        return None


def _loads_code(cmd: Cmd) -> str | None:
    """Why a program runs code that is not on the command line (build tools, interpreters), or None."""
    name, args = basename(cmd.argv[0]), cmd.argv[1:]
    if name in BUILD_TOOLS:
        return f"{name} {BUILD_TOOLS[name]}"
    if name in PIP_NAMES and any(arg in PIP_BUILDS for arg in args):
        return f"{name} install runs the package's build code"
    family = interpreter(name)
    if family == "deno" or name in ("bun", "bunx"):
        return f"{name} runs the project's scripts"
    if family is not None or name in SHELLS:
        return f"{name} runs code that is not on the command line"
    return None


_GIT_KEY = re.compile(r"[A-Za-z][A-Za-z0-9-]*")
_GIT_SECTION = re.compile(r'\[\s*([A-Za-z0-9.-]+)(?:\s+"((?:[^"\\]|\\.)*)")?\s*\]\s*(?:[#;].*)?')
_GIT_ATTRIBUTE = re.compile(r"(?:^|\s)(?:" + "|".join(GIT_DRIVER_ATTRIBUTES) + r")=")


def _git_config_problem(path: str) -> str | None:
    """The first key of a .git/config that is not on the harmless list (or a line that cannot be read), or None."""
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError):
        return ".git/config cannot be read"
    section: str | None = None
    for line in lines:
        text = line.strip()
        if not text or text[0] in "#;":
            continue
        if text.endswith("\\"):
            return ".git/config has a continued line"
        if text.startswith("["):
            match = _GIT_SECTION.fullmatch(text)
            if match is None:
                return f".git/config has a section this policy cannot read ({short(text)})"
            name, sub = match.group(1).lower(), match.group(2)
            if name in ("include", "includeif") or name.startswith("includeif."):
                return ".git/config includes another file"
            section = name if sub is None else f"{name}.{sub}"
            continue
        key = text.split("=", 1)[0].strip()
        if section is None or not _GIT_KEY.fullmatch(key):
            return f".git/config has a line this policy cannot read ({short(text)})"
        full = f"{section}.{key.lower()}"
        if not any(fnmatch.fnmatchcase(full, pattern) for pattern in HARMLESS_GIT_CONFIG):
            return f".git/config sets {full}, which is not on the list of harmless git settings"
    return None


def _git_repository(start: str) -> tuple[str | None, str | None]:
    """The work tree and .git directory git would find from `start`, or a reason it cannot be judged."""
    here = start
    while True:
        dot_git = os.path.join(here, ".git")
        if os.path.lexists(dot_git):
            if os.path.islink(dot_git) or not os.path.isdir(dot_git):
                return None, f"{dot_git} is not a plain directory (a gitdir: file or a link)"
            return here, None
        if all(os.path.exists(os.path.join(here, part)) for part in ("HEAD", "objects", "refs")):
            return None, f"{here} looks like a bare repository"
        parent = os.path.dirname(here)
        if parent == here:
            return None, None
        here = parent


def _git_problem(ctx: _Context) -> str | None:
    """Why git could load code or configuration from the repository it would use here, or None."""
    if ctx.cwd is None or ctx.root is None:
        return "the directory is not known, so the repository cannot be checked"
    tree, problem = _git_repository(ctx.cwd)
    if problem is not None or tree is None:
        return problem
    if not _under(os.path.realpath(tree), ctx.root):
        return f"the repository at {tree} is outside the workspace"
    git = os.path.join(tree, ".git")
    problem = _git_config_problem(os.path.join(git, "config"))
    if problem is not None:
        return problem
    for extra, why in (
        ("commondir", "the repository shares another repository's configuration"),
        ("config.worktree", "the repository has a worktree configuration"),
        ("modules", "the repository has submodules"),
    ):
        if os.path.lexists(os.path.join(git, extra)):
            return why
    if os.path.lexists(os.path.join(tree, ".gitmodules")):
        return "the repository has submodules"
    hooks = os.path.join(git, "hooks")
    if os.path.isdir(hooks) and any(not entry.endswith(".sample") for entry in os.listdir(hooks)):
        return "the repository has hooks"
    for attributes in (os.path.join(tree, ".gitattributes"), os.path.join(git, "info", "attributes")):
        try:
            with open(attributes, encoding="utf-8", errors="replace") as handle:
                if _GIT_ATTRIBUTE.search(handle.read()):
                    return f"{os.path.relpath(attributes, tree)} sets a filter, diff or merge driver"
        except FileNotFoundError:
            continue
        except OSError:
            return f"{os.path.relpath(attributes, tree)} cannot be read"
    return None


# --- Protected paths ------------------------------------------------------------------------------------------------


def _protected_problem(parsed: Parsed, command: str, protected: Sequence[str], cwd: str | None) -> str | None:
    """The protected path a command names, by its text or by a word that resolves to it, or None."""
    paths = [p for raw in protected for p in {os.path.normpath(raw), os.path.realpath(raw)}]
    for path in paths:
        if path in command:
            return path
    dirs = [cwd] if cwd is not None else []
    for cmd in parsed.segments:
        words = [w for level in _walk(cmd) for w in level.argv] + [r.target.text for r in cmd.redirects]
        for word in words:
            for text in [word, *word.split("=")[1:]]:
                found = next((p for p in paths if p in text), None)
                found = found or _resolves_into(text, dirs, paths)
                if found is not None:
                    return found
        target = _cd_target(cmd, dirs[-1] if dirs else None) if cmd.argv[:1] in (["cd"], ["pushd"]) else None
        if target is not None:
            dirs.append(target)
    return None


def _resolves_into(text: str, dirs: list[str], paths: list[str]) -> str | None:
    if not text:
        return None
    for base in dirs:
        joined = os.path.join(base, text)
        for candidate in (os.path.normpath(joined), os.path.realpath(joined)):
            for path in paths:
                if _under(candidate, path):
                    return path
    return None


# --- Evaluation -----------------------------------------------------------------------------------------------------


def _resolve(name: str, path: str | None, cwd: str | None) -> str | None:
    """The absolute program a command name runs: PATH lookup for bare names, the file itself for paths."""
    if not name:
        return None
    if "/" in name:
        # `/a/../b` may not be `/b` when `/a` is a link: such spellings resolve to nothing.
        if ".." in name.split("/"):
            return None
        if os.path.isabs(name):
            candidate = os.path.normpath(name)
        elif cwd is not None and os.path.isabs(cwd):
            candidate = os.path.normpath(os.path.join(cwd, name))
        else:
            return None
        return candidate if os.path.isfile(candidate) and os.access(candidate, os.X_OK) else None
    found = shutil.which(name, path=path)
    if found is None or not os.path.isabs(found):
        return None
    return os.path.normpath(found)


def _rule_matches(rule: AllowRule, args: Sequence[str]) -> bool:
    """Each glob of `rule.args` matches one whole argument; a final `**` matches whatever arguments remain."""
    globs = rule.args.split()
    rest = bool(globs) and globs[-1] == "**"
    if rest:
        globs = globs[:-1]
    if len(args) < len(globs) or (not rest and len(args) != len(globs)):
        return False
    return all(fnmatch.fnmatchcase(arg, glob) for arg, glob in zip(args, globs, strict=False))


def _config_allows(cmd: Cmd, ctx: _Context) -> bool:
    name, args = cmd.argv[0], cmd.argv[1:]
    resolved = ctx.resolve(name)
    for rule in ctx.settings.allowlist:
        if "/" in rule.executable:  # an absolute path: the program the name resolves to
            same = resolved is not None and os.path.normpath(rule.executable) == resolved
        else:  # a bare name: only that bare name, looked up on PATH
            same = "/" not in name and rule.executable == name
        if same and _rule_matches(rule, args):
            return True
    return False


def _stored_allows(cmd: Cmd, ctx: _Context, script: str | None) -> bool:
    resolved = ctx.resolve(cmd.argv[0])
    if resolved is None:
        return False
    matching = [e for e in ctx.stored if e.executable == resolved and e.args == tuple(cmd.argv[1:])]
    if not matching:
        return False
    digest = _sha256(script) if script is not None else None
    if script is not None and digest is None:
        return False
    return any(entry.sha256 == digest for entry in matching)


def _segment_problem(cmd: Cmd, ctx: _Context) -> str | None:
    """Why one plain segment (no risks) may not run unasked, or None when it may."""
    name = basename(cmd.argv[0])
    script = _script_of(cmd, ctx)
    if script is not None:
        if _stored_allows(cmd, ctx, script):
            return None
        shown = os.path.relpath(script, ctx.root) if ctx.root and _under(script, ctx.root) else script
        return f"{_quote(cmd.text)} needs approval (it runs {short(shown)}, code from the working tree)"
    loads = _loads_code(cmd)
    if loads is not None:
        return f"{_quote(cmd.text)} needs approval ({loads})"
    if name == "git" and "/" not in cmd.argv[0]:
        problem = _git_problem(ctx)
        if problem is not None:
            return f"{_quote(cmd.text)} needs approval ({problem})"
    if _stored_allows(cmd, ctx, None):
        return None
    spec = PROGRAMS.get(name)
    if spec is None:
        return None if _config_allows(cmd, ctx) else f"{_quote(cmd.text)} is not on the allowlist"
    use = program_use(name, spec, cmd.argv[1:])
    problem = use.problem or next(
        (p for option, kind, value in use.values if (p := _value_problem(option, kind, value, ctx.cwd, ctx.root))),
        None,
    )
    if problem is not None:
        return f"{_quote(cmd.text)} needs approval ({problem})"
    if "/" not in cmd.argv[0] and name in ctx.settings.safe_bins and not files(use):
        return None
    if _config_allows(cmd, ctx):
        return None
    if name in ctx.settings.safe_bins:
        return f"{_quote(cmd.text)} is not on the allowlist (safe bins run unasked only when they read standard input)"
    return f"{_quote(cmd.text)} is not on the allowlist"


def _risks_here(cmd: Cmd, ctx: _Context) -> list[Risk]:
    """The segment's risks, less reads from files that turn out to be inside the workspace."""
    kept: list[Risk] = []
    for risk in cmd.all_risks():
        if risk.kind == "read" and risk.path is not None:
            where = _file_problem(risk.path, ctx.cwd, ctx.root)
            if where is None:
                continue
            risk = Risk(f"{risk.text}, which is {where}")
        kept.append(risk)
    return kept


def _cwd_after(cmd: Cmd, cwd: str | None) -> str | None:
    """Where the shell is after `cmd`: `cd`/`pushd` move it (see _cd_target), `popd` leaves it unknown."""
    if cmd.argv[:1] in (["cd"], ["pushd"], ["popd"]):
        return _cd_target(cmd, cwd) if cmd.argv[0] != "popd" else None
    return cwd


def _problem(parsed: Parsed, ctx: _Context) -> str | None:
    """Why the command may not run unasked (the first risk, else the first segment not allowed), or None."""
    if parsed.error is not None:
        return f"the command could not be read ({parsed.error})"
    start = ctx.cwd
    for cmd in parsed.segments:
        risks = _risks_here(cmd, ctx)
        if risks:
            return f"{_quote(cmd.text)} needs approval ({risks[0].text})"
        ctx.cwd = _cwd_after(cmd, ctx.cwd)
    if parsed.line_risks:
        return f"the command needs approval ({parsed.line_risks[0].text})"
    ctx.cwd = start
    for cmd in parsed.segments:
        if cmd.argv:
            problem = _segment_problem(cmd, ctx)
            if problem is not None:
                return problem
        ctx.cwd = _cwd_after(cmd, ctx.cwd)
    return None


def _storable(cmd: Cmd, ctx: _Context) -> AllowEntry | None:
    """What "Allow always" stores for one segment: the innermost command, exactly, if it is plain and known;
    for a script, with the SHA-256 of its content."""
    while cmd.marker is not None:
        if cmd.privileged or cmd.marker.kind != "wrapper" or cmd.own or cmd.inner is None:
            return None
        cmd = cmd.inner
    if cmd.privileged or cmd.own or not cmd.argv:
        return None
    name = basename(cmd.argv[0])
    script = _script_of(cmd, ctx)
    digest = _sha256(script) if script is not None else None
    if script is not None and digest is None:
        return None
    if script is None and (name in NEVER_STORE or _loads_code(cmd) is not None):
        return None
    resolved = ctx.resolve(cmd.argv[0])
    if resolved is None or (script is None and basename(resolved) in NEVER_STORE):
        return None
    real = basename(os.path.realpath(resolved))
    if real in NEVER_STORE_REAL and not (script is not None and name in SHELLS and real in SHELLS):
        return None
    return AllowEntry(executable=resolved, args=tuple(cmd.argv[1:]), sha256=digest)


def _always(parsed: Parsed, ctx: _Context) -> list[AllowEntry]:
    if parsed.error is not None:
        return []
    risks = parsed.line_risks + [risk for cmd in parsed.segments for risk in cmd.all_risks()]
    if any(risk.kind == "subst" for risk in risks):
        return []
    entries: list[AllowEntry] = []
    for cmd in parsed.segments:
        entry = _storable(cmd, ctx)
        if entry is not None and entry not in entries:
            entries.append(entry)
    return entries


def _quote(text: str) -> str:
    text = " ".join(text.split())
    return f"`{short(text, _TEXT_LIMIT)}`"


def evaluate(
    command: str,
    settings: ExecSettings,
    stored: Sequence[AllowEntry] = (),
    *,
    path: str | None = None,
    cwd: str | None = None,
    protected: Sequence[str] = (),
) -> Verdict:
    """Decide whether `command` runs, asks a human first, or is refused, and what "Allow always" would store.

    `path` is the PATH used to resolve program names (None: the environment's). `cwd` is the agent's workspace, where
    the command runs: file arguments must stay inside it; without it a relative program path such as `./run.sh`
    resolves to nothing and every file argument asks. `protected` holds absolute paths (the bot's config file and
    state directory): a command naming one, or a path inside one, is denied whatever the settings.
    """
    if settings.security == "deny":
        return Verdict(
            decision="deny",
            reason="Exec is disabled for this agent (exec.security: deny).",
            always=[],
            offer_always=False,
        )
    parsed = parse(command)
    touched = _protected_problem(parsed, command, protected, cwd)
    if touched is not None:
        reason = f"Denied: the command touches the bot's own configuration or state ({touched})."
        return Verdict(decision="deny", reason=reason, always=[], offer_always=False)
    cache: dict[str, str | None] = {}

    def resolve(name: str) -> str | None:
        if name not in cache:
            cache[name] = _resolve(name, path, cwd)
        return cache[name]

    root = os.path.realpath(cwd) if cwd is not None and os.path.isabs(cwd) else None
    ctx = _Context(settings, stored, resolve, root, root)
    always = _always(parsed, ctx)
    decision: Literal["allow", "ask", "deny"]
    if settings.security == "full":
        if settings.ask == "always":
            decision, reason = "ask", "This agent asks before every command (exec.ask: always)."
        else:
            decision, reason = "allow", "This agent may run any command (exec.security: full)."
    else:
        problem = _problem(parsed, ctx)
        if problem is None:
            if settings.ask == "always":
                decision = "ask"
                reason = "The command is on the allowlist, but this agent asks before every command (exec.ask: always)."
            else:
                decision, reason = "allow", "Every part of the command is on the allowlist."
        elif settings.ask == "off":
            decision = "deny"
            reason = f"Denied: {problem}, and this agent does not ask for approval (exec.ask: off)."
        else:
            decision, reason = "ask", f"{problem[0].upper()}{problem[1:]}."
    offer = bool(always) and settings.ask != "always" and decision == "ask"
    return Verdict(decision=decision, reason=reason, always=always, offer_always=offer)
