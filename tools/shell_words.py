"""Shell words: a tokenizer that reads a command line as sh would and notes every expansion and redirect in it."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

RiskKind = Literal["subst", "wrapper", "read", "other"]


@dataclass(frozen=True)
class Risk:
    text: str
    kind: RiskKind = "other"
    path: str | None = None  # for "read": the file read, which may be harmless once the workspace is known


@dataclass
class Word:
    text: str
    risks: list[Risk]
    quoted: bool
    assign: str | None  # the variable name when the word is an assignment NAME=value
    start: int
    end: int


@dataclass
class Op:
    op: str
    start: int
    end: int


@dataclass
class Redirect:
    op: str
    fd: str | None
    target: Word
    start: int
    end: int


@dataclass
class _Builder:
    chars: list[str] = field(default_factory=list)
    bare: list[bool] = field(default_factory=list)  # per character: written unquoted, so globs and braces apply
    risks: list[Risk] = field(default_factory=list)
    quoted: bool = False

    def add(self, text: str, bare: bool) -> None:
        self.chars.extend(text)
        self.bare.extend([bare] * len(text))


_SEPARATORS = (";;&", ";;", ";&", "&&", "||", "|&", ";", "|", "&", "(", ")")
_REDIRECTS = ("<<<", "<<-", "<<", "<>", "<&", "<", ">>", ">|", ">&", ">")
_WORD_BREAK = frozenset(" \t\n;&|()<>")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\[[^\]]*\])?\+?=")
DIGITS = re.compile(r"[0-9]+")
FD_TARGET = re.compile(r"[0-9]+-?|-")


def short(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


class Lexer:
    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 0
        self.tokens: list[Word | Op | Redirect] = []
        self.error: str | None = None
        self.heredocs: list[tuple[str, bool, bool]] = []  # delimiter, strip tabs, body expands
        self.heredoc_substitution = False

    def fail(self, message: str) -> None:
        if self.error is None:
            self.error = message
        self.i = len(self.s)

    def run(self) -> None:
        s = self.s
        while self.i < len(s) and self.error is None:
            c = s[self.i]
            if c in " \t":
                self.i += 1
            elif s.startswith("\\\n", self.i):
                self.i += 2
            elif c == "#":
                end = s.find("\n", self.i)
                self.i = len(s) if end < 0 else end
            elif c == "\n":
                self.tokens.append(Op("\n", self.i, self.i + 1))
                self.i += 1
                self.skip_heredoc_bodies()
            elif s.startswith(("&>>", "&>"), self.i):
                op = "&>>" if s.startswith("&>>", self.i) else "&>"
                self.redirect(op, None, self.i)
            elif c in ";&|()":
                op = next(o for o in _SEPARATORS if s.startswith(o, self.i))
                self.tokens.append(Op(op, self.i, self.i + len(op)))
                self.i += len(op)
            elif c in "<>" and not s.startswith("(", self.i + 1):
                self.redirect(next(o for o in _REDIRECTS if s.startswith(o, self.i)), None, self.i)
            else:
                word = self.word()
                at = self.i
                if (
                    at < len(s)
                    and s[at] in "<>"
                    and not s.startswith("(", at + 1)
                    and not word.quoted
                    and DIGITS.fullmatch(word.text)
                ):
                    self.redirect(next(o for o in _REDIRECTS if s.startswith(o, at)), word.text, word.start)
                else:
                    self.tokens.append(word)

    def redirect(self, op: str, fd: str | None, start: int) -> None:
        s = self.s
        self.i += len(op)
        while self.i < len(s) and s[self.i] in " \t":
            self.i += 1
        if self.i >= len(s) or s[self.i] in "\n;&|()" or (s[self.i] in "<>" and not s.startswith("(", self.i + 1)):
            self.fail(f"redirect {op} has no target")
            return
        target = self.word()
        self.tokens.append(Redirect(op, fd, target, start, target.end))
        if op in ("<<", "<<-"):
            self.heredocs.append((target.text, op == "<<-", not target.quoted))

    def skip_heredoc_bodies(self) -> None:
        s = self.s
        for delimiter, strip_tabs, expands in self.heredocs:
            while self.i < len(s):
                end = s.find("\n", self.i)
                line = s[self.i : len(s) if end < 0 else end]
                self.i = len(s) if end < 0 else end + 1
                if (line.lstrip("\t") if strip_tabs else line) == delimiter:
                    break
                if expands and ("$(" in line or "`" in line):
                    self.heredoc_substitution = True
        self.heredocs = []

    def word(self) -> Word:
        s = self.s
        start = self.i
        b = _Builder()
        while self.i < len(s):
            c = s[self.i]
            if c in _WORD_BREAK:
                if c in "<>" and s.startswith("(", self.i + 1):
                    end = self.skip_parens(self.i + 2)
                    if end < 0:
                        self.fail(f"unclosed process substitution {c}(")
                        break
                    b.risks.append(Risk(f"process substitution {c}(...)", "subst"))
                    b.add(s[self.i : end], False)
                    self.i = end
                    continue
                break
            if c == "'":
                end = s.find("'", self.i + 1)
                if end < 0:
                    self.fail("unclosed single quote")
                    break
                b.add(s[self.i + 1 : end], False)
                b.quoted = True
                self.i = end + 1
            elif c == '"':
                b.quoted = True
                self.i += 1
                self.double_quoted(b)
            elif c == "\\":
                if s.startswith("\\\n", self.i):
                    self.i += 2
                elif self.i + 1 < len(s):
                    b.add(s[self.i + 1], False)
                    b.quoted = True
                    self.i += 2
                else:
                    b.add("\\", False)
                    self.i += 1
            elif c == "`":
                self.backtick(b)
            elif c == "$":
                self.dollar(b, in_quotes=False)
            else:
                b.add(c, True)
                self.i += 1
        text = "".join(b.chars)
        risks = b.risks + _pattern_risks(text, b.bare)
        match = _ASSIGNMENT.match(text)
        assign = match.group(1) if match and all(b.bare[: match.end()]) else None
        return Word(text, dedupe_risks(risks), b.quoted, assign, start, self.i)

    def double_quoted(self, b: _Builder) -> None:
        s = self.s
        while self.i < len(s):
            c = s[self.i]
            if c == '"':
                self.i += 1
                return
            if c == "\\" and self.i + 1 < len(s) and s[self.i + 1] in '$`"\\\n':
                if s[self.i + 1] != "\n":
                    b.add(s[self.i + 1], False)
                self.i += 2
            elif c == "$":
                self.dollar(b, in_quotes=True)
            elif c == "`":
                self.backtick(b)
            else:
                b.add(c, False)
                self.i += 1
        self.fail("unclosed double quote")

    def backtick(self, b: _Builder) -> None:
        end = self.skip_backtick(self.i + 1)
        if end < 0:
            self.fail("unclosed backtick `")
            return
        b.risks.append(Risk("command substitution `...`", "subst"))
        b.add(self.s[self.i : end], False)
        self.i = end

    def dollar(self, b: _Builder, *, in_quotes: bool) -> None:
        s = self.s
        i = self.i
        nxt = s[i + 1] if i + 1 < len(s) else ""
        if nxt == "(":
            end = self.skip_parens(i + 2)
            if end < 0:
                self.fail("unclosed $(")
                return
            body = s[i + 2 : end - 1]
            if s.startswith("$((", i):
                b.risks.append(Risk("arithmetic expansion $((...))"))
                if "$(" in body or "`" in body:
                    b.risks.append(Risk("command substitution $(...)", "subst"))
            else:
                b.risks.append(Risk("command substitution $(...)", "subst"))
            b.add(s[i:end], False)
            self.i = end
        elif nxt == "{":
            end = self.skip_braces(i + 2)
            if end < 0:
                self.fail("unclosed ${")
                return
            body = s[i + 2 : end - 1]
            b.risks.append(Risk(f"variable expansion ${{{short(body, 30)}}}"))
            if "$(" in body or "`" in body or "<(" in body or ">(" in body:
                b.risks.append(Risk("command substitution $(...)", "subst"))
            b.add(s[i:end], False)
            self.i = end
        elif nxt == "'" and not in_quotes:
            j = i + 2
            while j < len(s) and s[j] != "'":
                j += 2 if s[j] == "\\" else 1
            if j >= len(s):
                self.fail("unclosed $'...' quote")
                return
            b.risks.append(Risk("ANSI-C quoting $'...'"))
            b.add(s[i + 2 : j], False)
            b.quoted = True
            self.i = j + 1
        elif nxt == '"' and not in_quotes:
            b.risks.append(Risk('locale quoting $"..."'))
            b.quoted = True
            self.i = i + 2
            self.double_quoted(b)
        elif nxt and (match := _NAME.match(s, i + 1)) is not None:
            b.risks.append(Risk(f"variable expansion ${match.group()}"))
            b.add(s[i : match.end()], False)
            self.i = match.end()
        elif nxt and nxt in "0123456789@*#?-$!":
            b.risks.append(Risk(f"variable expansion ${nxt}"))
            b.add(s[i : i + 2], False)
            self.i = i + 2
        else:
            b.add("$", False)
            self.i = i + 1

    # Skipping over nested text: each returns the index just after the closing character, or -1 if it never closes.

    def skip_backtick(self, j: int) -> int:
        s = self.s
        while j < len(s) and s[j] != "`":
            j += 2 if s[j] == "\\" else 1
        return j + 1 if j < len(s) else -1

    def skip_parens(self, j: int) -> int:
        return self._skip_nested(j, "(", ")")

    def skip_braces(self, j: int) -> int:
        return self._skip_nested(j, "{", "}")

    def _skip_nested(self, j: int, opening: str, closing: str) -> int:
        s = self.s
        depth = 1
        while 0 <= j < len(s):
            c = s[j]
            if c == "\\":
                j += 2
            elif c == "'" and opening == "(":
                end = s.find("'", j + 1)
                j = -1 if end < 0 else end + 1
            elif c == '"':
                j = self.skip_double(j + 1)
            elif c == "`":
                j = self.skip_backtick(j + 1)
            elif s.startswith("$(", j):
                j = self.skip_parens(j + 2)
            elif s.startswith("${", j):
                j = self.skip_braces(j + 2)
            else:
                if c == opening:
                    depth += 1
                elif c == closing:
                    depth -= 1
                    if depth == 0:
                        return j + 1
                j += 1
        return -1

    def skip_double(self, j: int) -> int:
        s = self.s
        while 0 <= j < len(s):
            c = s[j]
            if c == "\\":
                j += 2
            elif c == '"':
                return j + 1
            elif c == "`":
                j = self.skip_backtick(j + 1)
            elif s.startswith("$(", j):
                j = self.skip_parens(j + 2)
            elif s.startswith("${", j):
                j = self.skip_braces(j + 2)
            else:
                j += 1
        return -1


def _pattern_risks(text: str, bare: list[bool]) -> list[Risk]:
    """Globs, brace expansion and tilde expansion: only where the character was written unquoted."""
    risks: list[Risk] = []
    last_close = max((k for k, c in enumerate(text) if c == "]" and bare[k]), default=-1)
    braces: list[bool] = []  # open unquoted braces: whether each holds a top-level `,` or `..` so far
    for k, c in enumerate(text):
        if not bare[k]:
            continue
        if c in "*?":
            risks.append(Risk(f"glob {c}"))
        elif c == "[" and k < last_close:
            risks.append(Risk("glob [...]"))
        elif c == "~" and (k == 0 or (bare[k - 1] and text[k - 1] in "=:")):
            risks.append(Risk("tilde expansion ~"))
        elif c == "{":
            braces.append(False)
        elif c == "}" and braces:
            if braces.pop():
                risks.append(Risk("brace expansion {...}"))
        elif braces and (c == "," or (text.startswith("..", k) and k + 1 < len(text) and bare[k + 1])):
            braces[-1] = True
    return dedupe_risks(risks)


def dedupe_risks(risks: list[Risk]) -> list[Risk]:
    seen: set[str] = set()
    out: list[Risk] = []
    for risk in risks:
        if risk.text not in seen:
            seen.add(risk.text)
            out.append(risk)
    return out
