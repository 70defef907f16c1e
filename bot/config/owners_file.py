"""`owners:` in the config file: read it, and add one owner in place, keeping every other line as written."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from bot.config.errors import ConfigError, ConfigIssue
from tools.yaml_tree import parse_yaml

__all__ = ["OwnerEdit", "add_owner", "edit_text", "owner_key", "parse_owner"]

_CHANNEL = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
_PLAIN = re.compile(r"^[a-z0-9][a-z0-9_-]*:[A-Za-z0-9_.@+=-]+$")  # safe as a YAML plain scalar, block or flow
EditStatus = Literal["added", "already", "refused"]


@dataclass(frozen=True)
class OwnerEdit:
    """What `add_owner` did: `added` (the file was rewritten), `already` (an owner already, nothing written), or
    `refused` (the file is untouched; `reason` says why and `lines` is what to add by hand). `warnings`: problems the
    file had before the edit too (an unset variable, say), which the edit neither caused nor fixes."""

    status: EditStatus
    owner: str
    reason: str = ""
    lines: str = ""
    warnings: tuple[str, ...] = ()


def owner_key(channel: str, sender_id: str) -> str:
    """How owners are compared: the channel lowercased, the id exactly as the platform writes it."""
    return f"{channel.strip().lower()}:{sender_id.strip()}"


def parse_owner(text: str) -> str:
    """`<channel>:<sender id>` as owners are compared (the channel lowercased, the id exactly as the platform writes
    it); ValueError names the expected shape."""
    channel, sep, sender = text.strip().partition(":")
    channel, sender = channel.strip().lower(), sender.strip()
    if not sep or not _CHANNEL.match(channel) or not sender or any(ch.isspace() or ord(ch) < 32 for ch in sender):
        raise ValueError(f"{text!r} is not <channel>:<id>, e.g. telegram:123456789 (send /whoami to the bot)")
    return owner_key(channel, sender)


def _scalar(owner: str, flow: bool) -> str:
    """The owner as YAML text: plain where that reads back the same (block style), else double-quoted."""
    return owner if _PLAIN.match(owner) and not flow else json.dumps(owner)


def _by_hand(owner: str, has_key: bool) -> str:
    return f"  - {_scalar(owner, False)}" if has_key else f"owners:\n  - {_scalar(owner, False)}"


def edit_text(text: str, owner: str) -> tuple[str | None, str]:
    """`text` with `owner` added to its `owners:` list, every other line unchanged; or (None, why not). The YAML is
    read with ruamel.yaml's round-trip loader, which knows where each node sits; the new item is then written as one
    line beside its siblings, so the rest of the file stays byte for byte as it was (a full re-dump would re-indent
    and re-wrap lines nobody touched). The caller checks that the result reads back as intended."""
    from ruamel.yaml import YAML
    from ruamel.yaml.comments import CommentedMap, CommentedSeq
    from ruamel.yaml.error import YAMLError

    try:
        documents = list(YAML(typ="rt").load_all(text))
    except YAMLError as error:
        return None, f"it is not valid YAML ({str(error).splitlines()[0]})"
    if len(documents) > 1:
        return None, "it holds more than one YAML document"
    root = documents[0] if documents else None
    lines = io.StringIO(text, newline="").readlines()  # YAML's line breaks only (str.splitlines knows more)
    if root is None:  # empty, or comments only
        return _append(text, owner), ""
    if not isinstance(root, CommentedMap):
        return None, "it is not a mapping of sections"
    if "owners" not in root:
        if root.fa.flow_style():
            return None, "its sections are written in flow style ({...}), which this edit does not rewrite"
        return _append(text, owner), ""
    owners = root["owners"]
    key_line, key_col = root.lc.key("owners")
    if owners is None:
        after = lines[key_line][key_col:].split(":", 1)[-1].strip()
        if root.fa.flow_style() or (after and not after.startswith("#")):
            return None, "owners: is empty in a form this edit does not rewrite"
        return _insert_after(lines, key_line, " " * (key_col + 2) + "- " + _scalar(owner, False)), ""
    if not isinstance(owners, CommentedSeq):
        what = "a mapping" if isinstance(owners, dict) else repr(owners)
        return None, f"owners: is {what}, not a list"
    if owners.anchor.value is not None or lines[key_line][key_col:].split(":", 1)[-1].lstrip().startswith("*"):
        return None, "owners: is a YAML anchor or alias (used elsewhere too)"
    if owners.fa.flow_style() or not owners:  # `[]` has no style of its own
        return _into_flow(lines, owners.lc.line, owners.lc.col, owner)
    line, col = owners.lc.item(len(owners) - 1)
    before = lines[line][:col].rstrip()
    if not before.endswith("-") or before[:-1].strip():
        return None, "the last owner is not on a line of its own (`  - id`)"
    return _insert_after(lines, line, lines[line][:col] + _scalar(owner, False)), ""  # the siblings' indentation


def _insert_after(lines: list[str], index: int, item: str) -> str:
    """The text with `item` as a line of its own after line `index`, ending as that line ends (CRLF stays CRLF)."""
    here = lines[index]
    ending = here[len(here.rstrip("\r\n")) :]
    if not ending:  # the last line, without a newline: give it one
        ending = "\n"
        here += ending
    return "".join([*lines[:index], here, item + ending, *lines[index + 1 :]])


def _append(text: str, owner: str) -> str:
    """`owners:` as a new section at the end of the file."""
    lead = "" if not text or text.endswith("\n") else "\n"
    gap = "\n" if text.strip() else ""
    return f"{text}{lead}{gap}{_by_hand(owner, False)}\n"


def _into_flow(lines: list[str], line: int, col: int, owner: str) -> tuple[str | None, str]:
    """The owner added inside `[...]`, when the whole list is on one line (a JSON config, `owners: [a, b]`)."""
    text = lines[line]
    if text[col : col + 1] != "[":
        return None, "owners: is a flow list this edit cannot find the start of"
    end = _closing_bracket(text, col)
    if end is None:
        return None, "owners: is a flow list ([...]) over several lines, which this edit does not rewrite"
    inside = text[col + 1 : end]
    body = inside.rstrip()
    added = f"{body}, {_scalar(owner, True)}" if body.strip() else _scalar(owner, True)
    return "".join([*lines[:line], text[: col + 1] + added + inside[len(body) :] + text[end:], *lines[line + 1 :]]), ""


def _closing_bracket(text: str, start: int) -> int | None:
    """Where the `[` at `start` closes on this line, skipping quoted text and nested brackets; None if it does not."""
    depth, quote, index = 0, "", start
    while index < len(text):
        char = text[index]
        if quote:
            if char == "\\" and quote == '"':
                index += 1
            elif char == quote:
                if quote == "'" and text[index + 1 : index + 2] == "'":
                    index += 1
                else:
                    quote = ""
        elif char in "\"'":
            quote = char
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
            if depth == 0:
                return index if char == "]" else None
        index += 1
    return None


def _owners_in(data: Any) -> list[str]:
    """The owners as compared (owner_key), from parsed data; what does not parse as <channel>:<id> is left out."""
    items = data.get("owners") if isinstance(data, dict) else None
    found = []
    for item in items if isinstance(items, list) else []:
        with contextlib.suppress(ValueError):
            found.append(parse_owner(str(item)))
    return found


def _same_but_owner(old: Any, new: Any, owner: str) -> bool:
    """Whether `new` is `old` with `owner` appended to `owners` and nothing else changed."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return False
    expected = copy.deepcopy(old)
    expected["owners"] = [*(expected.get("owners") or []), owner]
    return bool(expected == new)


def _issues(path: Path) -> list[ConfigIssue]:
    """What load_config finds wrong with the file at `path` (nothing: it loads)."""
    from bot.config.loading import load_config

    try:
        load_config(path)
    except ConfigError as error:
        return list(error.issues)
    return []


def add_owner(path: Path, owner: str) -> OwnerEdit:
    """Add `owner` (`<channel>:<id>`, see parse_owner) to the `owners:` of the config file at `path`, in place: only
    the new line differs. The new text must read back as the old data plus this owner and load as a config (any
    problem it shows must have been there before the edit: an unset variable, say); it is then written atomically
    (a temporary file beside it, renamed over it), keeping the file's mode. Otherwise the file is left alone and the
    result says what to add by hand."""
    owner = parse_owner(owner)
    target = path.resolve()  # a symlinked config keeps its link: the file it points to is rewritten
    text = target.read_text(encoding="utf-8")
    old = parse_yaml(text)
    if old.problems:
        return OwnerEdit("refused", owner, f"{path} does not parse: {old.problems[0].message}", _by_hand(owner, False))
    has_key = isinstance(old.data, dict) and "owners" in old.data
    if owner in _owners_in(old.data):
        return OwnerEdit("already", owner)
    new_text, why = edit_text(text, owner)
    if new_text is None:
        return OwnerEdit("refused", owner, f"{path} cannot be edited safely: {why}", _by_hand(owner, has_key))
    if not _same_but_owner(old.data, parse_yaml(new_text).data, owner):
        reason = f"{path}: the edited file would not read back as intended"
        return OwnerEdit("refused", owner, reason, _by_hand(owner, has_key))
    handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(new_text)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(temporary, target.stat().st_mode & 0o7777)
        before = {(issue.path, issue.message) for issue in _issues(target)}
        # Validated where it will live: relative paths and a .env beside the file resolve as they will.
        after = _issues(Path(temporary))
        new = [issue for issue in after if (issue.path, issue.message) not in before]
        if new:
            shown = "; ".join(issue.render(str(path)) for issue in new)
            return OwnerEdit("refused", owner, f"the edited file would not load: {shown}", _by_hand(owner, has_key))
        os.replace(temporary, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
    return OwnerEdit("added", owner, warnings=tuple(issue.render(str(path)) for issue in after))
