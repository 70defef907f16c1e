"""Exec program tables: each known program's every option, what its values are, and which ones make a command ask."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

# What an option's value (or an operand) is:
#   number, fields, text, format: harmless values, checked for their shape (format: a git pretty format without %G,
#     which would run gpg);
#   read: a file path that is read: it must be inside the workspace and not under /proc, /sys or /dev;
#   gitarg: a git revision or path: when it looks like a path it is checked as `read`;
#   write, run, filelist: a file written, a program run, a file naming further files to read: these always ask.
# An option with a `risk` always asks too; that text completes the approver's reason ("-o writes the output to a file").
ValueKind = Literal["number", "fields", "text", "format", "read", "gitarg", "write", "run", "filelist"]
ArgMode = Literal["none", "required", "optional"]
ParserName = Literal["getopt", "echo", "find", "git"]

HARMLESS_KINDS: frozenset[str] = frozenset({"number", "fields", "text", "format", "read", "gitarg"})


@dataclass(frozen=True)
class Opt:
    """One option: whether it takes a value, what the value is, and why it asks (empty: it is harmless)."""

    arg: ArgMode = "none"
    kind: ValueKind | None = None
    risk: str = ""


@dataclass(frozen=True)
class Program:
    """How a program reads its command line."""

    options: Mapping[str, Opt]
    """Every spelling (`-n`, `--lines`), each option of the real program, harmless or not."""
    operands: tuple[ValueKind, ...] = ()
    """The kinds of the first operands, in order."""
    rest: ValueKind | None = "read"
    """The kind of every further operand; None: no more operands are allowed."""
    pattern_options: frozenset[str] = frozenset()
    """Options that give the pattern (grep -e/-f): once one is given, the first operand is a file, not the pattern."""
    abbreviations: bool = True
    """GNU getopt_long: a unique prefix of a long option stands for it. Off (exact names only) where this table
    does not model the program's own abbreviation rules (git)."""
    clusters: bool = True
    """Short options may be grouped (`-nr`)."""
    numeric: Literal["never", "first", "any"] = "never"
    """`-5` is an option: only as the first argument (head, tail), anywhere (git log), or never."""
    parser: ParserName = "getopt"


FLAG = Opt()
NUMBER = Opt("required", "number")
FIELDS = Opt("required", "fields")
TEXT = Opt("required", "text")
FORMAT = Opt("required", "format")
OPTIONAL_TEXT = Opt("optional", "text")
OPTIONAL_NUMBER = Opt("optional", "number")
OPTIONAL_FORMAT = Opt("optional", "format")
READ = Opt("required", "read")
READ_GIT = Opt("required", "gitarg")


def writes(what: str) -> Opt:
    return Opt("required", "write", what)


def runs(what: str) -> Opt:
    return Opt("required", "run", what)


def file_list(what: str = "reads the file list from a file") -> Opt:
    return Opt("required", "filelist", what)


def risky(what: str, arg: ArgMode = "none") -> Opt:
    return Opt(arg, "text" if arg != "none" else None, what)


def table(entries: Mapping[str, Opt]) -> dict[str, Opt]:
    """Expand `"-n --lines": NUMBER` into one entry per spelling."""
    out: dict[str, Opt] = {}
    for spellings, option in entries.items():
        for spelling in spellings.split():
            if spelling in out:
                raise ValueError(f"{spelling} is listed twice")
            out[spelling] = option
    return out


_STANDARD = {"--help": FLAG, "--version": FLAG}

# --- The default safe bins ------------------------------------------------------------------------------------------

HEAD = Program(
    table(
        {
            **_STANDARD,
            "-c --bytes": NUMBER,
            "-n --lines": NUMBER,
            "-q --quiet --silent": FLAG,
            "-v --verbose": FLAG,
            "-z --zero-terminated": FLAG,
            "---presume-input-pipe": FLAG,
        }
    ),
    numeric="first",
)

TAIL = Program(
    table(
        {
            **_STANDARD,
            "-c --bytes": NUMBER,
            "-n --lines": NUMBER,
            "-f": FLAG,
            "--follow": OPTIONAL_TEXT,
            "-F": FLAG,
            "--max-unchanged-stats": NUMBER,
            "--pid": NUMBER,
            "-q --quiet --silent": FLAG,
            "--retry": FLAG,
            "-s --sleep-interval": NUMBER,
            "-v --verbose": FLAG,
            "-z --zero-terminated": FLAG,
            "--debug": FLAG,
            "---disable-inotify": FLAG,
            "---presume-input-pipe": FLAG,
        }
    ),
    numeric="first",
)

CUT = Program(
    table(
        {
            **_STANDARD,
            "-b --bytes": FIELDS,
            "-c --characters": FIELDS,
            "-f --fields": FIELDS,
            "-d --delimiter": TEXT,
            "-n": FLAG,
            "--complement": FLAG,
            "-s --only-delimited": FLAG,
            "--output-delimiter": TEXT,
            "-z --zero-terminated": FLAG,
        }
    )
)

UNIQ = Program(
    table(
        {
            **_STANDARD,
            "-c --count": FLAG,
            "-d --repeated": FLAG,
            "-D": FLAG,
            "--all-repeated": OPTIONAL_TEXT,
            "--group": OPTIONAL_TEXT,
            "-f --skip-fields": NUMBER,
            "-i --ignore-case": FLAG,
            "-s --skip-chars": NUMBER,
            "-u --unique": FLAG,
            "-w --check-chars": NUMBER,
            "-z --zero-terminated": FLAG,
        }
    ),
    operands=("read", "write"),  # uniq INPUT OUTPUT: the second operand is a file it writes
    rest=None,
)

TR = Program(
    table(
        {
            **_STANDARD,
            "-c -C --complement": FLAG,
            "-d --delete": FLAG,
            "-s --squeeze-repeats": FLAG,
            "-t --truncate-set1": FLAG,
        }
    ),
    operands=("text", "text"),  # the two sets; tr never names a file
    rest=None,
)

WC = Program(
    table(
        {
            **_STANDARD,
            "-c --bytes": FLAG,
            "-m --chars": FLAG,
            "-l --lines": FLAG,
            "-L --max-line-length": FLAG,
            "-w --words": FLAG,
            "--files0-from": file_list(),
            "--total": TEXT,
            "--debug": FLAG,
        }
    )
)

# --- Other read-only programs ---------------------------------------------------------------------------------------

CAT = Program(
    table(
        {
            **_STANDARD,
            "-A --show-all": FLAG,
            "-b --number-nonblank": FLAG,
            "-e": FLAG,
            "-E --show-ends": FLAG,
            "-n --number": FLAG,
            "-s --squeeze-blank": FLAG,
            "-t": FLAG,
            "-T --show-tabs": FLAG,
            "-u": FLAG,
            "-v --show-nonprinting": FLAG,
        }
    )
)

# The shell's builtin echo: -n, -e and -E; every other word, `--help` included, is printed.
ECHO = Program(table({"-n": FLAG, "-e": FLAG, "-E": FLAG}), rest="text", abbreviations=False, parser="echo")

SORT = Program(
    table(
        {
            **_STANDARD,
            "-b --ignore-leading-blanks": FLAG,
            "-c": FLAG,
            "-C": FLAG,
            "--check": OPTIONAL_TEXT,
            "--compress-program": runs("runs a program to compress temporary files"),
            "--debug": FLAG,
            "-d --dictionary-order": FLAG,
            "-f --ignore-case": FLAG,
            "--files0-from": file_list(),
            "-g --general-numeric-sort": FLAG,
            "-h --human-numeric-sort": FLAG,
            "-i --ignore-nonprinting": FLAG,
            "-k --key": TEXT,
            "-m --merge": FLAG,
            "-M --month-sort": FLAG,
            "-n --numeric-sort": FLAG,
            "-o --output": writes("writes the output to a file"),
            "--parallel": NUMBER,
            "-R --random-sort": FLAG,
            "--random-source": READ,
            "-r --reverse": FLAG,
            "-s --stable": FLAG,
            "-S --buffer-size": NUMBER,
            "--sort": TEXT,
            "-t --field-separator": TEXT,
            "-T --temporary-directory": writes("writes temporary files into a directory"),
            "-u --unique": FLAG,
            "-V --version-sort": FLAG,
            "--batch-size": NUMBER,
            # Not -y (obsolete, undocumented): sort takes the next word as its value only when it is all digits, and
            # reads any other word as a file (`sort -y /etc/passwd`), which a value kind cannot say. Unknown, it asks.
            "-z --zero-terminated": FLAG,
        }
    )
)

LS = Program(
    table(
        {
            **_STANDARD,
            "-a --all": FLAG,
            "-A --almost-all": FLAG,
            "--author": FLAG,
            "-b --escape": FLAG,
            "--block-size": TEXT,
            "-B --ignore-backups": FLAG,
            "-c": FLAG,
            "-C": FLAG,
            "--color": OPTIONAL_TEXT,
            "-d --directory": FLAG,
            "-D --dired": FLAG,
            "-f": FLAG,
            "-F": FLAG,
            "--classify": OPTIONAL_TEXT,
            "--file-type": FLAG,
            "--format": TEXT,
            "--full-time": FLAG,
            "-g": FLAG,
            "--group-directories-first": FLAG,
            "-G --no-group": FLAG,
            "-h --human-readable": FLAG,
            "--si": FLAG,
            "-H --dereference-command-line": FLAG,
            "--dereference-command-line-symlink-to-dir": FLAG,
            "--hide": TEXT,
            "--hyperlink": OPTIONAL_TEXT,
            "--indicator-style": TEXT,
            "-i --inode": FLAG,
            "-I --ignore": TEXT,
            "-k --kibibytes": FLAG,
            "-l": FLAG,
            "-L --dereference": risky("follows symbolic links, which may lead out of the workspace"),
            "-m": FLAG,
            "-n --numeric-uid-gid": FLAG,
            "-N --literal": FLAG,
            "-o": FLAG,
            "-p": FLAG,
            "-q --hide-control-chars": FLAG,
            "--show-control-chars": FLAG,
            "-Q --quote-name": FLAG,
            "--quoting-style": TEXT,
            "-r --reverse": FLAG,
            "-R --recursive": FLAG,
            "-s --size": FLAG,
            "-S": FLAG,
            "--sort": TEXT,
            "--time": TEXT,
            "--time-style": TEXT,
            "-t": FLAG,
            "-T --tabsize": NUMBER,
            "-u": FLAG,
            "-U": FLAG,
            "-v": FLAG,
            "-w --width": NUMBER,
            "-x": FLAG,
            "-X": FLAG,
            "-Z --context": FLAG,
            "--zero": FLAG,
            "-1": FLAG,
        }
    )
)

GREP = Program(
    table(
        {
            **_STANDARD,
            "-E --extended-regexp": FLAG,
            "-F --fixed-strings --fixed-regexp": FLAG,
            "-G --basic-regexp": FLAG,
            "-P --perl-regexp": FLAG,
            "-e --regexp": TEXT,
            "-f --file": READ,
            "-i -y --ignore-case": FLAG,
            "--no-ignore-case": FLAG,
            "-w --word-regexp": FLAG,
            "-x --line-regexp": FLAG,
            "-z --null-data": FLAG,
            "-s --no-messages": FLAG,
            "-v --invert-match": FLAG,
            "-V": FLAG,
            "-m --max-count": NUMBER,
            "-b --byte-offset": FLAG,
            "-n --line-number": FLAG,
            "--line-buffered": FLAG,
            "-H --with-filename": FLAG,
            "-h --no-filename": FLAG,
            "--label": TEXT,
            "-o --only-matching": FLAG,
            "-q --quiet --silent": FLAG,
            "--binary-files": TEXT,
            "-a --text": FLAG,
            "-I": FLAG,
            "-d --directories": TEXT,
            "-D --devices": TEXT,
            "-r --recursive": FLAG,
            "-R --dereference-recursive": risky("follows symbolic links, which may lead out of the workspace"),
            "--include": TEXT,
            "--exclude": TEXT,
            "--exclude-from": READ,
            "--exclude-dir": TEXT,
            "-L --files-without-match": FLAG,
            "-l --files-with-matches": FLAG,
            "-c --count": FLAG,
            "-T --initial-tab": FLAG,
            "-Z --null": FLAG,
            "-A --after-context": NUMBER,
            "-B --before-context": NUMBER,
            "-C --context": NUMBER,
            "--group-separator": TEXT,
            "--no-group-separator": FLAG,
            "--color --colour": OPTIONAL_TEXT,
            "-U --binary": FLAG,
            "-u --unix-byte-offsets": FLAG,
            "-X": TEXT,
        }
    ),
    operands=("text",),  # the pattern, unless -e or -f gave it
    pattern_options=frozenset({"-e", "--regexp", "-f", "--file"}),
    numeric="any",  # -5 is -C 5
)

# find reads `find [-H -L -P -D opts -Olevel] [path...] [expression]`; the expression's words are listed here.
FIND = Program(
    table(
        {
            "-H": FLAG,
            "-P": FLAG,
            "-L -follow": risky("follows symbolic links, which may lead out of the workspace"),
            "-D": TEXT,
            "-O -O0 -O1 -O2 -O3": FLAG,
            # operators
            "( ) ! , -a -and -o -or -not": FLAG,
            # options
            "-daystart -depth -d -ignore_readdir_race -noignore_readdir_race -mount -xdev -noleaf -nowarn -warn": FLAG,
            "-maxdepth -mindepth": NUMBER,
            "-regextype": TEXT,
            "-files0-from": file_list("reads the starting points from a file"),
            "-help --help -version --version": FLAG,
            # tests
            "-amin -atime -cmin -ctime -mmin -mtime -used -gid -uid -inum -links": NUMBER,
            "-group -user -fstype -context -perm -size -type -xtype": TEXT,
            "-name -iname -path -ipath -wholename -iwholename -lname -ilname -regex -iregex": TEXT,
            "-newer -anewer -cnewer -samefile": READ,
            "-empty -executable -readable -writable -false -true -nogroup -nouser": FLAG,
            # actions
            "-print -print0 -ls -prune -quit": FLAG,
            "-printf": TEXT,
            "-delete": risky("deletes files"),
            "-exec -execdir -ok -okdir": runs("runs a command for each file found"),
            "-fprint -fprint0 -fls -fprintf": writes("writes its output to a file"),
        }
    ),
    abbreviations=False,
    parser="find",
)

# --- git: read-only subcommands only, options by their exact names (git's own abbreviation rules are not modeled) ---

_GIT_DIFF = {
    "-p -u --patch": FLAG,
    "-s --no-patch": FLAG,
    "--stat --compact-summary": OPTIONAL_TEXT,
    "--numstat --shortstat --name-only --name-status --summary --raw --check": FLAG,
    "-U --unified": OPTIONAL_NUMBER,
    "--color --color-words --word-diff --color-moved": OPTIONAL_TEXT,
    "--no-color --no-color-moved": FLAG,
    "--word-diff-regex --diff-filter --diff-algorithm --relative": TEXT,
    "-w --ignore-all-space -b --ignore-space-change --ignore-blank-lines --ignore-space-at-eol": FLAG,
    "-R -a --text --minimal --patience --histogram --full-index --binary --no-relative": FLAG,
    "-M --find-renames -C --find-copies --abbrev --dirstat": OPTIONAL_TEXT,
    "--no-renames --find-copies-harder --exit-code --quiet --no-ext-diff --no-textconv": FLAG,
    "--ext-diff": risky("runs an external diff program"),
    "--textconv": risky("runs text conversion programs"),
    "--output": writes("writes the output to a file"),
}
_GIT_LOG = {
    **_GIT_DIFF,
    "--oneline --graph --no-decorate --all --branches --tags --remotes --abbrev-commit --no-abbrev-commit": FLAG,
    "--no-merges --merges --first-parent --reverse --follow --relative-date --topo-order --date-order": FLAG,
    "--author-date-order --left-right --cherry-pick --boundary --full-history --simplify-by-decoration": FLAG,
    "--ancestry-path -i --regexp-ignore-case -E --extended-regexp -F --fixed-strings --all-match": FLAG,
    "--invert-grep --no-walk --source --mailmap --no-mailmap --use-mailmap --parents --children": FLAG,
    "--decorate": OPTIONAL_TEXT,
    "-n --max-count --skip --min-parents --max-parents": NUMBER,
    "--since --until --after --before --author --committer --grep --date": TEXT,
    "--format": FORMAT,
    "--pretty": OPTIONAL_FORMAT,
    "--show-signature": risky("runs gpg to verify signatures"),
}

GIT_SUBCOMMANDS: dict[str, Program] = {
    "status": Program(
        table(
            {
                "-s --short -b --branch --long -v --verbose -z --no-column --ahead-behind": FLAG,
                "--no-ahead-behind --renames --no-renames --show-stash": FLAG,
                "--porcelain -u --untracked-files --ignored --ignore-submodules --column --find-renames": OPTIONAL_TEXT,
            }
        ),
        rest="gitarg",
        abbreviations=False,
    ),
    "log": Program(table(_GIT_LOG), rest="gitarg", abbreviations=False, clusters=False, numeric="any"),
    "show": Program(table(_GIT_LOG), rest="gitarg", abbreviations=False, clusters=False, numeric="any"),
    "diff": Program(
        table(
            {
                **_GIT_DIFF,
                "--cached --staged --merge-base": FLAG,
                "--no-index": risky("compares files outside the repository"),
            }
        ),
        rest="gitarg",
        abbreviations=False,
        clusters=False,
    ),
    "branch": Program(
        table(
            {
                "-a --all -r --remotes --show-current -v --verbose -i --ignore-case --no-color --no-column": FLAG,
                "--no-abbrev": FLAG,
                "--merged --no-merged --contains --no-contains --color --column --abbrev": OPTIONAL_TEXT,
                "--points-at --sort": TEXT,
                "--format": FORMAT,
            }
        ),
        rest=None,  # an operand would create a branch
        abbreviations=False,
    ),
    "rev-parse": Program(
        table(
            {
                "--show-toplevel --show-prefix --show-cdup --git-dir --absolute-git-dir --is-inside-work-tree": FLAG,
                "--is-inside-git-dir --is-bare-repository --verify -q --quiet --symbolic --symbolic-full-name": FLAG,
                "--all --branches --tags --remotes --show-object-format": FLAG,
                "--abbrev-ref --short": OPTIONAL_TEXT,
            }
        ),
        rest="gitarg",
        abbreviations=False,
        clusters=False,
    ),
    "ls-files": Program(
        table(
            {
                "-c --cached -d --deleted -m --modified -o --others -i --ignored -s --stage -u --unmerged": FLAG,
                "-k --killed -z -t -v -f --exclude-standard --directory --no-empty-directory --full-name": FLAG,
                "--error-unmatch --deduplicate --eol": FLAG,
                "-x --exclude --exclude-per-directory": TEXT,
                "-X --exclude-from": READ,
                "--abbrev": OPTIONAL_TEXT,
                "--recurse-submodules": risky("runs git in submodules"),
            }
        ),
        rest="gitarg",
        abbreviations=False,
    ),
    "remote": Program(table({"-v --verbose": FLAG}), rest=None, abbreviations=False),
}

# Options of git itself, before the subcommand.
GIT_GLOBAL: dict[str, Opt] = table(
    {
        "--no-pager -P --no-optional-locks --literal-pathspecs --glob-pathspecs --noglob-pathspecs": FLAG,
        "--icase-pathspecs --no-replace-objects": FLAG,
        "-p --paginate": risky("runs a pager"),
        "-c": risky("sets configuration on the command line", "required"),
        "--config-env": risky("sets configuration from the environment", "required"),
        "-C": risky("runs git in another directory", "required"),
        "--git-dir --work-tree --namespace --super-prefix": risky("points git at another repository", "required"),
        "--exec-path": risky("changes where git finds the programs it runs", "optional"),
        "--bare": risky("treats the directory as a bare repository"),
    }
)

GIT = Program(GIT_GLOBAL, rest="text", abbreviations=False, clusters=False, parser="git")

PROGRAMS: dict[str, Program] = {
    "cut": CUT,
    "uniq": UNIQ,
    "head": HEAD,
    "tail": TAIL,
    "tr": TR,
    "wc": WC,
    "cat": CAT,
    "echo": ECHO,
    "sort": SORT,
    "ls": LS,
    "grep": GREP,
    "find": FIND,
    "git": GIT,
}

# --- Programs that load code or configuration from the working tree -------------------------------------------------

# These never run unasked and "Allow always" stores nothing for them: what they run is not on the command line.
BUILD_TOOLS: dict[str, str] = {
    **dict.fromkeys(("make", "gmake", "cmake", "ninja", "meson", "just", "bazel"), "runs the build file"),
    **dict.fromkeys(("npm", "pnpm", "yarn", "npx", "pnpx", "bun", "bunx", "deno"), "runs the project's scripts"),
    **dict.fromkeys(("cargo", "go", "mvn", "gradle", "sbt", "dotnet", "swift"), "builds and runs the project's code"),
    **dict.fromkeys(("pytest", "tox", "nox", "uv", "uvx", "poetry", "pipenv"), "runs the project's Python code"),
    **dict.fromkeys(("rake", "bundle", "composer"), "runs the project's code"),
}
# pip runs the project's build code only for these subcommands.
PIP_NAMES = frozenset({"pip", "pip3"})
PIP_BUILDS = frozenset({"install", "download", "wheel"})

# --- git repositories that cannot load code ----------------------------------------------------------------------

# Keys of .git/config (section.subsection.key, section and key lowercased) that load nothing and run nothing.
HARMLESS_GIT_CONFIG: tuple[str, ...] = (
    "core.repositoryformatversion",
    "core.filemode",
    "core.bare",
    "core.logallrefupdates",
    "core.ignorecase",
    "core.precomposeunicode",
    "core.symlinks",
    "extensions.objectformat",
    "remote.*.url",
    "remote.*.fetch",
    "branch.*.remote",
    "branch.*.merge",
    "user.name",
    "user.email",
    "init.defaultbranch",
)

# Attributes that name a driver (defined in config) which runs a program.
GIT_DRIVER_ATTRIBUTES: tuple[str, ...] = ("filter", "diff", "merge")

# --- Files -----------------------------------------------------------------------------------------------------------

SYSTEM_TREES: tuple[str, ...] = ("/proc", "/sys", "/dev")
"""Never read unasked: process memory and environments, kernel state, devices."""
STANDARD_STREAMS: frozenset[str] = frozenset({"/dev/null", "/dev/stdin", "/dev/stdout", "/dev/stderr"})

# --- The environment a command should get -------------------------------------------------------------------------

NEUTRAL_ENV: dict[str, str] = {
    "GIT_CONFIG_NOSYSTEM": "1",  # no /etc/gitconfig
    "GIT_CONFIG_SYSTEM": "/dev/null",
    "GIT_CONFIG_GLOBAL": "/dev/null",  # no ~/.gitconfig: its aliases, pager, fsmonitor, hooks path
    "GIT_CONFIG_COUNT": "0",  # no GIT_CONFIG_KEY_n/GIT_CONFIG_VALUE_n settings
    "GIT_ATTR_NOSYSTEM": "1",  # no system gitattributes
    "GIT_NO_REPLACE_OBJECTS": "1",
    "GIT_PAGER": "cat",
    "PAGER": "cat",
    "MANPAGER": "cat",
    "GIT_TERMINAL_PROMPT": "0",  # never wait for a password
    "GIT_OPTIONAL_LOCKS": "0",  # `git status` does not rewrite the index
    "LESSSECURE": "1",  # if less runs anyway: no shell escapes, no editor
    "PYTHONNOUSERSITE": "1",  # no user site-packages from HOME
}
