"""Exec policy: decide from the command text alone whether an agent's shell command may run without asking a human."""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tools.shell_words import DIGITS, FD_TARGET, Lexer, Redirect, Risk, Word, dedupe_risks, short

ExecSecurity = Literal["deny", "allowlist", "full"]
ExecAsk = Literal["off", "on-miss", "always"]
DEFAULT_SAFE_BINS = ("cut", "uniq", "head", "tail", "tr", "wc")


class AllowRule(BaseModel):
    """A config allowlist entry: `{executable: git, args: "status*"}`."""

    model_config = ConfigDict(extra="forbid")

    executable: str
    """A bare name (`git`, found on PATH) or an absolute path (`/usr/bin/git`)."""
    args: str = "*"
    """An fnmatch glob matched against the arguments joined by single spaces; "" means no arguments."""

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


class ExecSettings(BaseModel):
    """`agents[].exec` in the config."""

    model_config = ConfigDict(extra="forbid")

    security: ExecSecurity = "allowlist"
    ask: ExecAsk = "on-miss"
    safe_bins: list[str] = Field(default_factory=lambda: list(DEFAULT_SAFE_BINS))
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
    kind = "redirect into a file" if writes else "redirect from a file"
    return [Risk(f"{kind} ({shown})"), *target.risks]


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


# --- Safe bins ------------------------------------------------------------------------------------------------------

_NUMBER = re.compile(r"[+-]?[0-9][0-9.]*[A-Za-z]{0,3}")
_FIELD_LIST = re.compile(r"[0-9,-]+")
_VALUE_CHECKS: dict[str, Callable[[str], bool]] = {
    "num": lambda value: _NUMBER.fullmatch(value) is not None,
    "list": lambda value: _FIELD_LIST.fullmatch(value) is not None,
    "any": lambda value: True,
}
_HEAD = {"-n": "num", "-c": "num", "--lines": "num", "--bytes": "num"}
# Options of the default safe bins that take a value, and what the value may be.
_SAFE_BIN_VALUES: dict[str, dict[str, str]] = {
    "head": _HEAD,
    "tail": {**_HEAD, "-s": "num", "--sleep-interval": "num", "--pid": "num", "--max-unchanged-stats": "num"},
    "cut": {
        "-d": "any",
        "--delimiter": "any",
        "--output-delimiter": "any",
        **dict.fromkeys(("-f", "-b", "-c", "--fields", "--bytes", "--characters"), "list"),
    },
    "uniq": dict.fromkeys(("-f", "-s", "-w", "--skip-fields", "--skip-chars", "--check-chars"), "num"),
}
# Options that make a filter read or write files: a safe bin given one of them is not stdin-only.
_FILE_OPTIONS = frozenset(
    {"--files0-from", "--output", "--compress-program", "--random-source", "--temporary-directory", "--file"}
)
_FILE_SHORT_OPTIONS: dict[str, frozenset[str]] = {"sort": frozenset({"-o", "-T"})}


def _safe_bin_use(name: str, args: list[str]) -> bool:
    """A safe bin used as a pure stdin filter: options and their values only (`tr` also takes its two sets)."""
    values = _SAFE_BIN_VALUES.get(name, {})
    positionals = 0
    expect: str | None = None  # the kind of value the previous option takes
    after_option = False
    for a in args:
        if a == "-" and expect is None:  # stdin, spelled out
            after_option = False
            continue
        if expect is not None:
            if not _VALUE_CHECKS[expect](a):
                return False
            expect, after_option = None, False
            continue
        if a.startswith("-") and len(a) > 1 and not (name == "tr" and positionals):
            option, eq, value = a.partition("=") if a.startswith("--") else (a[:2], "", a[2:])
            if option in _FILE_OPTIONS or option in _FILE_SHORT_OPTIONS.get(name, frozenset()):
                return False
            if option in values:
                if value or eq:
                    if not _VALUE_CHECKS[values[option]](value):
                        return False
                else:
                    expect = values[option]
            after_option = not value and not eq
            continue
        if name == "tr" and positionals < 2:
            positionals += 1
        elif not (after_option and _NUMBER.fullmatch(a)):
            return False
        after_option = False
    return expect is None


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


def _allowlisted(
    cmd: _Cmd, settings: ExecSettings, stored: Sequence[AllowEntry], resolve: Callable[[str], str | None]
) -> bool:
    if cmd.all_risks() or not cmd.argv:
        return False
    name, args = cmd.argv[0], cmd.argv[1:]
    if "/" not in name and name in settings.safe_bins and _safe_bin_use(name, args):
        return True
    resolved = resolve(name)
    joined = " ".join(args)
    for rule in settings.allowlist:
        if "/" in rule.executable:  # an absolute path: the program the name resolves to
            same = resolved is not None and os.path.normpath(rule.executable) == resolved
        else:  # a bare name: only that bare name, looked up on PATH
            same = "/" not in name and rule.executable == name
        if same and fnmatch.fnmatchcase(joined, rule.args):
            return True
    return resolved is not None and any(entry.executable == resolved and entry.args == tuple(args) for entry in stored)


def _storable(cmd: _Cmd, resolve: Callable[[str], str | None]) -> AllowEntry | None:
    """What "Allow always" stores for one segment: the innermost command, exactly, if it is plain and known."""
    while cmd.marker is not None:
        if cmd.privileged or cmd.marker.kind != "wrapper" or cmd.own or cmd.inner is None:
            return None
        cmd = cmd.inner
    if cmd.privileged or cmd.own or not cmd.argv or _basename(cmd.argv[0]) in _NEVER_STORE:
        return None
    resolved = resolve(cmd.argv[0])
    if resolved is None or _basename(resolved) in _NEVER_STORE:
        return None
    if _basename(os.path.realpath(resolved)) in _NEVER_STORE_REAL:
        return None
    return AllowEntry(executable=resolved, args=tuple(cmd.argv[1:]))


def _always(parsed: _Parsed, resolve: Callable[[str], str | None]) -> list[AllowEntry]:
    if parsed.error is not None:
        return []
    risks = parsed.line_risks + [risk for cmd in parsed.segments for risk in cmd.all_risks()]
    if any(risk.kind == "subst" for risk in risks):
        return []
    entries: list[AllowEntry] = []
    for cmd in parsed.segments:
        entry = _storable(cmd, resolve)
        if entry is not None and entry not in entries:
            entries.append(entry)
    return entries


def _quote(text: str) -> str:
    text = " ".join(text.split())
    return f"`{short(text, _TEXT_LIMIT)}`"


def _problem(
    parsed: _Parsed, settings: ExecSettings, stored: Sequence[AllowEntry], resolve: Callable[[str], str | None]
) -> str | None:
    """Why the command is not allowlisted (the first risk, else the first segment not on the allowlist), or None."""
    if parsed.error is not None:
        return f"the command could not be read ({parsed.error})"
    for cmd in parsed.segments:
        risks = cmd.all_risks()
        if risks:
            return f"{_quote(cmd.text)} needs approval ({risks[0].text})"
    if parsed.line_risks:
        return f"the command needs approval ({parsed.line_risks[0].text})"
    for cmd in parsed.segments:
        if not _allowlisted(cmd, settings, stored, resolve):
            return f"{_quote(cmd.text)} is not on the allowlist"
    return None


def evaluate(
    command: str,
    settings: ExecSettings,
    stored: Sequence[AllowEntry] = (),
    *,
    path: str | None = None,
    cwd: str | None = None,
) -> Verdict:
    """Decide whether `command` runs, asks a human first, or is refused, and what "Allow always" would store.

    `path` is the PATH used to resolve program names (None: the environment's). `cwd` is the directory the command
    would run in; without it a relative program path such as `./run.sh` resolves to nothing (never allowlisted by path,
    never stored).
    """
    if settings.security == "deny":
        return Verdict(
            decision="deny",
            reason="Exec is disabled for this agent (exec.security: deny).",
            always=[],
            offer_always=False,
        )
    parsed = _parse(command)
    cache: dict[str, str | None] = {}

    def resolve(name: str) -> str | None:
        if name not in cache:
            cache[name] = _resolve(name, path, cwd)
        return cache[name]

    always = _always(parsed, resolve)
    decision: Literal["allow", "ask", "deny"]
    if settings.security == "full":
        if settings.ask == "always":
            decision, reason = "ask", "This agent asks before every command (exec.ask: always)."
        else:
            decision, reason = "allow", "This agent may run any command (exec.security: full)."
    else:
        problem = _problem(parsed, settings, stored, resolve)
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
