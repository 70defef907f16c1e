"""Markdown (as models write it) to Slack mrkdwn: bold, italics, strike, links, headings, lists, quotes, code kept
verbatim, and `& < >` escaped everywhere else so that text never turns into a mention or a broken link."""

from __future__ import annotations

import re

_FENCE = re.compile(r"^[ \t]*```[^\n`]*\n?(.*?)(?:^[ \t]*```[ \t]*$|\Z)", re.DOTALL | re.MULTILINE)
_INLINE_CODE = re.compile(r"(`+)(.+?)\1", re.DOTALL)
_LINK = re.compile(r"!?\[((?:[^\[\]]|\[[^\]]*\])*)\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_AUTOLINK = re.compile(r"<((?:https?|mailto|ftp):[^>\s]+)>")
_BOLD_ITALIC = re.compile(r"\*\*\*(?=\S)(.+?)(?<=\S)\*\*\*", re.DOTALL)
_BOLD = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*|__(?=\S)(.+?)(?<=\S)__", re.DOTALL)
_ITALIC_STAR = re.compile(r"(?<![\w*])\*(?=[^\s*])(.+?)(?<=[^\s*])\*(?![\w*])")
_STRIKE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")
_HEADING = re.compile(r"^[ \t]{0,3}#{1,6}[ \t]+(.*?)[ \t]*#*[ \t]*$")
_BULLET = re.compile(r"^([ \t]*)[-*+][ \t]+(?=\S)")
_QUOTE = re.compile(r"^[ \t]{0,3}>[ \t]?")
_RULE = re.compile(r"^[ \t]{0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")
_HOLE = re.compile("\x00(\\d+)\x00")

BOLD_MARK = "\x01"  # stands for `*` until single-star italics are converted, so that bold is not read as italics


def escape(text: str) -> str:
    """Slack's three control characters as entities (the only escaping Slack wants)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _link_url(url: str) -> str:
    # `|` and `>` end the link token; `&` is written as an entity, as Slack itself writes it.
    return escape(url).replace("|", "%7C")


class _Holes:
    """Finished fragments (code, links) kept out of later rewriting, put back at the end."""

    def __init__(self) -> None:
        self.parts: list[str] = []

    def keep(self, fragment: str) -> str:
        self.parts.append(fragment)
        return f"\x00{len(self.parts) - 1}\x00"

    def fill(self, text: str) -> str:
        while _HOLE.search(text):
            text = _HOLE.sub(lambda match: self.parts[int(match.group(1))], text)
        return text


def _emphasis(text: str) -> str:
    """Bold, italics and strike on text that is already escaped."""
    text = _BOLD_ITALIC.sub(lambda match: f"{BOLD_MARK}_{match.group(1)}_{BOLD_MARK}", text)
    text = _BOLD.sub(lambda match: f"{BOLD_MARK}{match.group(1) or match.group(2)}{BOLD_MARK}", text)
    text = _ITALIC_STAR.sub(r"_\1_", text)
    text = _STRIKE.sub(r"~\1~", text)
    return text.replace(BOLD_MARK, "*")


def _inline(text: str, holes: _Holes) -> str:
    def link(match: re.Match[str]) -> str:
        label, url = match.group(1).strip(), match.group(2)
        if not label or label == url:
            return holes.keep(f"<{_link_url(url)}>")
        return holes.keep(f"<{_link_url(url)}|{_emphasis(escape(label))}>")

    text = _INLINE_CODE.sub(lambda match: holes.keep(f"`{escape(match.group(2))}`"), text)
    text = _LINK.sub(link, text)
    text = _AUTOLINK.sub(lambda match: holes.keep(f"<{_link_url(match.group(1))}>"), text)
    return _emphasis(escape(text))


def _line(line: str, holes: _Holes) -> str:
    quote = ""
    match = _QUOTE.match(line)
    if match:
        quote, line = "> ", line[match.end() :]
    if _RULE.match(line):
        return quote + "──────────"
    heading = _HEADING.match(line)
    if heading:
        inner = _inline(heading.group(1), holes).replace("*", "")
        return f"{quote}*{inner}*" if inner else quote
    bullet = _BULLET.match(line)
    if bullet:
        return f"{quote}{bullet.group(1)}• {_inline(line[bullet.end() :], holes)}"
    return quote + _inline(line, holes)


def markdown_to_mrkdwn(text: str) -> str:
    """Convert Markdown to Slack mrkdwn. Code (fenced or inline) keeps its text, only escaped; an unclosed fence,
    as in a reply still being streamed, runs to the end."""
    holes = _Holes()
    text = text.replace("\x00", "").replace(BOLD_MARK, "").replace("\r\n", "\n")

    def fence(match: re.Match[str]) -> str:
        body = match.group(1).rstrip("\n")
        return holes.keep(f"```\n{escape(body)}\n```" if body else "``` ```")

    text = _FENCE.sub(fence, text)
    lines = [line if _HOLE.fullmatch(line.strip()) else _line(line, holes) for line in text.split("\n")]
    return holes.fill("\n".join(lines))
