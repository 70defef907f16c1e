"""Command classification: split a shell command line into simple commands, see through wrappers and shells, and name
every construct that keeps a command from running unasked."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel

from tools.exec_policy.tables import (
    BUILTINS,
    INTERPRETER_NAMES,
    INTERPRETERS,
    KEYWORDS,
    OPAQUE_WRAPPERS,
    SHELLS,
    WRAPPERS,
    Wrapper,
)
from tools.shell_words import DIGITS, FD_TARGET, Lexer, Redirect, Risk, Word, dedupe_risks, short


class Segment(BaseModel):
    """One simple command of the line."""

    argv: list[str]
    """The words after quote removal; expansions stay as written (`$HOME` is the text `$HOME`)."""
    risks: list[str]
    """Why this segment can never run unasked, e.g. "command substitution $(...)", "wrapper: sudo"."""
    inner: list[str] | None = None
    """For wrappers (`sh -c X`, `env A=1 cmd`, `nohup cmd`...): the wrapped argv when it can be read literally."""


class Analysis(BaseModel):
    segments: list[Segment]
    risks: list[str]
    """Line-level reasons (a parse error, a subshell...) followed by every segment's risks."""
    error: str | None = None
    """A parse problem (an unclosed quote...): the command must ask, or is denied when ask is off."""


_MAX_DEPTH = 8


def interpreter(name: str) -> str | None:
    for family, pattern in INTERPRETER_NAMES:
        if pattern.fullmatch(name):
            return family
    return None


# --- Commands -------------------------------------------------------------------------------------------------------


@dataclass
class Cmd:
    """A simple command, and for a wrapper the command it runs."""

    argv: list[str]
    own: list[Risk] = field(default_factory=list)  # risks of this level (wrapper options, redirects...)
    marker: Risk | None = None  # "wrapper: sudo", "variable assignment A=": what makes this level a wrapper
    inner: Cmd | None = None
    privileged: bool = False
    text: str = ""  # the segment as written, for reasons
    redirects: list[Redirect] = field(default_factory=list)

    def all_risks(self) -> list[Risk]:
        risks = ([self.marker] if self.marker else []) + self.own
        return dedupe_risks(risks + (self.inner.all_risks() if self.inner else []))


@dataclass
class Parsed:
    segments: list[Cmd]
    line_risks: list[Risk]
    error: str | None


def _word_risks(words: Sequence[Word]) -> list[Risk]:
    return [risk for word in words for risk in word.risks]


def basename(text: str) -> str:
    return text.rsplit("/", 1)[-1]


def _classify(words: list[Word], depth: int) -> Cmd:
    argv = [word.text for word in words]
    if not words:
        return Cmd(argv)
    if depth > _MAX_DEPTH:
        return Cmd(argv, [Risk("commands nested too deeply"), *_word_risks(words)])
    assignments = 0
    while assignments < len(words) and words[assignments].assign is not None:
        assignments += 1
    if assignments:
        rest = words[assignments:]
        marker = Risk(f"variable assignment {words[0].assign}=", "wrapper" if rest else "other")
        return Cmd(argv, _word_risks(words[:assignments]), marker, _classify(rest, depth + 1) if rest else None)
    first = words[0]
    name = basename(first.text)
    if not first.quoted and first.text in KEYWORDS:
        return Cmd(argv, [Risk(KEYWORDS[first.text]), *_word_risks(words)])
    if name in BUILTINS:
        return Cmd(argv, [Risk(BUILTINS[name]), *_word_risks(words)])
    if name in SHELLS:
        return _shell(words, name, depth)
    if name in WRAPPERS:
        return _wrapper(words, name, WRAPPERS[name], depth)
    if name in OPAQUE_WRAPPERS:
        return Cmd(argv, _word_risks(words), Risk(f"wrapper: {name}", "wrapper"))
    inline = _inline_code(name, argv[1:])
    if inline is not None:
        return Cmd(argv, [Risk(f"inline code: {name} {inline}"), *_word_risks(words)])
    return Cmd(argv, _word_risks(words))


def _shell(words: list[Word], name: str, depth: int) -> Cmd:
    """`bash -lc 'X'` wraps X; a shell without -c runs a script or stdin and wraps nothing."""
    argv = [word.text for word in words]
    args = argv[1:]
    i = 0
    command: str | None = None
    has_c = False
    while i < len(args):
        a = args[i]
        if a in ("--", "-"):
            i += 1
            break
        if a in ("--rcfile", "--init-file"):
            i += 2
        elif a == "--command" or a.startswith("--command="):
            has_c = True
            if "=" in a:
                command = a.split("=", 1)[1]
                i += 1
                break
            i += 1
            break
        elif a.startswith("--"):
            i += 1
        elif a[:1] in "-+" and len(a) > 1:
            has_c = has_c or (a[0] == "-" and "c" in a[1:])
            i += 2 if ("o" in a[1:] or "O" in a[1:]) else 1
        else:
            break
    if not has_c:
        return Cmd(argv, _word_risks(words))
    marker = Risk(f"wrapper: {name} -c", "wrapper")
    if command is None and i < len(args):
        command = args[i]
        i += 1
    if command is None:
        return Cmd(argv, _word_risks(words), marker)
    inner, extra = _inner_from_string(command, depth)
    return Cmd(argv, _word_risks(words) + extra, marker, inner)


def _inner_from_string(command: str, depth: int) -> tuple[Cmd | None, list[Risk]]:
    """Parse a command string again (`sh -c X`); it is read literally only when it is one simple command."""
    parsed = parse(command, depth + 1)
    if parsed.error is None and not parsed.line_risks and len(parsed.segments) == 1:
        return parsed.segments[0], []
    risks = [Risk(f"the inner command could not be read ({parsed.error})")] if parsed.error else []
    if len(parsed.segments) > 1:
        risks.append(Risk("the inner command string holds several commands"))
    risks += parsed.line_risks + [risk for segment in parsed.segments for risk in segment.all_risks()]
    return None, risks


def _wrapper(words: list[Word], name: str, spec: Wrapper, depth: int) -> Cmd:
    argv = [word.text for word in words]
    args = argv[1:]
    marker = Risk(f"wrapper: {name}", "wrapper")
    seen: set[str] = set()
    extra: list[Risk] = []
    string: str | None = None
    readable = True
    takes_value = spec.valued | spec.strings | spec.writes

    def value_of(option: str, value: str) -> None:
        nonlocal string
        if option in spec.strings:
            string = value
        if option in spec.writes:
            extra.append(Risk(f"{name} {option} writes a file"))

    i = 0
    while i < len(args) and readable:
        a = args[i]
        if a == "--":
            i += 1
            break
        if a in spec.flags:
            seen.add(a)
            i += 1
            continue
        if a.startswith("--"):
            option, eq, value = a.partition("=")
            seen.add(option)
            if option in spec.stops:
                readable = False
            elif option in spec.flags:
                pass
            elif option in takes_value:
                if not eq:
                    i += 1
                    if i >= len(args):
                        readable = False
                        break
                    value = args[i]
                value_of(option, value)
            else:
                readable = False
            i += 1
            continue
        if a.startswith("-") and len(a) > 1:
            if spec.numeric and DIGITS.fullmatch(a[1:]):
                i += 1
                continue
            for j in range(1, len(a)):
                option = "-" + a[j]
                seen.add(option)
                if option in spec.stops:
                    readable = False
                    break
                if option in takes_value or option in spec.optional:
                    value = a[j + 1 :]
                    if not value and option not in spec.optional:
                        i += 1
                        if i >= len(args):
                            readable = False
                            break
                        value = args[i]
                    value_of(option, value)
                    break
                if option not in spec.flags:
                    readable = False
                    break
            i += 1
            continue
        break
    if spec.assignments:
        while i < len(args) and words[1 + i].assign is not None:
            i += 1
    inner: Cmd | None = None
    if readable and i + spec.positionals <= len(args):
        i += spec.positionals
        if string is None and i + 1 < len(args) and args[i] in spec.strings:
            string = args[i + 1]
            i += 2
        if string is not None:
            inner, more = _inner_from_string(string, depth)
            extra += more
        elif i < len(args) and (spec.rest or seen & spec.rest_if):
            rest = words[1 + i :]
            if spec.join and not seen & spec.join_unless:
                inner, more = _inner_from_string(" ".join(word.text for word in rest), depth)
                extra += more + _word_risks(rest)
            else:
                inner = _classify(rest, depth + 1)
    own = _word_risks(words if inner is None else words[: 1 + i]) + extra
    return Cmd(argv, own, marker, inner, privileged=spec.privileged)


def _inline_code(name: str, args: list[str]) -> str | None:
    """The option with which an interpreter is given code inline (`python3 -c`, `perl -e`), if any."""
    family = interpreter(name)
    if family is None:
        return None
    if family == "deno":
        return "eval" if args[:1] == ["eval"] else None
    inline, valued, long_inline = INTERPRETERS[family]
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--" or a == "-" or not a.startswith("-"):
            return None
        if a.startswith("--"):
            if a.split("=", 1)[0] in long_inline:
                return a.split("=", 1)[0]
            i += 1
            continue
        for j, letter in enumerate(a[1:], start=1):
            if letter in inline:
                return f"-{letter}"
            if family == "python" and letter == "m":
                return None
            if letter in valued:
                if j == len(a) - 1:
                    i += 1
                break
        i += 1
    return None


def _redirect_risks(redirect: Redirect) -> list[Risk]:
    target = redirect.target
    shown = f"{redirect.fd or ''}{redirect.op} {short(target.text)}"
    if redirect.op in ("<<", "<<-"):
        return [Risk(f"here-document ({redirect.op}{short(target.text)})")]
    if redirect.op == "<<<":
        return list(target.risks)
    if redirect.op in (">&", "<&") and FD_TARGET.fullmatch(target.text):
        return list(target.risks)
    writes = redirect.op not in ("<", "<&")
    if not target.risks:
        if writes and target.text in ("/dev/null", "/dev/stdout", "/dev/stderr"):
            return []
        if not writes and target.text == "/dev/null":
            return []
    if writes:
        return [Risk(f"redirect into a file ({shown})"), *target.risks]
    return [Risk(f"redirect from a file ({shown})", "read", None if target.risks else target.text), *target.risks]


def parse(command: str, depth: int = 0) -> Parsed:
    if "\x00" in command:
        return Parsed([], [], "the command contains a NUL byte")
    lexer = Lexer(command)
    lexer.run()
    error = lexer.error
    line_risks: list[Risk] = []
    if lexer.heredoc_substitution:
        line_risks.append(Risk("command substitution in a here-document", "subst"))
    raw: list[tuple[list[Word], list[Redirect], str | None, str | None]] = []
    words: list[Word] = []
    redirects: list[Redirect] = []
    before: str | None = None
    previous: str | None = None
    expect: str | None = None
    parens = 0
    for token in lexer.tokens:
        if isinstance(token, Word):
            words.append(token)
            continue
        if isinstance(token, Redirect):
            redirects.append(token)
            continue
        op = token.op
        ended = bool(words or redirects)
        if ended:
            raw.append((words, redirects, before, op))
            words, redirects = [], []
            expect = None
        if op in ("(", ")"):
            line_risks.append(Risk("subshell ( )"))
            parens += 1 if op == "(" else -1
            if parens < 0 and error is None:
                error = "unbalanced )"
        elif op != "\n" and not ended and previous != ")" and error is None:
            error = f"syntax error near {op}"
        if op in ("&&", "||", "|", "|&"):
            expect = op
        elif op in (";;", ";&", ";;&"):
            line_risks.append(Risk(f"case syntax {op}"))
        if ended or op != "\n":
            before = op
        previous = op
    if words or redirects:
        raw.append((words, redirects, before, None))
        expect = None
    if error is None and expect is not None:
        error = f"the command ends with {expect}"
    if error is None and parens > 0:
        error = "unclosed ("
    if error is None and not raw and depth == 0:
        error = "the command is empty"
    segments = [_segment(command, *item, depth) for item in raw]
    return Parsed(segments, dedupe_risks(line_risks), error)


def _segment(
    command: str, words: list[Word], redirects: list[Redirect], before: str | None, after: str | None, depth: int
) -> Cmd:
    cmd = _classify(words, depth)
    extra: list[Risk] = []
    for redirect in redirects:
        extra += _redirect_risks(redirect)
    if after == "&":
        extra.append(Risk("background &"))
    if cmd.argv:
        name = basename(cmd.argv[0])
        kind = "a shell" if name in SHELLS else "an interpreter" if interpreter(name) else None
        if kind and before in ("|", "|&"):
            extra.append(Risk(f"pipe into {kind}: {name}"))
        if kind and any(redirect.op == "<<<" for redirect in redirects):
            extra.append(Risk(f"here-string into {kind}: {name}"))
    cmd.own = dedupe_risks(cmd.own + extra)
    cmd.redirects = redirects
    spans = [(word.start, word.end) for word in words] + [(r.start, r.end) for r in redirects]
    cmd.text = command[min(s for s, _ in spans) : max(e for _, e in spans)].strip()
    return cmd


# --- Public analysis ------------------------------------------------------------------------------------------------


def analyze(command: str) -> Analysis:
    """Split a shell command line into simple commands and name every reason it cannot run unasked."""
    parsed = parse(command)
    segments = [
        Segment(
            argv=list(cmd.argv),
            risks=[risk.text for risk in cmd.all_risks()],
            inner=list(cmd.inner.argv) if cmd.inner is not None else None,
        )
        for cmd in parsed.segments
    ]
    risks = [parsed.error] if parsed.error else []
    for text in [risk.text for risk in parsed.line_risks] + [risk for segment in segments for risk in segment.risks]:
        if text not in risks:
            risks.append(text)
    return Analysis(segments=segments, risks=risks, error=parsed.error)
