"""Exec policy tables, pure data: the shell's own words (shells, keywords, builtins), the wrappers that run another
command, the interpreters that take code inline, and the names "Allow always" never stores."""

from __future__ import annotations

import re
from dataclasses import dataclass

# --- Words of the shell ---------------------------------------------------------------------------------------------


def _names(text: str) -> tuple[str, ...]:
    return tuple(text.split())


SHELLS = frozenset(_names("sh bash zsh dash ksh mksh pdksh ash yash rbash fish csh tcsh pwsh"))


KEYWORDS = {
    **{word: f"shell keyword: {word}" for word in _names("if then else elif fi case esac for select while until do")},
    **{word: f"shell keyword: {word}" for word in _names("done in function coproc ! [[ ]]")},
    "{": "group { ...; }",
    "}": "group { ...; }",
}

# Builtins that run code from text or change the shell for the commands after them.
BUILTINS = {
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
class Wrapper:
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
) -> Wrapper:
    def words(text: str) -> frozenset[str]:
        return frozenset(text.split())

    return Wrapper(
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


WRAPPERS: dict[str, Wrapper] = {
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
OPAQUE_WRAPPERS = frozenset(
    _names("systemd-run nsenter unshare firejail bwrap proxychains proxychains4 torsocks script parallel screen tmux")
    + _names("valgrind gdb at batch")
)

# Interpreter families: (option letters that mean "code follows inline", letters that take a value, long options).
INTERPRETERS: dict[str, tuple[str, str, frozenset[str]]] = {
    "python": ("c", "WXQ", frozenset({"--command"})),
    "perl": ("eE", "0CdDiIlmMx", frozenset()),
    "ruby": ("e", "ICEFrTWx0", frozenset()),
    "node": ("ep", "r", frozenset({"--eval", "--print"})),
    "php": ("rRBE", "cdfzt", frozenset()),
    "lua": ("e", "l", frozenset()),
    "rscript": ("e", "", frozenset({"--expr"})),
    "osascript": ("e", "l", frozenset()),
}
INTERPRETER_NAMES = (
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
NEVER_STORE = SHELLS | frozenset(WRAPPERS) | OPAQUE_WRAPPERS | frozenset(BUILTINS) | frozenset(KEYWORDS)
# A resolved program whose real file has one of these names (a `foo -> /bin/bash` link) is not stored either.
# busybox is left out: on some systems every basic command is a link to it.
NEVER_STORE_REAL = NEVER_STORE - {"busybox"}
