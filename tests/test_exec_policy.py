"""Exec policy: every segment is judged, expansions and wrappers always ask, and "Allow always" never stores a shell."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import ValidationError

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
def test_safe_bins_run_as_stdin_filters(command: str, path: str) -> None:
    verdict = evaluate(command, allowing("git"), path=path)

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


def test_a_config_rule_matches_its_args_glob(path: str) -> None:
    settings = ExecSettings(allowlist=[AllowRule(executable="git", args="status*")])

    assert evaluate("git status", settings, path=path).decision == "allow"
    assert evaluate("git status -s", settings, path=path).decision == "allow"
    assert evaluate("git push", settings, path=path).decision == "ask"
    assert evaluate("git", settings, path=path).decision == "ask"


def test_a_config_rule_with_empty_args_allows_only_no_arguments(path: str) -> None:
    settings = ExecSettings(allowlist=[AllowRule(executable="whoami", args="")])

    assert evaluate("whoami", settings, path=path).decision == "allow"
    assert evaluate("whoami --help", settings, path=path).decision == "ask"


def test_a_config_rule_by_absolute_path_matches_the_resolved_program(bin_dir: Path, path: str) -> None:
    settings = ExecSettings(allowlist=[AllowRule(executable=program(bin_dir, "git"))])

    assert evaluate("git status", settings, path=path).decision == "allow"
    assert evaluate(f"{program(bin_dir, 'git')} status", settings, path=path).decision == "allow"
    assert evaluate("git status", settings, path="/nonexistent").decision == "ask"


def test_a_config_rule_by_bare_name_does_not_match_another_path(bin_dir: Path, tmp_path: Path, path: str) -> None:
    elsewhere = tmp_path / "evil"
    elsewhere.mkdir()
    (elsewhere / "git").write_text("#!/bin/sh\n")
    (elsewhere / "git").chmod(0o755)

    assert evaluate(f"{elsewhere / 'git'} status", allowing("git"), path=path).decision == "ask"
    assert evaluate(f"{bin_dir}/../evil/git status", allowing("git"), path=path).decision == "ask"


def test_stored_entries_match_the_exact_program_and_arguments(bin_dir: Path, path: str) -> None:
    stored = [AllowEntry(executable=program(bin_dir, "git"), args=("status", "-s"))]

    assert evaluate("git status -s", ExecSettings(), stored, path=path).decision == "allow"
    assert evaluate("git 'status' \"-s\"", ExecSettings(), stored, path=path).decision == "allow"
    assert evaluate("git status", ExecSettings(), stored, path=path).decision == "ask"
    assert evaluate("git status -s -v", ExecSettings(), stored, path=path).decision == "ask"
    assert evaluate("git status -s", ExecSettings(), stored, path="/nonexistent").decision == "ask"


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


def test_ask_off_denies_what_would_ask_and_says_why(path: str) -> None:
    settings = allowing("cat", ask="off")

    risky = evaluate("cat $HOME/.ssh/id_rsa", settings, path=path)
    unlisted = evaluate("rm -rf build", settings, path=path)

    assert risky.decision == "deny"
    assert "variable expansion $HOME" in risky.reason
    assert "exec.ask: off" in risky.reason
    assert unlisted.decision == "deny"
    assert "`rm -rf build` is not on the allowlist" in unlisted.reason
    assert evaluate("cat notes.txt", settings, path=path).decision == "allow"


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
    assert AllowRule(executable="git").args == "*"
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
        ("nohup make build", "make", ("build",)),
        ("timeout 5 make", "make", ()),
        ("nice -n 5 make", "make", ()),
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
    entry = AllowEntry(executable=str(script), args=())
    assert evaluate("./run.sh", ExecSettings(), path=path, cwd=str(tmp_path)).always == [entry]
    assert evaluate("./run.sh", ExecSettings(), [entry], path=path, cwd=str(tmp_path)).decision == "allow"
    assert evaluate("./run.sh", ExecSettings(), [entry], path=path).decision == "ask"
