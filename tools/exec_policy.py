"""Exec policy: decide from the command text alone whether an agent's shell command may run without asking a human."""

from __future__ import annotations

import fnmatch
import hashlib
import os
import re
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tools.exec_programs import (
    BUILD_TOOLS,
    GIT_DRIVER_ATTRIBUTES,
    GIT_SUBCOMMANDS,
    HARMLESS_GIT_CONFIG,
    HARMLESS_KINDS,
    PIP_BUILDS,
    PIP_NAMES,
    PROGRAMS,
    STANDARD_STREAMS,
    SYSTEM_TREES,
    Opt,
    Program,
    ValueKind,
)
from tools.shell_words import DIGITS, FD_TARGET, Lexer, Redirect, Risk, Word, dedupe_risks, short

ExecSecurity = Literal["deny", "allowlist", "full"]
ExecAsk = Literal["off", "on-miss", "always"]
DEFAULT_SAFE_BINS = ("cut", "uniq", "head", "tail", "tr", "wc")


class AllowRule(BaseModel):
    """A config allowlist entry: `{executable: git, args: "status **"}`."""

    model_config = ConfigDict(extra="forbid")

    executable: str
    """A bare name (`git`, found on PATH) or an absolute path (`/usr/bin/git`)."""
    args: str = "**"
    """Whitespace-separated fnmatch globs, one per argument, each matching one whole argument; a final `**` matches
    any remaining arguments (zero or more). "" means no arguments, "**" any arguments, and "*" exactly one argument.
    A program the policy knows (tools/exec_programs.py) still needs every option harmless and every file inside the
    workspace."""

    @field_validator("executable")
    @classmethod
    def _bare_name_or_absolute(cls, value: str) -> str:
        if not value.strip() or value != value.strip():
            raise ValueError("must be a program name such as git or an absolute path such as /usr/bin/git")
        if "/" in value and not os.path.isabs(value):
            raise ValueError(
                "must be a bare program name (git) or an absolute path (/usr/bin/git), not a relative path"
            )
        return value


class AllowEntry(BaseModel):
    """What "Allow always" stores: one exact program and exact arguments, never a pattern."""

    model_config = ConfigDict(frozen=True)

    executable: str
    """The resolved absolute path."""
    args: tuple[str, ...]
    """The exact arguments."""
    sha256: str | None = None
    """For a script (`python3 build.py`, `./run.sh`): the SHA-256 of its content; a changed script asks again."""


class ExecSettings(BaseModel):
    """`agents[].exec` in the config."""

    model_config = ConfigDict(extra="forbid")

    security: ExecSecurity = "allowlist"
    ask: ExecAsk = "on-miss"
    safe_bins: list[str] = Field(default_factory=lambda: list(DEFAULT_SAFE_BINS))
    """Programs that run unasked as pure stdin filters: only programs in the program table, with harmless options
    and no file at all; given a file, a safe bin is judged like any other program."""
    allowlist: list[AllowRule] = Field(default_factory=list)
    approvers: list[str] | None = None
    """`channel:sender_id` keys; None means the config's owners (resolved elsewhere)."""


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


class Verdict(BaseModel):
    decision: Literal["allow", "ask", "deny"]
    reason: str
    """One sentence for the approval message, or for the model when denied."""
    always: list[AllowEntry]
    """What "Allow always" would store for this command; empty means nothing is storable."""
    offer_always: bool
    """Whether to show an "Allow always" button: only when asking, not under ask: always, and something is storable."""


# --- Words of the shell ---------------------------------------------------------------------------------------------


def _names(text: str) -> tuple[str, ...]:
    return tuple(text.split())


SHELLS = frozenset(_names("sh bash zsh dash ksh mksh pdksh ash yash rbash fish csh tcsh pwsh"))


_KEYWORDS = {
    **{word: f"shell keyword: {word}" for word in _names("if then else elif fi case esac for select while until do")},
    **{word: f"shell keyword: {word}" for word in _names("done in function coproc ! [[ ]]")},
    "{": "group { ...; }",
    "}": "group { ...; }",
}

# Builtins that run code from text or change the shell for the commands after them.
_BUILTINS = {
    "eval": "eval",
    "source": "source",
    ".": "source",
    **{
        name: f"shell builtin: {name}"
        for name in _names("export declare typeset local readonly unset alias unalias set shopt trap hash enable")
        + _names("let read mapfile readarray ulimit umask")
    },
}


@dataclass(frozen=True)
class _Wrapper:
    """How a wrapper program's own options are laid out, so the command it runs can be read."""

    flags: frozenset[str] = frozenset()
    valued: frozenset[str] = frozenset()  # options that take a value (attached or the next word)
    optional: frozenset[str] = frozenset()  # short options whose value, if any, is attached (xargs -e[EOF])
    strings: frozenset[str] = frozenset()  # options whose value is a shell command string (flock -c)
    stops: frozenset[str] = frozenset()  # options after which the command cannot be read literally, or none runs
    writes: frozenset[str] = frozenset()  # options whose value is a file the wrapper writes
    positionals: int = 0  # words between the options and the command (timeout DURATION, chroot NEWROOT)
    assignments: bool = False  # NAME=VALUE words may come before the command (env, sudo)
    numeric: bool = False  # -N is an option (nice -5)
    privileged: bool = False  # changes user or root: "Allow always" never stores anything through it
    rest: bool = True  # the words after the options are the command...
    rest_if: frozenset[str] = frozenset()  # ...only once one of these options was given (runuser -u)
    join: bool = False  # the words after the options are joined into one shell string (watch)
    join_unless: frozenset[str] = frozenset()


def _w(
    flags: str = "",
    valued: str = "",
    *,
    optional: str = "",
    strings: str = "",
    stops: str = "--help --version",
    writes: str = "",
    positionals: int = 0,
    assignments: bool = False,
    numeric: bool = False,
    privileged: bool = False,
    rest: bool = True,
    rest_if: str = "",
    join: bool = False,
    join_unless: str = "",
) -> _Wrapper:
    def words(text: str) -> frozenset[str]:
        return frozenset(text.split())

    return _Wrapper(
        flags=words(flags),
        valued=words(valued),
        optional=words(optional),
        strings=words(strings),
        stops=words(stops),
        writes=words(writes),
        positionals=positionals,
        assignments=assignments,
        numeric=numeric,
        privileged=privileged,
        rest=rest,
        rest_if=words(rest_if),
        join=join,
        join_unless=words(join_unless),
    )


_WRAPPERS: dict[str, _Wrapper] = {
    "env": _w(
        "-i - -0 -v --ignore-environment --null --debug --ignore-signal --default-signal --block-signal",
        "-u --unset -C --chdir",
        stops="-S --split-string --list-signal-handling --help --version",
        assignments=True,
    ),
    "sudo": _w(
        "-A -b -E -H -i -k -K -n -P -S -s -B -N --askpass --background --bell --preserve-env --set-home --login"
        " --remove-timestamp --reset-timestamp --non-interactive --preserve-groups --stdin --shell",
        "-C -D -g -h -p -R -r -t -T -U -u --close-from --chdir --group --host --prompt --chroot --role --type"
        " --command-timeout --other-user --user",
        stops="-e --edit -l --list -v --validate -V --version --help",
        assignments=True,
        privileged=True,
    ),
    "doas": _w("-n -s -L", "-u -C", privileged=True),
    "su": _w(
        "- -l --login -m -p --preserve-environment -f --fast -P --pty",
        "-s --shell -g --group -G --supp-group -w --whitelist-environment",
        strings="-c --command --session-command",
        privileged=True,
        rest=False,
    ),
    "runuser": _w(
        "- -l --login -m -p --preserve-environment -f --fast -P --pty",
        "-u --user -s --shell -g --group -G --supp-group -w --whitelist-environment",
        strings="-c --command --session-command",
        privileged=True,
        rest=False,
        rest_if="-u --user",
    ),
    "pkexec": _w("--disable-internal-agent --keep-cwd", "--user", privileged=True),
    "chroot": _w("--skip-chdir", "--userspec --groups", positionals=1, privileged=True),
    "sg": _w("", "", strings="-c", positionals=1, privileged=True),
    "newgrp": _w(privileged=True, rest=False),
    "xargs": _w(
        "-0 -r -t -p -x -o --null --no-run-if-empty --verbose --interactive --exit --open-tty --replace --eof"
        " --max-lines",
        "-a -d -E -I -L -n -P -s --arg-file --delimiter --max-args --max-procs --max-chars --process-slot-var",
        optional="-e -i -l",
        stops="--help --version --show-limits",
    ),
    "nohup": _w(),
    "timeout": _w("--preserve-status --foreground -v --verbose", "-k --kill-after -s --signal", positionals=1),
    "nice": _w("", "-n --adjustment", numeric=True),
    "ionice": _w("-t --ignore", "-c --class -n --classdata", stops="-p --pid -P --pgid -u --uid --help --version"),
    "stdbuf": _w("", "-i -o -e --input --output --error"),
    "setsid": _w("-c --ctty -f --fork -w --wait"),
    "command": _w("-p", stops="-v -V"),
    "builtin": _w(stops=""),
    "exec": _w("-c -l", "-a", stops=""),
    "time": _w("-p -a -v -q --portability --append --verbose --quiet", "-f --format", writes="-o --output"),
    "watch": _w(
        "-b -c -C -d -e -g -t -x -p -r -w --beep --color --no-color --differences --errexit --chgexit --no-title"
        " --exec --precise --no-rerun --no-wrap",
        "-n --interval -q --equexit",
        join=True,
        join_unless="-x --exec",
    ),
    "strace": _w(
        "-f -F -c -C -d -D -i -k -q -r -t -T -v -w -x -y -z -Z -n --follow-forks --summary-only --summary"
        " --no-abbrev --verbose --quiet --timestamps --syscall-times --instruction-pointer --stack-trace"
        " --decode-fds --decode-pids --output-separately",
        "-e -p -s -u -E -a -b -I -O -S -X -P -U --trace --signal --attach --string-limit --user --env --columns"
        " --detach-on --interruptible --summary-sort-by --const-print-style --trace-path --summary-columns",
        writes="-o --output",
    ),
    "ltrace": _w("-f -i -S -c -C -r -t -T -b -L -h", "-e -p -s -u -a -n -l -x -D -F -A -w", writes="-o --output"),
    "flock": _w(
        "-s --shared -x -e --exclusive -u --unlock -n --nb --nonblock --no-fork -F -o --close --verbose",
        "-w --wait --timeout -E --conflict-exit-code",
        strings="-c --command",
        positionals=1,
    ),
    "chrt": _w(
        "-a -b -d -f -i -o -r -R -v --all-tasks --batch --deadline --fifo --idle --other --rr --reset-on-fork"
        " --verbose",
        "-T -P -D --sched-runtime --sched-period --sched-deadline",
        stops="-p --pid -m --max --help --version",
        positionals=1,
    ),
    "taskset": _w("-a -c --all-tasks --cpu-list", stops="-p --pid --help --version", positionals=1),
    "unbuffer": _w("-p", stops=""),
    "busybox": _w(stops="--list --list-full --help --install"),
}

# Programs that run another command in a way this module does not read: always a risk, nothing stored.
_OPAQUE_WRAPPERS = frozenset(
    _names("systemd-run nsenter unshare firejail bwrap proxychains proxychains4 torsocks script parallel screen tmux")
    + _names("valgrind gdb at batch")
)

# Interpreter families: (option letters that mean "code follows inline", letters that take a value, long options).
_INTERPRETERS: dict[str, tuple[str, str, frozenset[str]]] = {
    "python": ("c", "WXQ", frozenset({"--command"})),
    "perl": ("eE", "0CdDiIlmMx", frozenset()),
    "ruby": ("e", "ICEFrTWx0", frozenset()),
    "node": ("ep", "r", frozenset({"--eval", "--print"})),
    "php": ("rRBE", "cdfzt", frozenset()),
    "lua": ("e", "l", frozenset()),
    "rscript": ("e", "", frozenset({"--expr"})),
    "osascript": ("e", "l", frozenset()),
}
_INTERPRETER_NAMES = (
    ("python", re.compile(r"(python|pypy)[0-9.]*")),
    ("perl", re.compile(r"perl[0-9.]*")),
    ("ruby", re.compile(r"ruby[0-9.]*|jruby")),
    ("node", re.compile(r"node|nodejs|bun")),
    ("php", re.compile(r"php[0-9.]*")),
    ("lua", re.compile(r"lua[0-9.]*|luajit")),
    ("rscript", re.compile(r"Rscript|R")),
    ("osascript", re.compile(r"osascript")),
    ("deno", re.compile(r"deno")),
)

# Never stored by "Allow always", whatever the command around them.
_NEVER_STORE = SHELLS | frozenset(_WRAPPERS) | _OPAQUE_WRAPPERS | frozenset(_BUILTINS) | frozenset(_KEYWORDS)
# A resolved program whose real file has one of these names (a `foo -> /bin/bash` link) is not stored either.
# busybox is left out: on some systems every basic command is a link to it.
_NEVER_STORE_REAL = _NEVER_STORE - {"busybox"}

_MAX_DEPTH = 8
_TEXT_LIMIT = 120


def _interpreter(name: str) -> str | None:
    for family, pattern in _INTERPRETER_NAMES:
        if pattern.fullmatch(name):
            return family
    return None


# --- Commands -------------------------------------------------------------------------------------------------------


@dataclass
class _Cmd:
    """A simple command, and for a wrapper the command it runs."""

    argv: list[str]
    own: list[Risk] = field(default_factory=list)  # risks of this level (wrapper options, redirects...)
    marker: Risk | None = None  # "wrapper: sudo", "variable assignment A=": what makes this level a wrapper
    inner: _Cmd | None = None
    privileged: bool = False
    text: str = ""  # the segment as written, for reasons
    redirects: list[Redirect] = field(default_factory=list)

    def all_risks(self) -> list[Risk]:
        risks = ([self.marker] if self.marker else []) + self.own
        return dedupe_risks(risks + (self.inner.all_risks() if self.inner else []))


@dataclass
class _Parsed:
    segments: list[_Cmd]
    line_risks: list[Risk]
    error: str | None


def _word_risks(words: Sequence[Word]) -> list[Risk]:
    return [risk for word in words for risk in word.risks]


def _basename(text: str) -> str:
    return text.rsplit("/", 1)[-1]


def _classify(words: list[Word], depth: int) -> _Cmd:
    argv = [word.text for word in words]
    if not words:
        return _Cmd(argv)
    if depth > _MAX_DEPTH:
        return _Cmd(argv, [Risk("commands nested too deeply"), *_word_risks(words)])
    assignments = 0
    while assignments < len(words) and words[assignments].assign is not None:
        assignments += 1
    if assignments:
        rest = words[assignments:]
        marker = Risk(f"variable assignment {words[0].assign}=", "wrapper" if rest else "other")
        return _Cmd(argv, _word_risks(words[:assignments]), marker, _classify(rest, depth + 1) if rest else None)
    first = words[0]
    name = _basename(first.text)
    if not first.quoted and first.text in _KEYWORDS:
        return _Cmd(argv, [Risk(_KEYWORDS[first.text]), *_word_risks(words)])
    if name in _BUILTINS:
        return _Cmd(argv, [Risk(_BUILTINS[name]), *_word_risks(words)])
    if name in SHELLS:
        return _shell(words, name, depth)
    if name in _WRAPPERS:
        return _wrapper(words, name, _WRAPPERS[name], depth)
    if name in _OPAQUE_WRAPPERS:
        return _Cmd(argv, _word_risks(words), Risk(f"wrapper: {name}", "wrapper"))
    inline = _inline_code(name, argv[1:])
    if inline is not None:
        return _Cmd(argv, [Risk(f"inline code: {name} {inline}"), *_word_risks(words)])
    return _Cmd(argv, _word_risks(words))


def _shell(words: list[Word], name: str, depth: int) -> _Cmd:
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
        return _Cmd(argv, _word_risks(words))
    marker = Risk(f"wrapper: {name} -c", "wrapper")
    if command is None and i < len(args):
        command = args[i]
        i += 1
    if command is None:
        return _Cmd(argv, _word_risks(words), marker)
    inner, extra = _inner_from_string(command, depth)
    return _Cmd(argv, _word_risks(words) + extra, marker, inner)


def _inner_from_string(command: str, depth: int) -> tuple[_Cmd | None, list[Risk]]:
    """Parse a command string again (`sh -c X`); it is read literally only when it is one simple command."""
    parsed = _parse(command, depth + 1)
    if parsed.error is None and not parsed.line_risks and len(parsed.segments) == 1:
        return parsed.segments[0], []
    risks = [Risk(f"the inner command could not be read ({parsed.error})")] if parsed.error else []
    if len(parsed.segments) > 1:
        risks.append(Risk("the inner command string holds several commands"))
    risks += parsed.line_risks + [risk for segment in parsed.segments for risk in segment.all_risks()]
    return None, risks


def _wrapper(words: list[Word], name: str, spec: _Wrapper, depth: int) -> _Cmd:
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
    inner: _Cmd | None = None
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
    return _Cmd(argv, own, marker, inner, privileged=spec.privileged)


def _inline_code(name: str, args: list[str]) -> str | None:
    """The option with which an interpreter is given code inline (`python3 -c`, `perl -e`), if any."""
    family = _interpreter(name)
    if family is None:
        return None
    if family == "deno":
        return "eval" if args[:1] == ["eval"] else None
    inline, valued, long_inline = _INTERPRETERS[family]
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


def _parse(command: str, depth: int = 0) -> _Parsed:
    if "\x00" in command:
        return _Parsed([], [], "the command contains a NUL byte")
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
    return _Parsed(segments, dedupe_risks(line_risks), error)


def _segment(
    command: str, words: list[Word], redirects: list[Redirect], before: str | None, after: str | None, depth: int
) -> _Cmd:
    cmd = _classify(words, depth)
    extra: list[Risk] = []
    for redirect in redirects:
        extra += _redirect_risks(redirect)
    if after == "&":
        extra.append(Risk("background &"))
    if cmd.argv:
        name = _basename(cmd.argv[0])
        kind = "a shell" if name in SHELLS else "an interpreter" if _interpreter(name) else None
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
    parsed = _parse(command)
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


# --- Program tables -------------------------------------------------------------------------------------------------

_NUMBER = re.compile(r"[+-]?[0-9][0-9.]*[A-Za-z%]{0,3}")
_FIELD_LIST = re.compile(r"[0-9,-]+")
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


def _program_use(name: str, spec: Program, args: list[str]) -> _Use:
    if spec.parser == "echo":
        return _Use()
    if spec.parser == "find":
        return _find(spec, args)
    if spec.parser == "git":
        return _git(spec, args)
    return _getopt(name, spec, args)


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


def _files(use: _Use) -> list[str]:
    return [value for _, kind, value in use.values if kind == "read" and value != "-"]


# --- Context --------------------------------------------------------------------------------------------------------


@dataclass
class _Context:
    settings: ExecSettings
    stored: Sequence[AllowEntry]
    resolve: Callable[[str], str | None]
    root: str | None  # the workspace, resolved
    cwd: str | None  # where this segment runs, None once a `cd` made it unknown


def _cd_target(cmd: _Cmd, cwd: str | None) -> str | None:
    """Where `cd DIR` leaves the shell: DIR resolved when literal, else unknown (None)."""
    args = cmd.argv[1:]
    if cwd is None or len(args) != 1 or args[0].startswith("-") or cmd.all_risks():
        return None
    return os.path.realpath(os.path.join(cwd, args[0]))


def _walk(cmd: _Cmd | None) -> list[_Cmd]:
    levels: list[_Cmd] = []
    while cmd is not None:
        levels.append(cmd)
        cmd = cmd.inner
    return levels


# --- Programs that load code from the working tree ------------------------------------------------------------------


def _script_of(cmd: _Cmd, ctx: _Context) -> str | None:
    """The file a command runs as code: an interpreter's or shell's script (no options before it), or the program
    itself when it is a file in the workspace. None for any other command."""
    name, args = _basename(cmd.argv[0]), cmd.argv[1:]
    if name in SHELLS or (_interpreter(name) not in (None, "deno") and name not in ("bun", "bunx")):
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


def _loads_code(cmd: _Cmd) -> str | None:
    """Why a program runs code that is not on the command line (build tools, interpreters), or None."""
    name, args = _basename(cmd.argv[0]), cmd.argv[1:]
    if name in BUILD_TOOLS:
        return f"{name} {BUILD_TOOLS[name]}"
    if name in PIP_NAMES and any(arg in PIP_BUILDS for arg in args):
        return f"{name} install runs the package's build code"
    family = _interpreter(name)
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


def _protected_problem(parsed: _Parsed, command: str, protected: Sequence[str], cwd: str | None) -> str | None:
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


def _config_allows(cmd: _Cmd, ctx: _Context) -> bool:
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


def _stored_allows(cmd: _Cmd, ctx: _Context, script: str | None) -> bool:
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


def _segment_problem(cmd: _Cmd, ctx: _Context) -> str | None:
    """Why one plain segment (no risks) may not run unasked, or None when it may."""
    name = _basename(cmd.argv[0])
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
    use = _program_use(name, spec, cmd.argv[1:])
    problem = use.problem or next(
        (p for option, kind, value in use.values if (p := _value_problem(option, kind, value, ctx.cwd, ctx.root))),
        None,
    )
    if problem is not None:
        return f"{_quote(cmd.text)} needs approval ({problem})"
    if "/" not in cmd.argv[0] and name in ctx.settings.safe_bins and not _files(use):
        return None
    if _config_allows(cmd, ctx):
        return None
    if name in ctx.settings.safe_bins:
        return f"{_quote(cmd.text)} is not on the allowlist (safe bins run unasked only when they read standard input)"
    return f"{_quote(cmd.text)} is not on the allowlist"


def _risks_here(cmd: _Cmd, ctx: _Context) -> list[Risk]:
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


def _problem(parsed: _Parsed, ctx: _Context) -> str | None:
    """Why the command may not run unasked (the first risk, else the first segment not allowed), or None."""
    if parsed.error is not None:
        return f"the command could not be read ({parsed.error})"
    start = ctx.cwd
    for cmd in parsed.segments:
        risks = _risks_here(cmd, ctx)
        if risks:
            return f"{_quote(cmd.text)} needs approval ({risks[0].text})"
        if cmd.argv[:1] in (["cd"], ["pushd"], ["popd"]):
            ctx.cwd = _cd_target(cmd, ctx.cwd) if cmd.argv[0] != "popd" else None
    if parsed.line_risks:
        return f"the command needs approval ({parsed.line_risks[0].text})"
    ctx.cwd = start
    for cmd in parsed.segments:
        if cmd.argv:
            problem = _segment_problem(cmd, ctx)
            if problem is not None:
                return problem
        if cmd.argv[:1] in (["cd"], ["pushd"], ["popd"]):
            ctx.cwd = _cd_target(cmd, ctx.cwd) if cmd.argv[0] != "popd" else None
    return None


def _storable(cmd: _Cmd, ctx: _Context) -> AllowEntry | None:
    """What "Allow always" stores for one segment: the innermost command, exactly, if it is plain and known;
    for a script, with the SHA-256 of its content."""
    while cmd.marker is not None:
        if cmd.privileged or cmd.marker.kind != "wrapper" or cmd.own or cmd.inner is None:
            return None
        cmd = cmd.inner
    if cmd.privileged or cmd.own or not cmd.argv:
        return None
    name = _basename(cmd.argv[0])
    script = _script_of(cmd, ctx)
    digest = _sha256(script) if script is not None else None
    if script is not None and digest is None:
        return None
    if script is None and (name in _NEVER_STORE or _loads_code(cmd) is not None):
        return None
    resolved = ctx.resolve(cmd.argv[0])
    if resolved is None or (script is None and _basename(resolved) in _NEVER_STORE):
        return None
    real = _basename(os.path.realpath(resolved))
    if real in _NEVER_STORE_REAL and not (script is not None and name in SHELLS and real in SHELLS):
        return None
    return AllowEntry(executable=resolved, args=tuple(cmd.argv[1:]), sha256=digest)


def _always(parsed: _Parsed, ctx: _Context) -> list[AllowEntry]:
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
    parsed = _parse(command)
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
