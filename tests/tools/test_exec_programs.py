"""Exec program tables: every listed option is exercised, harmless ones run, risky ones ask, bad values ask."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from tools.exec_policy import AllowRule, ExecSettings, evaluate
from tools.exec_programs import (
    BUILD_TOOLS,
    GIT_GLOBAL,
    GIT_SUBCOMMANDS,
    HARMLESS_GIT_CONFIG,
    HARMLESS_KINDS,
    NEUTRAL_ENV,
    PROGRAMS,
    STANDARD_STREAMS,
    SYSTEM_TREES,
    Opt,
    Program,
)

GOOD = {"number": "5", "fields": "1,3", "text": "x", "format": "%h %s", "read": "notes.txt", "gitarg": "HEAD"}
BAD = {"number": "lots", "fields": "a-b", "format": "%G?", "read": "/proc/self/environ", "gitarg": "/etc/passwd"}


def harmless(opt: Opt) -> bool:
    return not opt.risk and (opt.kind is None or opt.kind in HARMLESS_KINDS)


def entries() -> list[tuple[str, str, Program, str, Opt]]:
    """(command prefix, program name, table, option, entry) for every option of every table."""
    rows = [(name, name, spec, option, opt) for name, spec in PROGRAMS.items() if name != "git" for option, opt in
            spec.options.items()]  # fmt: skip
    rows += [(f"git {sub}", f"git {sub}", spec, option, opt) for sub, spec in GIT_SUBCOMMANDS.items()
             for option, opt in spec.options.items()]  # fmt: skip
    return rows


ENTRIES = entries()


def words(prefix: str, option: str, opt: Opt, value: str) -> list[str]:
    """A command line using one option (with `value` when it takes one) and whatever operand the program needs."""
    head = prefix.split()
    if prefix == "find":
        head.append(".")
    use = [option] if opt.arg != "required" else [option, value]
    if prefix == "grep" and option not in ("-e", "--regexp", "-f", "--file"):
        use.append("pattern")
    return head + use


def command(parts: list[str]) -> str:
    return " ".join(shlex.quote(part) for part in parts)


def allowing_everything() -> ExecSettings:
    names = [*PROGRAMS, "git"]
    return ExecSettings(allowlist=[AllowRule(executable=name) for name in names])


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    folder = tmp_path / "ws"
    folder.mkdir()
    (folder / "notes.txt").write_text("hello\n")
    return folder


@pytest.mark.parametrize(
    ("prefix", "option", "opt"),
    [pytest.param(prefix, option, opt, id=f"{label} {option}") for prefix, label, _, option, opt in ENTRIES
     if harmless(opt)],
)  # fmt: skip
def test_each_harmless_option_runs_unasked_for_an_allowlisted_program(
    prefix: str, option: str, opt: Opt, ws: Path
) -> None:
    line = command(words(prefix, option, opt, GOOD.get(opt.kind or "", "x")))

    verdict = evaluate(line, allowing_everything(), cwd=str(ws))

    assert verdict.decision == "allow", (line, verdict.reason)


@pytest.mark.parametrize(
    ("prefix", "option", "opt"),
    [pytest.param(prefix, option, opt, id=f"{label} {option}") for prefix, label, _, option, opt in ENTRIES
     if not harmless(opt)],
)  # fmt: skip
def test_each_risky_option_asks_even_when_the_program_is_allowlisted(
    prefix: str, option: str, opt: Opt, ws: Path
) -> None:
    line = command(words(prefix, option, opt, "notes.txt"))

    verdict = evaluate(line, allowing_everything(), cwd=str(ws))

    assert verdict.decision == "ask", line
    assert f"({option} " in verdict.reason


@pytest.mark.parametrize(
    ("prefix", "option", "opt"),
    [pytest.param(prefix, option, opt, id=f"{label} {option}={BAD[opt.kind or '']}") for prefix, label, _, option, opt
     in ENTRIES if harmless(opt) and opt.arg == "required" and opt.kind in BAD],
)  # fmt: skip
def test_each_value_kind_rejects_a_bad_value(prefix: str, option: str, opt: Opt, ws: Path) -> None:
    line = command(words(prefix, option, opt, BAD[opt.kind or ""]))

    verdict = evaluate(line, allowing_everything(), cwd=str(ws))

    assert verdict.decision == "ask", line
    assert option in verdict.reason


def shortest_prefix(option: str, spec: Program) -> str | None:
    """The shortest abbreviation getopt_long expands to `option` (None when only the full name is unique)."""
    longs = [name for name in spec.options if name.startswith("--")]
    for end in range(3, len(option)):
        prefix = option[:end]
        if [name for name in longs if name.startswith(prefix)] == [option]:
            return prefix
    return None


ABBREVIATED = [
    (name, spec, option, opt, prefix)
    for name, spec in PROGRAMS.items()
    if spec.abbreviations
    for option, opt in spec.options.items()
    if option.startswith("--") and (prefix := shortest_prefix(option, spec)) is not None
]


@pytest.mark.parametrize(
    ("name", "option", "opt", "prefix"),
    [pytest.param(name, option, opt, prefix, id=f"{name} {prefix}") for name, _, option, opt, prefix in ABBREVIATED],
)
def test_each_long_option_abbreviated_is_judged_as_the_full_option(
    name: str, option: str, opt: Opt, prefix: str, ws: Path
) -> None:
    line = command(words(name, prefix, opt, GOOD.get(opt.kind or "", "x") if harmless(opt) else "notes.txt"))

    verdict = evaluate(line, allowing_everything(), cwd=str(ws))

    assert verdict.decision == ("allow" if harmless(opt) else "ask"), (line, verdict.reason)


@pytest.mark.parametrize(
    ("name", "prefix"),
    [(name, "--" + common) for name, spec in PROGRAMS.items() if spec.abbreviations
     for common in ("f", "s", "c", "n", "d") if len([o for o in spec.options if o.startswith("--" + common)]) > 1],
)  # fmt: skip
def test_an_ambiguous_abbreviation_asks(name: str, prefix: str, ws: Path) -> None:
    verdict = evaluate(f"{name} {prefix}", allowing_everything(), cwd=str(ws))

    assert verdict.decision == "ask"
    assert "ambiguous" in verdict.reason


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_an_unknown_option_asks_for_each_program(name: str, ws: Path) -> None:
    if name == "echo":  # the builtin prints every word it does not know
        assert evaluate("echo --zzz", allowing_everything(), cwd=str(ws)).decision == "allow"
        return
    unknown = "-zzz-unknown" if name == "find" else "--zzz-unknown"
    line = f"git status {unknown}" if name == "git" else f"{name} {unknown}"

    verdict = evaluate(line, allowing_everything(), cwd=str(ws))

    assert verdict.decision == "ask"
    assert "not an option known" in verdict.reason or "not an expression known" in verdict.reason


@pytest.mark.parametrize(("option", "opt"), list(GIT_GLOBAL.items()))
def test_each_git_global_option_is_judged(option: str, opt: Opt, ws: Path) -> None:
    parts = ["git", option, *(["x"] if opt.arg == "required" else []), "status"]

    verdict = evaluate(command(parts), allowing_everything(), cwd=str(ws))

    assert verdict.decision == ("allow" if harmless(opt) else "ask"), verdict.reason


@pytest.mark.parametrize("name", sorted(BUILD_TOOLS))
def test_each_build_tool_asks_even_when_allowlisted_and_is_never_stored(name: str, ws: Path) -> None:
    settings = ExecSettings(allowlist=[AllowRule(executable=name)])

    verdict = evaluate(f"{name} build", settings, cwd=str(ws))

    assert verdict.decision == "ask"
    assert BUILD_TOOLS[name] in verdict.reason
    assert verdict.always == []


def git_repo(ws: Path, config: str) -> None:
    (ws / ".git" / "hooks").mkdir(parents=True)
    (ws / ".git" / "config").write_text(config)


@pytest.mark.parametrize("pattern", HARMLESS_GIT_CONFIG)
def test_each_harmless_git_setting_lets_git_status_run(pattern: str, ws: Path) -> None:
    section, _, key = pattern.rpartition(".")
    header = f'[{section.split(".")[0]} "origin"]' if "*" in section else f"[{section}]"
    git_repo(ws, f"{header}\n\t{key} = x\n")

    verdict = evaluate("git status", allowing_everything(), cwd=str(ws))

    assert verdict.decision == "allow", verdict.reason


@pytest.mark.parametrize("tree", SYSTEM_TREES)
def test_each_system_tree_is_never_read_unasked(tree: str, ws: Path) -> None:
    verdict = evaluate(f"cat {tree}/x", allowing_everything(), cwd=str(ws))

    assert verdict.decision == "ask"
    assert f"under {tree}" in verdict.reason


@pytest.mark.parametrize("stream", sorted(STANDARD_STREAMS))
def test_each_standard_stream_may_be_read(stream: str, ws: Path) -> None:
    assert evaluate(f"cat {stream}", allowing_everything(), cwd=str(ws)).decision == "allow"


@pytest.mark.parametrize(
    ("key", "value"),
    [("GIT_CONFIG_GLOBAL", "/dev/null"), ("GIT_CONFIG_NOSYSTEM", "1"), ("GIT_PAGER", "cat"), ("PAGER", "cat"),
     ("GIT_TERMINAL_PROMPT", "0"), ("GIT_OPTIONAL_LOCKS", "0")],
)  # fmt: skip
def test_the_neutral_environment_stops_git_loading_from_the_user(key: str, value: str) -> None:
    assert NEUTRAL_ENV[key] == value


def test_git_run_with_the_neutral_environment_ignores_a_global_config(tmp_path: Path) -> None:
    git = shutil.which("git")
    assert git is not None, "git is missing: `make test` installs it"
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text("[alias]\n\tzz = status\n")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), **NEUTRAL_ENV}

    listed = subprocess.run([git, "config", "--list"], env=env, cwd=tmp_path, capture_output=True, text=True)

    assert "alias.zz" not in listed.stdout
