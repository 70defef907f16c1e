"""The exec program tables (tools/exec_programs.py) held to something other than themselves: the installed programs'
--help and man pages (read by tests/program_docs.py), the programs run with the options, and a reviewed list of
dangerous options (tests/exec_options.yaml). Every option a table names is one the program has, takes a value only
where the program does, and is not classed harmless where the program's own words say it writes or runs; no option
known to write, run, delete or read a list of files is ever classed harmless. The last test plants a mistake of each
kind in a throwaway copy of the tables and shows each check catches its own."""

from __future__ import annotations

import dataclasses
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from program_docs import (
    ENV,
    dangerous_wording,
    descriptions,
    documentation,
    documented_options,
    installed_version,
    normalized,
    run,
    version,
)
from test_exec_programs import allowing_everything, harmless

from tools.exec_policy import evaluate
from tools.exec_policy.arguments import program_use
from tools.exec_programs import GIT_GLOBAL, GIT_SUBCOMMANDS, NEUTRAL_ENV, PROGRAMS, Opt, Program

REVIEWED: dict[str, Any] = yaml.safe_load((Path(__file__).parent.parent / "exec_options.yaml").read_text())
DANGEROUS: dict[str, str] = {key: said for group in REVIEWED["dangerous"].values() for key, said in group.items()}
PROBE = "zz-probe-word"  # a word no program knows and no file is named


def tables() -> dict[str, Mapping[str, Opt]]:
    """Every table by the command it describes: each program, each git subcommand, and git's own options ("git")."""
    found = {name: spec.options for name, spec in PROGRAMS.items() if name != "git"}
    found |= {f"git {sub}": spec.options for sub, spec in GIT_SUBCOMMANDS.items()}
    return found | {"git": GIT_GLOBAL}


TABLES = tables()


def split_key(key: str) -> tuple[str, str]:
    """A reviewed key as (command, option): "git log --output" -> ("git log", "--output"); "xargs" -> ("xargs", "")."""
    command, _, option = key.rpartition(" ")
    return (command, option) if command else (option, "")


# --- every option a table names is one the program has ------------------------------------------------------------


def later_than_installed(command: str, option: str) -> bool:
    """Whether the reviewed list says `option` came after the installed release of the program (so it may lack it)."""
    last = REVIEWED["later"].get(f"{command} {option}")  # "coreutils 9.1": the last release known without it
    if last is None:
        return False
    package, release = last.split()
    said, installed = installed_version(command.split()[0])
    return package in said and installed <= version(release)


def options_not_had(command: str, options: Iterable[str]) -> list[str]:
    """The options a table names that the installed program neither documents nor is known to have (reviewed as
    undocumented, or of a later release than the one installed). find's operators ( ) ! , are words of its page."""
    text = documentation(command)
    named, words = documented_options(text), set(text.split())
    return [
        option
        for option in options
        if option not in named
        and not (not option.startswith("-") and option in words)
        and f"{command} {option}" not in REVIEWED["undocumented"]
        and not later_than_installed(command, option)
    ]


@pytest.mark.parametrize("command", sorted(TABLES))
def test_each_option_a_table_names_is_one_the_installed_program_has(command: str) -> None:
    assert options_not_had(command, TABLES[command]) == [], f"not options of the installed {command}"


def accepts(command: str, words: list[str], cwd: Path) -> bool:
    """Whether the installed program runs with `words`: a getopt program is asked for its --version after them (it
    reads the options, then stops before any work); a git subcommand runs in the repository `cwd`."""
    name, *sub = command.split()
    argv = ["git", *sub, *words] if name == "git" else [name, *words, "--version"]
    env = ENV | NEUTRAL_ENV | {"HOME": str(cwd)}
    done = subprocess.run(argv, capture_output=True, cwd=cwd, env=env, stdin=subprocess.DEVNULL, timeout=60)
    return done.returncode == 0


def repository(folder: Path) -> Path:
    """A git repository with one commit (git log refuses to run on none)."""
    env = ENV | NEUTRAL_ENV | {"HOME": str(folder)}
    subprocess.run(["git", "init", "-q", str(folder)], check=True, env=env)
    commit = ["git", "-c", "user.name=t", "-c", "user.email=t@example.org", "commit", "-q", "--allow-empty", "-m", "1"]
    subprocess.run(commit, check=True, cwd=folder, env=env)
    return folder


@pytest.mark.parametrize("key", sorted(REVIEWED["undocumented"]))
def test_each_undocumented_option_is_one_the_installed_program_accepts(key: str, tmp_path: Path) -> None:
    command, option = split_key(key)
    value = REVIEWED["undocumented"][key].get("value")
    cwd = repository(tmp_path) if command.startswith("git ") else tmp_path

    assert accepts(command, [option, *([value] if value else [])], cwd), f"the installed {command} refuses {option}"
    assert not accepts(command, ["--zz-not-an-option"], cwd)  # the probe tells a real option from a made-up one


def reviewed_keys() -> list[str]:
    return [key for section in ("harmless despite wording", "undocumented", "later") for key in REVIEWED[section]]


@pytest.mark.parametrize("key", reviewed_keys())
def test_each_reviewed_exception_is_about_an_option_a_table_names(key: str) -> None:
    command, option = split_key(key)
    assert option in TABLES.get(command, {}), f"{key}: no table names it any more; remove it from exec_options.yaml"


# --- an option the table gives a value takes the next word as it ---------------------------------------------------


def options_reading_their_value_as_a_file(name: str, spec: Program, cwd: Path) -> list[str]:
    """The options whose value the table says is harmless (a number, a text, fields) but which the program, given a
    separate word after them, reads as a file: `sort -y WORD` takes WORD only when it is all digits."""
    found = []
    for option, opt in spec.options.items():
        if opt.arg != "required" or not harmless(opt) or opt.kind in ("read", "gitarg"):
            continue
        said = run_in(cwd, [name, option, PROBE])
        if PROBE in said and "No such file" in said:
            found.append(option)
    return found


def run_in(cwd: Path, argv: list[str]) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, cwd=cwd, env=ENV, stdin=subprocess.DEVNULL, timeout=60)
    return done.stderr


@pytest.mark.parametrize("name", sorted(name for name, spec in PROGRAMS.items() if spec.parser == "getopt"))
def test_each_option_the_table_gives_a_value_takes_the_next_word_as_it(name: str, tmp_path: Path) -> None:
    assert options_reading_their_value_as_a_file(name, PROGRAMS[name], tmp_path) == []


# --- what the programs' own words say -------------------------------------------------------------------------------


def worded_dangerous(command: str, options: Mapping[str, Opt], text: str) -> list[str]:
    """The options the table classes harmless whose description says they write, run, delete or read a file list,
    unless reviewed as harmless despite the wording."""
    described = descriptions(text)
    found = []
    for option, opt in options.items():
        if not harmless(opt) or f"{command} {option}" in REVIEWED["harmless despite wording"]:
            continue
        said = next(filter(None, map(dangerous_wording, described.get(option, []))), None)
        if said is not None:
            found.append(f"{command} {option}: its documentation says it {said}")
    return found


@pytest.mark.parametrize("command", sorted(TABLES))
def test_no_option_a_table_classes_harmless_is_described_as_writing_or_running(command: str) -> None:
    assert worded_dangerous(command, TABLES[command], documentation(command)) == []


GNU = ("cat", "head", "tail", "cut", "uniq", "tr", "wc", "sort", "ls", "grep")


@pytest.mark.parametrize("name", GNU)
def test_the_table_lists_every_long_option_the_installed_program_documents(name: str) -> None:
    """The other way round, for the GNU programs whose --help is complete: a new option upstream must be added."""
    said, _ = installed_version(name)
    assert "GNU" in said, f"{name} is not the GNU program the table describes"
    documented = {option for option in documented_options(run([name, "--help"])) if option.startswith("--")}

    assert documented - set(PROGRAMS[name].options) == set()


# --- the reviewed list of dangerous options -------------------------------------------------------------------------


@pytest.mark.parametrize("key", sorted(DANGEROUS))
def test_each_known_dangerous_option_is_so_in_its_programs_own_words(key: str) -> None:
    command, option = split_key(key)
    text = documentation(command)
    where = descriptions(text).get(option, []) if option.startswith("-") else [text]

    assert any(normalized(DANGEROUS[key]) in normalized(said) for said in where), (
        f"the installed {command} does not describe {option or 'itself'} as {DANGEROUS[key]!r}: {where}"
    )


def runs_unasked(command: str, option: str, programs: Mapping[str, Program]) -> bool:
    """Whether the tables `programs` let `command option` run without asking, with or without a value after it
    (values aside: those are checked on their own). A program they do not know never does (wrappers always ask)."""
    name, *words = [*command.split(), *([option] if option else [])]
    spec = programs.get(name)
    if spec is None:
        return False
    return any(program_use(name, spec, args).problem is None for args in (words, [*words, "x"]))


@pytest.mark.parametrize("key", sorted(DANGEROUS))
def test_no_known_dangerous_option_is_classed_harmless(key: str, tmp_path: Path) -> None:
    command, option = split_key(key)
    assert not runs_unasked(command, option, PROGRAMS), f"the tables class {key} harmless"
    for line in (key, f"{key} x"):  # and the whole policy asks, every program of the tables allowlisted
        assert evaluate(line, allowing_everything(), cwd=str(tmp_path)).decision == "ask", line


# --- each check fails on the mistake it is there for ---------------------------------------------------------------


def test_the_checks_catch_mistakes_planted_in_a_copy_of_the_tables(tmp_path: Path) -> None:
    sort = PROGRAMS["sort"]
    writes = dataclasses.replace(sort, options={**sort.options, "-o": Opt("required", "text"), "--outptu": Opt()})
    reads = dataclasses.replace(sort, options={**sort.options, "-y": Opt("required", "text")})  # as it was

    assert runs_unasked("sort", "-o", {**PROGRAMS, "sort": writes})  # sort -o is on the reviewed list: it would fail
    assert [line.split(":")[0] for line in worded_dangerous("sort", writes.options, documentation("sort"))] == [
        "sort -o"
    ]
    assert options_not_had("sort", writes.options) == ["--outptu"]
    assert options_reading_their_value_as_a_file("sort", reads, tmp_path) == ["-y"]
