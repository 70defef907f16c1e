"""Exec policy: every segment is judged, expansions and wrappers always ask, and "Allow always" never stores a shell."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest
from pydantic import ValidationError

from bot.store import SqliteStore
from bot.store.schema import MIGRATIONS
from tools.exec_policy import (
    DEFAULT_SAFE_BINS,
    AllowEntry,
    AllowRule,
    ExecSettings,
    analyze,
    evaluate,
)

PROGRAMS = ("a", "b", "bash", "cat", "cmd", "curl", "cut", "doas", "echo", "env", "git", "grep", "head", "id", "ls")
PROGRAMS += ("make", "nice", "nohup", "python3", "rm", "sh", "sort", "sudo", "tail", "tee", "timeout", "tr", "uniq")
PROGRAMS += ("wc", "whoami", "xargs")


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    """A PATH directory holding one small executable per program the tests name."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for name in PROGRAMS:
        program = folder / name
        program.write_text("#!/bin/sh\nexit 0\n")
        program.chmod(0o755)
    return folder


@pytest.fixture
def path(bin_dir: Path) -> str:
    return str(bin_dir)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """The agent's workspace: not a git repository."""
    folder = tmp_path / "ws"
    folder.mkdir()
    return folder


def program(bin_dir: Path, name: str) -> str:
    return str(bin_dir / name)


def rules(*names: str) -> list[AllowRule]:
    return [AllowRule(executable=name) for name in names]


def allowing(*names: str, **settings: object) -> ExecSettings:
    """Default settings plus a config rule allowing each named program with any arguments."""
    return ExecSettings.model_validate({"allowlist": rules(*names), **settings})


EVERYTHING_INSIDE = allowing("cat", "echo", "a", "b", "rm", "whoami", "cmd", "ls", "id", "curl", "git")


# --- security-cases 2 and 3: each of these asks, even when the program inside is allowlisted --------------------------


@pytest.mark.parametrize(
    "command",
    [
        # 2: wrappers
        "bash -lc whoami",
        "sh -c whoami",
        "sh -c 'a; b'",
        "env X=1 cmd",
        "sudo cmd",
        "xargs cmd",
        "nohup cmd",
        "timeout 5 cmd",
        "nice -n 5 cmd",
        "X=1 cmd",
        # 3: expansions, redirects and every segment judged
        "head *",
        "cat $HOME/.ssh/id_rsa",
        "echo $(curl x|sh)",
        "`id`",
        "cat <(cmd)",
        "cmd > ~/.bashrc",
        "a; rm -rf ~",
        "a | sh",
        "a &",
        "a & b",
    ],
)
def test_security_cases_ask_under_default_settings_even_with_the_program_allowlisted(command: str, path: str) -> None:
    verdict = evaluate(command, EVERYTHING_INSIDE, path=path)

    assert verdict.decision == "ask", verdict.reason


@pytest.mark.parametrize(
    ("command", "risk"),
    [
        ("head *", "glob *"),
        ("ls file?.txt", "glob ?"),
        ("ls [ab].txt", "glob [...]"),
        ("echo {a,b}", "brace expansion {...}"),
        ("echo {1..3}", "brace expansion {...}"),
        ("cat ~/notes", "tilde expansion ~"),
        ("cat $HOME/.ssh/id_rsa", "variable expansion $HOME"),
        ("cat ${HOME}/x", "variable expansion ${HOME}"),
        ('cat "$HOME"', "variable expansion $HOME"),
        ("echo $1", "variable expansion $1"),
        ("echo $((1 + 2))", "arithmetic expansion $((...))"),
        ("echo $(id)", "command substitution $(...)"),
        ('echo "$(id)"', "command substitution $(...)"),
        ("echo `id`", "command substitution `...`"),
        ("cat <(cmd)", "process substitution <(...)"),
        ("tee >(cmd)", "process substitution >(...)"),
        ("cmd > ~/.bashrc", "redirect into a file (> ~/.bashrc)"),
        ("cmd >> log.txt", "redirect into a file (>> log.txt)"),
        ("cmd 2> err.txt", "redirect into a file (2> err.txt)"),
        ("cmd &> out.txt", "redirect into a file (&> out.txt)"),
        ("wc -l < notes.txt", "redirect from a file (< notes.txt)"),
        ("cat <<EOF\nhello\nEOF", "here-document (<<EOF)"),
        ("cat <<EOF\n$(id)\nEOF", "command substitution in a here-document"),
        ("sleep 5 &", "background &"),
        ("(cd /tmp && ls)", "subshell ( )"),
        ("{ ls; }", "group { ...; }"),
        ("eval ls", "eval"),
        ("source ./env.sh", "source"),
        (". ./env.sh", "source"),
        ("exec ls", "wrapper: exec"),
        ("export PATH=/tmp", "shell builtin: export"),
        ("X=1 cmd", "variable assignment X="),
        ("PATH=/tmp", "variable assignment PATH="),
        ("bash -lc whoami", "wrapper: bash -c"),
        ("sudo ls", "wrapper: sudo"),
        ("doas ls", "wrapper: doas"),
        ("env A=1 ls", "wrapper: env"),
        ("xargs rm", "wrapper: xargs"),
        ("stdbuf -oL ls", "wrapper: stdbuf"),
        ("command ls", "wrapper: command"),
        ("chroot /srv ls", "wrapper: chroot"),
        ("python3 -c 'print(1)'", "inline code: python3 -c"),
        ("perl -ne 'print'", "inline code: perl -e"),
        ("node -e 'x'", "inline code: node -e"),
        ("ruby -e 'x'", "inline code: ruby -e"),
        ("curl x | sh", "pipe into a shell: sh"),
        ("curl x | bash -s", "pipe into a shell: bash"),
        ("curl x | python3", "pipe into an interpreter: python3"),
        ("bash <<< 'rm -rf /'", "here-string into a shell: bash"),
        ("if true; then ls; fi", "shell keyword: if"),
    ],
)
def test_each_risk_is_named(command: str, risk: str) -> None:
    analysis = analyze(command)

    assert risk in analysis.risks
    assert analysis.error is None


@pytest.mark.parametrize(
    "command",
    [
        "echo '$HOME'",
        "echo \\$HOME",
        "echo '*' \"?\" '~' '{a,b}'",
        'echo "it\'s"',
        "git log HEAD~1",
        "find . -name x -exec ls {} +",
        "echo hi > /dev/null",
        "echo hi 2>/dev/null",
        "echo hi 2>&1",
        "echo hi >&2",
        "echo hi 1>&2 2>&-",
        "wc -l < /dev/null",
        "echo hi # $(id) in a comment",
        "git status | wc -l",
    ],
)
def test_literal_text_and_harmless_redirects_carry_no_risk(command: str) -> None:
    analysis = analyze(command)

    assert analysis.risks == []
    assert analysis.error is None


def test_single_quotes_are_literal_and_double_quotes_still_expand() -> None:
    single = analyze("echo '$HOME'").segments[0]
    double = analyze('echo "$HOME"').segments[0]

    assert single.argv == ["echo", "$HOME"]
    assert single.risks == []
    assert double.argv == ["echo", "$HOME"]
    assert double.risks == ["variable expansion $HOME"]


def test_the_line_is_split_into_segments_on_every_operator() -> None:
    analysis = analyze("a; b && c || d | e\nf & g")

    assert [segment.argv for segment in analysis.segments] == [["a"], ["b"], ["c"], ["d"], ["e"], ["f"], ["g"]]
    assert analysis.risks == ["background &"]


def test_quote_removal_gives_the_literal_words() -> None:
    analysis = analyze("""git commit -m "fix: it's \\"done\\"" --author='A B' x\\ y""")

    assert analysis.segments[0].argv == ["git", "commit", "-m", 'fix: it\'s "done"', "--author=A B", "x y"]


@pytest.mark.parametrize(
    ("command", "inner"),
    [
        ("bash -lc whoami", ["whoami"]),
        ("sh -c 'git status -s'", ["git", "status", "-s"]),
        ("sh -c 'a; b'", None),
        ("env -i A=1 B=2 git status", ["git", "status"]),
        ("sudo -u root rm -rf /tmp/x", ["rm", "-rf", "/tmp/x"]),
        ("xargs -0 -n 1 rm -f", ["rm", "-f"]),
        ("nohup make build", ["make", "build"]),
        ("timeout -s KILL 5 make", ["make"]),
        ("nice -n 5 make", ["make"]),
        ("nohup bash -c whoami", ["bash", "-c", "whoami"]),
        ("X=1 make", ["make"]),
        ("env", None),
    ],
)
def test_wrappers_expose_the_command_they_run(command: str, inner: list[str] | None) -> None:
    assert analyze(command).segments[0].inner == inner


@pytest.mark.parametrize(
    ("command", "error"),
    [
        ("echo 'hi", "unclosed single quote"),
        ('echo "hi', "unclosed double quote"),
        ("echo $(id", "unclosed $("),
        ("echo `id", "unclosed backtick `"),
        ("ls &&", "the command ends with &&"),
        ("ls |", "the command ends with |"),
        ("; ls", "syntax error near ;"),
        ("ls >", "redirect > has no target"),
        ("(ls", "unclosed ("),
        ("   ", "the command is empty"),
    ],
)
def test_parse_problems_are_errors(command: str, error: str) -> None:
    analysis = analyze(command)

    assert analysis.error == error
    assert error in analysis.risks


# --- Evaluating against the allowlist ----------------------------------------------------------------------------


def test_a_risky_segment_is_named_in_the_reason(path: str) -> None:
    verdict = evaluate("a; rm -rf ~", allowing("a", "rm"), path=path)

    assert verdict.decision == "ask"
    assert "rm -rf ~" in verdict.reason
    assert "tilde expansion ~" in verdict.reason


def test_every_segment_must_be_allowlisted(path: str) -> None:
    assert evaluate("a && b", allowing("a", "b"), path=path).decision == "allow"
    verdict = evaluate("a && b", allowing("a"), path=path)

    assert verdict.decision == "ask"
    assert verdict.reason == "`b` is not on the allowlist."


def test_a_pipe_into_a_shell_asks(path: str) -> None:
    verdict = evaluate("ls | sh", allowing("ls", "sh"), path=path)

    assert verdict.decision == "ask"
    assert "pipe into a shell: sh" in verdict.reason


def test_a_trailing_ampersand_asks(path: str) -> None:
    verdict = evaluate("ls &", allowing("ls"), path=path)

    assert verdict.decision == "ask"
    assert "background &" in verdict.reason


def test_a_redirect_into_a_dotfile_asks(path: str) -> None:
    verdict = evaluate("echo x > ~/.bashrc", allowing("echo"), path=path)

    assert verdict.decision == "ask"
    assert "redirect into a file" in verdict.reason


@pytest.mark.parametrize(
    "command", ["echo hi > /dev/null", "echo hi 2>&1", "echo hi 2>/dev/null >&2", "echo '$HOME' \"*\""]
)
def test_an_allowlisted_program_with_harmless_redirects_runs(command: str, path: str) -> None:
    verdict = evaluate(command, allowing("echo"), path=path)

    assert verdict.decision == "allow", verdict.reason
    assert verdict.offer_always is False


@pytest.mark.parametrize(
    "command",
    [
        "wc -l",
        "wc -c -",
        "head -n 5",
        "head -5",
        "tail -n +5",
        "tail -5",
        "cut -d, -f1",
        "cut -d ' ' -f 1,3",
        "uniq -c",
        "tr a-z A-Z",
        "tr -d '\\r'",
        "git log | head -n 5 | wc -l",
    ],
)
def test_safe_bins_run_as_stdin_filters(command: str, path: str, ws: Path) -> None:
    verdict = evaluate(command, allowing("git"), path=path, cwd=str(ws))

    assert verdict.decision == "allow", verdict.reason


@pytest.mark.parametrize(
    "command",
    [
        "head /etc/passwd",
        "head -n 5 notes.txt",
        "tail -q secrets.txt",
        "head -n lots",
        "head -n",
        "uniq input.txt output.txt",
        "wc --files0-from=list.txt",
        "cut -f1 data.csv",
        "tr a b c",
        "sort",
        "/usr/bin/head -n 5",
    ],
)
def test_safe_bins_given_files_or_not_safe_ask(command: str, path: str) -> None:
    verdict = evaluate(command, ExecSettings(), path=path)

    assert verdict.decision == "ask", verdict.reason


def test_safe_bins_are_configurable(path: str) -> None:
    settings = ExecSettings(safe_bins=["sort"])

    assert evaluate("sort -r -k 2", settings, path=path).decision == "allow"
    assert evaluate("sort -o out.txt", settings, path=path).decision == "ask"
    assert evaluate("wc -l", settings, path=path).decision == "ask"


def test_a_config_rule_matches_its_args_globs_one_whole_argument_each(path: str, ws: Path) -> None:
    settings = ExecSettings(allowlist=[AllowRule(executable="git", args="status **")])

    assert evaluate("git status", settings, path=path, cwd=str(ws)).decision == "allow"
    assert evaluate("git status -s", settings, path=path, cwd=str(ws)).decision == "allow"
    assert evaluate("git statusx", settings, path=path, cwd=str(ws)).decision == "ask"
    assert evaluate("git push", settings, path=path, cwd=str(ws)).decision == "ask"
    assert evaluate("git", settings, path=path, cwd=str(ws)).decision == "ask"


def test_a_config_rule_with_empty_args_allows_only_no_arguments(path: str) -> None:
    settings = ExecSettings(allowlist=[AllowRule(executable="whoami", args="")])

    assert evaluate("whoami", settings, path=path).decision == "allow"
    assert evaluate("whoami --help", settings, path=path).decision == "ask"


def test_a_config_rule_by_absolute_path_matches_the_resolved_program(bin_dir: Path, path: str, ws: Path) -> None:
    settings = ExecSettings(allowlist=[AllowRule(executable=program(bin_dir, "git"))])

    assert evaluate("git status", settings, path=path, cwd=str(ws)).decision == "allow"
    assert evaluate(f"{program(bin_dir, 'git')} status", settings, path=path, cwd=str(ws)).decision == "allow"
    assert evaluate("git status", settings, path="/nonexistent", cwd=str(ws)).decision == "ask"


def test_a_config_rule_by_bare_name_does_not_match_another_path(bin_dir: Path, tmp_path: Path, path: str) -> None:
    elsewhere = tmp_path / "evil"
    elsewhere.mkdir()
    (elsewhere / "git").write_text("#!/bin/sh\n")
    (elsewhere / "git").chmod(0o755)

    assert evaluate(f"{elsewhere / 'git'} status", allowing("git"), path=path).decision == "ask"
    assert evaluate(f"{bin_dir}/../evil/git status", allowing("git"), path=path).decision == "ask"


def test_stored_entries_match_the_exact_program_and_arguments(bin_dir: Path, path: str, ws: Path) -> None:
    stored = [AllowEntry(executable=program(bin_dir, "git"), args=("status", "-s"))]
    cwd = str(ws)

    assert evaluate("git status -s", ExecSettings(), stored, path=path, cwd=cwd).decision == "allow"
    assert evaluate("git 'status' \"-s\"", ExecSettings(), stored, path=path, cwd=cwd).decision == "allow"
    assert evaluate("git status", ExecSettings(), stored, path=path, cwd=cwd).decision == "ask"
    assert evaluate("git status -s -v", ExecSettings(), stored, path=path, cwd=cwd).decision == "ask"
    assert evaluate("git status -s", ExecSettings(), stored, path="/nonexistent", cwd=cwd).decision == "ask"


# --- Settings -----------------------------------------------------------------------------------------------------


def test_security_deny_refuses_everything(path: str) -> None:
    verdict = evaluate("wc -l", ExecSettings(security="deny"), path=path)

    assert verdict.decision == "deny"
    assert "disabled" in verdict.reason
    assert verdict.always == []
    assert verdict.offer_always is False


def test_security_full_runs_anything(path: str) -> None:
    verdict = evaluate("curl x | sh", ExecSettings(security="full"), path=path)

    assert verdict.decision == "allow"


def test_security_full_with_ask_always_still_asks(path: str) -> None:
    verdict = evaluate("whoami", ExecSettings(security="full", ask="always"), path=path)

    assert verdict.decision == "ask"
    assert verdict.offer_always is False


def test_ask_off_denies_what_would_ask_and_says_why(path: str, ws: Path) -> None:
    settings = allowing("cat", ask="off")

    risky = evaluate("cat $HOME/.ssh/id_rsa", settings, path=path)
    unlisted = evaluate("rm -rf build", settings, path=path)

    assert risky.decision == "deny"
    assert "variable expansion $HOME" in risky.reason
    assert "exec.ask: off" in risky.reason
    assert unlisted.decision == "deny"
    assert "`rm -rf build` is not on the allowlist" in unlisted.reason
    assert evaluate("cat notes.txt", settings, path=path, cwd=str(ws)).decision == "allow"


def test_ask_always_asks_even_for_allowlisted_commands_without_allow_always(path: str) -> None:
    settings = allowing("whoami", ask="always")

    allowlisted = evaluate("whoami", settings, path=path)
    unlisted = evaluate("git status", settings, path=path)

    assert allowlisted.decision == "ask"
    assert allowlisted.offer_always is False
    assert unlisted.decision == "ask"
    assert unlisted.always != []
    assert unlisted.offer_always is False


def test_an_unclosed_quote_asks_and_is_denied_when_ask_is_off(path: str) -> None:
    asked = evaluate("echo 'hi", allowing("echo"), path=path)
    denied = evaluate("echo 'hi", allowing("echo", ask="off"), path=path)

    assert asked.decision == "ask"
    assert "unclosed single quote" in asked.reason
    assert asked.always == []
    assert denied.decision == "deny"


def test_settings_defaults_and_validation() -> None:
    settings = ExecSettings()

    assert (settings.security, settings.ask, settings.approvers) == ("allowlist", "on-miss", None)
    assert settings.safe_bins == list(DEFAULT_SAFE_BINS)
    assert AllowRule(executable="git").args == "**"
    with pytest.raises(ValidationError):
        ExecSettings.model_validate({"allowlist": [{"executable": "git", "argz": "*"}]})
    with pytest.raises(ValidationError):
        AllowRule(executable="bin/git")
    with pytest.raises(ValidationError):
        ExecSettings.model_validate({"security": "yolo"})


# --- Allow always ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "name", "args"),
    [
        ("git status", "git", ("status",)),
        ("bash -lc whoami", "whoami", ()),
        ("sh -c 'git status -s'", "git", ("status", "-s")),
        ("env A=1 git log", "git", ("log",)),
        ("A=1 git log", "git", ("log",)),
        ("nohup ls build", "ls", ("build",)),
        ("timeout 5 ls", "ls", ()),
        ("nice -n 5 ls", "ls", ()),
        ("xargs rm -f", "rm", ("-f",)),
        ("env A=1 bash -lc 'timeout 5 whoami'", "whoami", ()),
        ("sh -c \"git commit -m 'a b'\"", "git", ("commit", "-m", "a b")),
    ],
)
def test_allow_always_stores_the_inner_command_exactly(
    command: str, name: str, args: tuple[str, ...], bin_dir: Path
) -> None:
    verdict = evaluate(command, ExecSettings(), path=str(bin_dir))

    assert verdict.decision == "ask"
    assert verdict.always == [AllowEntry(executable=program(bin_dir, name), args=args)]
    assert verdict.offer_always is True


@pytest.mark.parametrize(
    "command",
    [
        "sudo rm -rf /tmp/x",
        "sudo -u root whoami",
        "doas whoami",
        "nohup sudo whoami",
        "echo $(curl x)",
        "git status; echo `id`",
        "ls; cat <(whoami)",
        "cat <<EOF\n$(id)\nEOF\nls",
        "bash",
        "bash script.sh",
        "sh -c 'a; b'",
        "env",
        "python3 -c 'print(1)'",
        "cat $HOME/.ssh/id_rsa",
        "cat notes > out.txt",
        "head *",
        "missing-program --flag",
        "eval whoami",
        "echo 'unclosed",
    ],
)
def test_allow_always_stores_nothing(command: str, path: str) -> None:
    verdict = evaluate(command, ExecSettings(), path=path)

    assert verdict.always == []
    assert verdict.offer_always is False


def test_allow_always_stores_each_plain_segment_but_never_the_shell(bin_dir: Path, path: str) -> None:
    verdict = evaluate("ls -la | sh; git status && bash -c whoami", ExecSettings(), path=path)

    assert verdict.always == [
        AllowEntry(executable=program(bin_dir, "ls"), args=("-la",)),
        AllowEntry(executable=program(bin_dir, "git"), args=("status",)),
        AllowEntry(executable=program(bin_dir, "whoami"), args=()),
    ]


def test_allow_always_does_not_store_a_link_to_a_shell(bin_dir: Path, path: str) -> None:
    os.symlink(bin_dir / "bash", bin_dir / "mysh")

    assert evaluate("mysh script.sh", ExecSettings(), path=path).always == []


def test_approving_a_wrapper_always_only_allows_the_exact_inner_command(path: str) -> None:
    settings = ExecSettings()
    stored = evaluate("bash -lc whoami", settings, path=path).always

    assert evaluate("whoami", settings, stored, path=path).decision == "allow"
    assert evaluate("whoami --help", settings, stored, path=path).decision == "ask"
    assert evaluate("bash -lc whoami", settings, stored, path=path).decision == "ask"
    assert evaluate("bash", settings, stored, path=path).decision == "ask"
    assert evaluate("sh -c whoami", settings, stored, path=path).decision == "ask"


def test_a_relative_program_resolves_only_against_the_given_cwd(tmp_path: Path, path: str) -> None:
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)

    assert evaluate("./run.sh", ExecSettings(), path=path).always == []
    entry = AllowEntry(executable=str(script), args=(), sha256=hashlib.sha256(b"#!/bin/sh\n").hexdigest())
    assert evaluate("./run.sh", ExecSettings(), path=path, cwd=str(tmp_path)).always == [entry]
    assert evaluate("./run.sh", ExecSettings(), [entry], path=path, cwd=str(tmp_path)).decision == "allow"
    assert evaluate("./run.sh", ExecSettings(), [entry], path=path).decision == "ask"


# --- Fail closed: options, files and abbreviations ----------------------------------------------------------------

KNOWN = allowing("cat", "sort", "wc", "head", "tail", "grep", "find", "ls", "uniq", "cut", "git")


@pytest.mark.parametrize(
    ("command", "named"),
    [
        ("sort --files0-fr=/proc/self/environ", "--files0-from reads the file list from a file"),
        ("sort --files0-f /proc/1/environ", "--files0-from"),
        ("wc --files0-from=list.txt", "--files0-from"),
        ("wc --files0=list.txt", "--files0-from"),
        ("sort --compress-prog=sh", "--compress-program runs a program"),
        ("sort --compress-program sh", "--compress-program"),
        ("sort --outp=out.txt", "--output writes the output to a file"),
        ("sort -o out.txt", "-o writes"),
        ("sort -ro out.txt", "-o writes"),
        ("sort -T /tmp", "-T writes"),
        ("sort --f x", "--f is ambiguous"),
        ("tail --fil x", "--fil is not an option known for tail"),
        ("cut --c=1", "--c is ambiguous"),
        ("grep -f /proc/self/environ x", "-f reads /proc/self/environ"),
        ("grep --exclude-fr=/etc/passwd -r x", "--exclude-from reads /etc/passwd"),
        ("grep -R secret .", "-R follows symbolic links"),
        ("find . -exec id ';'", "-exec runs a command"),
        ("find . -execdir id '{}' +", "-execdir runs"),
        ("find . -ok rm '{}' ';'", "-ok runs"),
        ("find . -delete", "-delete deletes files"),
        ("find . -fprint out.txt", "-fprint writes"),
        ("find . -fls out.txt", "-fls writes"),
        ("find -L .", "-L follows symbolic links"),
        ("find . -newer /etc/shadow", "-newer reads /etc/shadow"),
        ("uniq in.txt out.txt", "uniq writes the file out.txt"),
        ("ls -L", "-L follows symbolic links"),
        ("head -n lots", "-n lots is not a number"),
        ("cut -f x", "-f x is not a list of fields"),
    ],
)
def test_options_that_read_write_or_run_ask_and_the_reason_names_the_option(
    command: str, named: str, path: str, ws: Path
) -> None:
    verdict = evaluate(command, KNOWN, path=path, cwd=str(ws))

    assert verdict.decision == "ask"
    assert named in verdict.reason


def test_the_reason_is_one_sentence_naming_the_abbreviated_option(path: str, ws: Path) -> None:
    verdict = evaluate("sort --files0-from=/proc/self/environ", KNOWN, path=path, cwd=str(ws))

    assert verdict.reason == (
        "`sort --files0-from=/proc/self/environ` needs approval (--files0-from reads the file list from a file)."
    )


@pytest.mark.parametrize(
    "command",
    [
        "cat /proc/self/environ",
        "cat /proc/1/environ",
        "cat /proc/4242/environ",  # any other process's, the bot's say
        "cat /sys/class/net/lo/address",
        "cat /dev/sda",
        "head -c 10 /dev/urandom",
        "cat /etc/passwd",
        "cat ../outside.txt",
        "cat sub/../../outside.txt",
        "wc -l < /proc/self/environ",
        "wc -l < ../outside.txt",
        "grep -r x /etc",
        "ls /",
        "git diff /etc/passwd /dev/null",
        "git log -- ../outside.txt",
    ],
)
def test_files_outside_the_workspace_or_under_proc_sys_dev_ask(command: str, path: str, ws: Path) -> None:
    verdict = evaluate(command, KNOWN, path=path, cwd=str(ws))

    assert verdict.decision == "ask", verdict.reason


def test_a_symlink_in_the_workspace_pointing_outside_asks(path: str, ws: Path, tmp_path: Path) -> None:
    (tmp_path / "secret.txt").write_text("s")
    (ws / "link.txt").symlink_to(tmp_path / "secret.txt")
    (ws / "env").symlink_to("/proc/self/environ")

    assert evaluate("cat link.txt", KNOWN, path=path, cwd=str(ws)).decision == "ask"
    assert evaluate("cat env", KNOWN, path=path, cwd=str(ws)).decision == "ask"
    assert evaluate("wc -l < link.txt", KNOWN, path=path, cwd=str(ws)).decision == "ask"


@pytest.mark.parametrize(
    "command",
    [
        "cat notes.txt",
        "cat ./sub/../notes.txt",
        "cat /dev/null",
        "wc -l < notes.txt",
        "sort -k 2 -t , notes.txt | uniq -c | head -n 3",
        "grep -rn TODO .",
        "grep -e x -f patterns.txt notes.txt",
        "find . -name '*.py' -type f -print",
        "ls -la sub",
        "cut -d: -f1,3 notes.txt",
    ],
)
def test_allowlisted_known_programs_read_files_inside_the_workspace(command: str, path: str, ws: Path) -> None:
    (ws / "notes.txt").write_text("a\n")
    (ws / "sub").mkdir()

    verdict = evaluate(command, KNOWN, path=path, cwd=str(ws))

    assert verdict.decision == "allow", verdict.reason


def test_without_a_workspace_every_file_argument_asks(path: str) -> None:
    assert evaluate("cat notes.txt", KNOWN, path=path).decision == "ask"


def test_a_safe_bin_given_a_file_is_judged_like_any_other_program(path: str, ws: Path) -> None:
    default = evaluate("head -n 5 notes.txt", ExecSettings(), path=path, cwd=str(ws))
    allowlisted = evaluate("head -n 5 notes.txt", allowing("head"), path=path, cwd=str(ws))

    assert default.decision == "ask"
    assert "safe bins run unasked only when they read standard input" in default.reason
    assert allowlisted.decision == "allow"
    assert evaluate("head -n 5 /etc/passwd", allowing("head"), path=path, cwd=str(ws)).decision == "ask"


def test_a_safe_bin_not_in_the_program_table_is_not_trusted(path: str, ws: Path) -> None:
    settings = ExecSettings(safe_bins=["jq"])

    assert evaluate("jq .", settings, path=path, cwd=str(ws)).decision == "ask"


def test_a_cd_makes_later_relative_files_unknown_unless_it_stays_inside(path: str, ws: Path) -> None:
    (ws / "sub").mkdir()
    settings = allowing("cd", "cat")

    assert evaluate("cd sub && cat notes.txt", settings, path=path, cwd=str(ws)).decision == "allow"
    assert evaluate("cd .. && cat notes.txt", settings, path=path, cwd=str(ws)).decision == "ask"
    assert evaluate("cd /etc && cat passwd", settings, path=path, cwd=str(ws)).decision == "ask"


# --- Allowlist globs match whole arguments --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "command", "decision"),
    [
        ("status", "git status", "allow"),
        ("status", "git status -s", "ask"),
        ("status", "git statusx", "ask"),
        ("status*", "git status -s", "ask"),
        ("status **", "git status -s --branch", "allow"),
        ("*", "whoami x", "allow"),
        ("*", "whoami x y", "ask"),
        ("*", "whoami", "ask"),
        ("a*", "whoami 'a b'", "allow"),
        ("a*", "whoami a b", "ask"),
        ("-n *", "whoami -n 5", "allow"),
        ("-n *", "whoami -n 5 x", "ask"),
        ("**", "whoami", "allow"),
        ("**", "whoami a b c", "allow"),
        ("", "whoami", "allow"),
        ("", "whoami a", "ask"),
    ],
)
def test_each_allowlist_glob_matches_one_whole_argument(
    args: str, command: str, decision: str, path: str, ws: Path
) -> None:
    name = command.split()[0]
    settings = ExecSettings(allowlist=[AllowRule(executable=name, args=args)])

    assert evaluate(command, settings, path=path, cwd=str(ws)).decision == decision


def test_an_allowlisted_known_program_still_has_its_options_checked(path: str, ws: Path) -> None:
    settings = ExecSettings(allowlist=[AllowRule(executable="sort", args="**")])

    assert evaluate("sort -r", settings, path=path, cwd=str(ws)).decision == "allow"
    assert evaluate("sort -o out.txt", settings, path=path, cwd=str(ws)).decision == "ask"


# --- git: only a repository that cannot load code -----------------------------------------------------------------


def init_repo(ws: Path) -> None:
    git = shutil.which("git")
    assert git is not None, "git is missing: `make test` installs it"
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(ws.parent), "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run([git, "init", "-q", str(ws)], check=True, env=env)


def test_git_status_runs_in_a_clean_repository(path: str, ws: Path) -> None:
    init_repo(ws)

    assert evaluate("git status", KNOWN, path=path, cwd=str(ws)).decision == "allow"
    assert evaluate("git log --oneline -n 5", KNOWN, path=path, cwd=str(ws)).decision == "allow"


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ("[core]\n\tfsmonitor = ./evil.sh\n", "core.fsmonitor"),
        ("[core]\n\tpager = sh -c id\n", "core.pager"),
        ("[core]\n\thooksPath = hooks\n", "core.hookspath"),
        ("[alias]\n\tstatus = !id\n", "alias.status"),
        ("[include]\n\tpath = ../evil\n", "includes another file"),
        ('[includeIf "gitdir:/"]\n\tpath = ../evil\n', "includes another file"),
        ('[filter "x"]\n\tclean = id\n', "filter.x.clean"),
        ('[diff "x"]\n\ttextconv = id\n', "diff.x.textconv"),
        ("[pager]\n\tstatus = id\n", "pager.status"),
        ("[core]\n\tsshCommand = id\n", "core.sshcommand"),
        ("[core]\n\teditor = \\\n id\n", "continued line"),
    ],
)
def test_git_asks_when_the_repository_config_could_run_code(config: str, named: str, path: str, ws: Path) -> None:
    init_repo(ws)
    with open(ws / ".git" / "config", "a") as handle:
        handle.write(config)

    verdict = evaluate("git status", KNOWN, path=path, cwd=str(ws))

    assert verdict.decision == "ask"
    assert named in verdict.reason


@pytest.mark.parametrize(
    ("setup", "named"),
    [
        (lambda ws: (ws / ".gitattributes").write_text("*.txt filter=x\n"), "filter, diff or merge driver"),
        (lambda ws: (ws / ".git" / "info" / "attributes").write_text("* diff=x\n"), "filter, diff or merge driver"),
        (lambda ws: (ws / ".git" / "hooks" / "pre-commit").write_text("#!/bin/sh\nid\n"), "hooks"),
        (lambda ws: (ws / ".gitmodules").write_text('[submodule "x"]\n'), "submodules"),
        (lambda ws: (ws / ".git" / "commondir").write_text("../elsewhere\n"), "another repository"),
    ],
)
def test_git_asks_when_the_repository_could_load_code_another_way(
    setup: object, named: str, path: str, ws: Path
) -> None:
    init_repo(ws)
    (ws / ".git" / "info").mkdir(exist_ok=True)
    assert callable(setup)
    setup(ws)

    verdict = evaluate("git status", KNOWN, path=path, cwd=str(ws))

    assert verdict.decision == "ask"
    assert named in verdict.reason


def test_git_asks_for_a_gitdir_file_a_bare_repository_or_a_repository_outside(path: str, ws: Path) -> None:
    (ws / ".git").write_text("gitdir: /elsewhere\n")
    assert "gitdir" in evaluate("git status", KNOWN, path=path, cwd=str(ws)).reason
    (ws / ".git").unlink()
    for part in ("objects", "refs"):
        (ws / part).mkdir()
    (ws / "HEAD").write_text("ref: refs/heads/main\n")
    assert "bare repository" in evaluate("git status", KNOWN, path=path, cwd=str(ws)).reason
    inner = ws / "inner"
    inner.mkdir()
    for part in ("objects", "refs", "HEAD"):
        target = ws / part
        target.unlink() if target.is_file() else target.rmdir()
    (ws / ".git").mkdir()
    verdict = evaluate("git status", KNOWN, path=path, cwd=str(inner))
    assert verdict.decision == "ask" and "outside the workspace" in verdict.reason


def test_a_stored_git_command_asks_once_the_repository_is_no_longer_clean(bin_dir: Path, path: str, ws: Path) -> None:
    init_repo(ws)
    stored = [AllowEntry(executable=program(bin_dir, "git"), args=("commit", "-m", "x"))]
    assert evaluate("git commit -m x", ExecSettings(), stored, path=path, cwd=str(ws)).decision == "allow"
    (ws / ".git" / "hooks" / "pre-commit").write_text("#!/bin/sh\nid\n")

    assert evaluate("git commit -m x", ExecSettings(), stored, path=path, cwd=str(ws)).decision == "ask"


# --- Programs that load code from the working tree ------------------------------------------------------------------


@pytest.mark.parametrize(
    "command", ["make", "make build", "npm test", "pnpm i", "yarn", "npx x", "cargo build", "go run .", "pip install ."]
)
def test_build_tools_ask_even_when_allowlisted(command: str, path: str, ws: Path) -> None:
    verdict = evaluate(command, allowing(command.split()[0]), path=path, cwd=str(ws))

    assert verdict.decision == "ask"
    assert verdict.always == []


def test_pip_without_a_build_subcommand_follows_the_allowlist(path: str, ws: Path) -> None:
    assert evaluate("pip list", allowing("pip"), path=path, cwd=str(ws)).decision == "allow"


@pytest.mark.parametrize("command", ["python3 build.py", "bash deploy.sh", "./run.sh"])
def test_an_allowlisted_interpreter_or_script_asks(command: str, path: str, ws: Path) -> None:
    for name in ("build.py", "deploy.sh", "run.sh"):
        (ws / name).write_text("#!/bin/sh\n")
        (ws / name).chmod(0o755)
    settings = ExecSettings(allowlist=[AllowRule(executable=n) for n in ("python3", "bash", str(ws / "run.sh"))])

    verdict = evaluate(command, settings, path=path, cwd=str(ws))

    assert verdict.decision == "ask"
    assert "code from the working tree" in verdict.reason


@pytest.mark.parametrize(
    ("command", "script"),
    [
        ("python3 build.py", "build.py"),
        ("bash deploy.sh", "deploy.sh"),
        ("./run.sh", "run.sh"),
        ("python3 tools/gen.py --fast", "tools/gen.py"),
    ],
)
def test_allow_always_on_a_script_asks_again_once_the_script_changes(
    command: str, script: str, path: str, ws: Path
) -> None:
    file = ws / script
    file.parent.mkdir(exist_ok=True)
    file.write_text("print('build')\n")
    file.chmod(0o755)
    settings = ExecSettings()
    first = evaluate(command, settings, path=path, cwd=str(ws))
    assert first.decision == "ask" and first.offer_always
    [entry] = first.always
    assert entry.sha256 == hashlib.sha256(b"print('build')\n").hexdigest()

    assert evaluate(command, settings, first.always, path=path, cwd=str(ws)).decision == "allow"
    file.write_text("import os; os.system('id')\n")
    assert evaluate(command, settings, first.always, path=path, cwd=str(ws)).decision == "ask"


def test_a_script_entry_without_a_hash_never_matches(bin_dir: Path, path: str, ws: Path) -> None:
    (ws / "build.py").write_text("print(1)\n")
    legacy = [AllowEntry(executable=program(bin_dir, "python3"), args=("build.py",))]

    assert evaluate("python3 build.py", ExecSettings(), legacy, path=path, cwd=str(ws)).decision == "ask"


@pytest.mark.parametrize("command", ["python3 missing.py", "python3 -m http.server", "python3 -u build.py", "python3"])
def test_allow_always_stores_nothing_for_an_interpreter_without_a_readable_script(
    command: str, path: str, ws: Path
) -> None:
    (ws / "build.py").write_text("print(1)\n")

    assert evaluate(command, ExecSettings(), path=path, cwd=str(ws)).always == []


SHA256_MIGRATION = next(n for n, steps in enumerate(MIGRATIONS) if "sha256" in steps[0])


async def test_the_store_keeps_the_script_hash_and_migrates_an_old_database(tmp_path: Path) -> None:
    state = tmp_path / "state"
    async with await SqliteStore.open(state) as store:
        await store.allow_command("main", "/usr/bin/python3", ("build.py",), "telegram:1", "aa" * 32)
        await store.allow_command("main", "/usr/bin/python3", ("build.py",), "telegram:1", "bb" * 32)
        await store.allow_command("main", "/usr/bin/ls", ("-la",), None)
        assert sorted(await store.allowed_commands("main")) == [
            ("/usr/bin/ls", ("-la",), None),
            ("/usr/bin/python3", ("build.py",), "bb" * 32),
        ]
    old = tmp_path / "old"
    old.mkdir()
    with contextlib.closing(sqlite3.connect(old / "state.db")) as db:  # a database from before the sha256 column
        for statements in MIGRATIONS[:SHA256_MIGRATION]:
            for statement in statements:
                db.execute(statement)
        db.execute("INSERT INTO exec_allowed VALUES ('main', '/usr/bin/ls', '[\"-la\"]', NULL, 0)")
        db.execute(f"PRAGMA user_version = {SHA256_MIGRATION}")
        db.commit()
    async with await SqliteStore.open(old) as store:
        assert await store.allowed_commands("main") == [("/usr/bin/ls", ("-la",), None)]


# --- Protected paths: the bot's own config and state are denied outright ------------------------------------------


@pytest.fixture
def protected(tmp_path: Path) -> list[str]:
    config_dir = tmp_path / "conf"
    (config_dir / "state").mkdir(parents=True)
    (config_dir / "bindings.yaml").write_text("agents: []\n")
    return [str(config_dir / "bindings.yaml"), str(config_dir / "state")]


@pytest.mark.parametrize(
    "command",
    [
        "cat {conf}/bindings.yaml",
        "cat '{conf}/bindings.yaml'",
        "cat {conf}/state/state.db",
        "sqlite3 {conf}/state/state.db .dump",
        "tool --file={conf}/bindings.yaml",
        "echo x > {conf}/bindings.yaml",
        "X={conf}/state cmd",
        "cat ../conf/bindings.yaml",
        "cat ../conf/./state/../bindings.yaml",
        "cd .. && cat conf/bindings.yaml",
        "cat link/state.db",
        "sh -c 'cat ../conf/bindings.yaml'",
        'cat "$(echo {conf}/bindings.yaml)"',
        "echo 'unclosed {conf}/state",
    ],
)
@pytest.mark.parametrize("security", ["allowlist", "full"])
def test_a_command_touching_the_bots_config_or_state_is_denied(
    command: str, security: str, protected: list[str], path: str, ws: Path, tmp_path: Path
) -> None:
    (ws / "link").symlink_to(tmp_path / "conf" / "state")
    settings = ExecSettings.model_validate({"security": security, "ask": "on-miss", "allowlist": rules("cat", "cd")})

    verdict = evaluate(command.format(conf=tmp_path / "conf"), settings, path=path, cwd=str(ws), protected=protected)

    assert verdict.decision == "deny"
    assert "the bot's own configuration or state" in verdict.reason
    assert verdict.always == [] and verdict.offer_always is False


def test_protected_paths_leave_other_commands_alone(protected: list[str], path: str, ws: Path) -> None:
    verdict = evaluate("cat notes.txt", allowing("cat"), path=path, cwd=str(ws), protected=protected)

    assert verdict.decision == "allow"
