"""Program arguments: read a known program's command line as that program would, naming the option values and files
it uses, or the first reason it must ask."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tools.exec_programs import GIT_SUBCOMMANDS, HARMLESS_KINDS, Opt, Program, ValueKind
from tools.shell_words import short

_SHORT_NUMBER = re.compile(r"-[0-9]+")
_FIND_NEWER = re.compile(r"-newer[aBcm]([aBcmt])")
_ASKING_KINDS: dict[str, str] = {
    "write": "writes a file",
    "run": "runs a program",
    "filelist": "reads the file list from a file",
}


@dataclass
class _Use:
    """What a command line asks of a program: the values to check, or the first reason it must ask."""

    values: list[tuple[str, ValueKind, str]] = field(default_factory=list)  # (option or "", kind, value)
    problem: str | None = None


def _asks(option: str, opt: Opt) -> str | None:
    if opt.risk:
        return f"{option} {opt.risk}"
    if opt.kind is not None and opt.kind not in HARMLESS_KINDS:
        return f"{option} {_ASKING_KINDS[opt.kind]}"
    return None


def _long_option(word: str, spec: Program, label: str) -> tuple[str, Opt] | str:
    """The option a `--name[=value]` word means, expanded as getopt_long would; or why it cannot be read."""
    key = word.split("=", 1)[0]
    if key in spec.options:
        return key, spec.options[key]
    matches = sorted(name for name in spec.options if name.startswith("--") and name.startswith(key))
    if not spec.abbreviations or not matches:
        return f"{key} is not an option known for {label}"
    if len(matches) > 1:
        return f"{key} is ambiguous for {label} ({', '.join(matches)})"
    return matches[0], spec.options[matches[0]]


def _take(use: _Use, option: str, opt: Opt, value: str | None) -> None:
    problem = _asks(option, opt)
    if problem is not None:
        use.problem = problem
    elif value is not None and opt.kind is not None:
        use.values.append((option, opt.kind, value))


def _getopt(label: str, spec: Program, args: list[str]) -> _Use:
    """Read `args` as GNU getopt_long would for this program (options anywhere, `--` ends them)."""
    use = _Use()
    operands: list[str] = []
    given: set[str] = set()
    i = 0
    while i < len(args) and use.problem is None:
        word = args[i]
        i += 1
        if word == "--":
            operands += args[i:]
            break
        if word == "-" or not word.startswith("-"):
            operands.append(word)
        elif _SHORT_NUMBER.fullmatch(word) and (spec.numeric == "any" or (spec.numeric == "first" and i == 1)):
            continue
        elif word.startswith("--"):
            found = _long_option(word, spec, label)
            if isinstance(found, str):
                use.problem = found
                continue
            option, opt = found
            given.add(option)
            has_value = "=" in word
            value = word.split("=", 1)[1] if has_value else None
            if opt.arg == "none" and has_value:
                use.problem = f"{option} takes no value"
            elif opt.arg == "required" and not has_value:
                value, i = _next_value(option, args, i, use)
                if value is None:
                    continue
            _take(use, option, opt, value)
        else:
            i = _short_options(word, args, i, spec, label, use, given)
    if use.problem is None:
        _operands(label, spec, operands, given, use)
    return use


def _next_value(option: str, args: list[str], i: int, use: _Use) -> tuple[str | None, int]:
    """The word at `i` as `option`'s value and the index after it; None, noted as the problem, when there is none."""
    if i >= len(args):
        use.problem = f"{option} is missing its value"
        return None, i
    return args[i], i + 1


def _short_options(word: str, args: list[str], i: int, spec: Program, label: str, use: _Use, given: set[str]) -> int:
    """Read one `-abc` / `-n5` / `-n 5` word; returns the index of the next word."""
    j = 1
    while j < len(word) and use.problem is None:
        option = "-" + word[j]
        opt = spec.options.get(option)
        if opt is None or (not spec.clusters and j > 1):
            use.problem = f"{option if opt is None else word} is not an option known for {label}"
            break
        given.add(option)
        rest = word[j + 1 :]
        if opt.arg == "none":
            _take(use, option, opt, None)
            j += 1
            continue
        value: str | None = rest or None
        if opt.arg == "required" and not rest:
            value, i = _next_value(option, args, i, use)
            if value is None:
                break
        _take(use, option, opt, value)
        break
    return i


def _operands(label: str, spec: Program, operands: list[str], given: set[str], use: _Use) -> None:
    kinds = spec.operands
    if kinds and kinds[0] == "text" and given & spec.pattern_options:
        kinds = kinds[1:]
    for n, operand in enumerate(operands):
        kind = kinds[n] if n < len(kinds) else spec.rest
        if kind is None:
            use.problem = f"{label} takes no operand {short(operand)}"
            return
        if kind not in HARMLESS_KINDS:
            what = "writes" if kind == "write" else "uses"
            use.problem = f"{label} {what} the file {short(operand)}"
            return
        use.values.append(("", kind, operand))


def _find(spec: Program, args: list[str]) -> _Use:
    """find [-H -L -P -D x -Olevel] [path...] [expression]: paths are read, the expression's words are looked up."""
    use = _Use()
    i = 0
    while i < len(args) and (args[i] in ("-H", "-L", "-P", "-D") or args[i].startswith("-O")):
        option = args[i] if args[i] in spec.options else "-O"
        i = _find_word(spec, option, args, i + 1, use)
        if use.problem:
            return use
    while i < len(args) and not args[i].startswith("-") and args[i] not in ("(", ")", "!", ","):
        use.values.append(("", "read", args[i]))
        i += 1
    while i < len(args) and use.problem is None:
        word = args[i]
        newer = _FIND_NEWER.fullmatch(word)
        if newer:
            if i + 1 >= len(args):
                use.problem = f"{word} is missing its value"
                break
            use.values.append((word, "text" if newer.group(1) == "t" else "read", args[i + 1]))
            i += 2
        elif word in spec.options:
            i = _find_word(spec, word, args, i + 1, use)
        else:
            use.problem = f"{word} is not an expression known for find"
    return use


def _find_word(spec: Program, option: str, args: list[str], i: int, use: _Use) -> int:
    opt = spec.options[option]
    value: str | None = None
    if opt.arg == "required" and not _asks(option, opt):
        if i >= len(args):
            use.problem = f"{option} is missing its value"
            return i
        value = args[i]
        i += 1
    _take(use, option, opt, value)
    return i


def _git(spec: Program, args: list[str]) -> _Use:
    """git [global options] SUBCOMMAND [options] [operands]: only the read-only subcommands of the table."""
    i = 0
    while i < len(args) and args[i].startswith("-"):
        option = args[i].split("=", 1)[0]
        opt = spec.options.get(option)
        if opt is None:
            return _Use(problem=f"{option} is not an option known for git")
        problem = _asks(option, opt)
        if problem is not None:
            return _Use(problem=problem)
        i += 1
    if i >= len(args):
        return _Use()
    sub = GIT_SUBCOMMANDS.get(args[i])
    if sub is None:
        return _Use(problem=f"git {short(args[i])} is not a read-only git subcommand this policy knows")
    return _getopt(f"git {args[i]}", sub, args[i + 1 :])


def program_use(name: str, spec: Program, args: list[str]) -> _Use:
    if spec.parser == "echo":
        return _Use()
    if spec.parser == "find":
        return _find(spec, args)
    if spec.parser == "git":
        return _git(spec, args)
    return _getopt(name, spec, args)


def files(use: _Use) -> list[str]:
    return [value for _, kind, value in use.values if kind == "read" and value != "-"]
