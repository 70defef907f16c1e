"""Markdown as models write it, parsed once with markdown-it-py, and the tree walk that every platform's markup
(markup_telegram, markup_slack) renders from: the platform only says how each piece is written."""

from __future__ import annotations

import functools
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # markdown-it is imported with the first text rendered, not with the bot
    from markdown_it import MarkdownIt
    from markdown_it.rules_inline import StateInline
    from markdown_it.rules_inline.state_inline import Delimiter
    from markdown_it.tree import SyntaxTreeNode

RULE = "──────────"
_BAR = 0x7C  # `|`
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
_LANGUAGE = re.compile(r"[\w#+.-]+")
_NEWLINE = re.compile(r"\r\n?")
_BLANK = re.compile(r"[\s>]*")  # a blank line, also one inside a quote (`>` alone)
# Where markdown-it's text rule stops (its list, as in markdown-it.js), and `|` for spoilers.
_TERMINATOR = re.compile(r"[\n!#$%&*+\-:<=@\[\\\]^_`{}~|]")
# Text that is one plain paragraph: none of those, no `>` (a quote), tab, carriage return or NUL (which the parser
# replaces); a line starting with a number and `.` or `)` may be a list item.
_PLAIN = re.compile(r"[^\n!#$%&*+\-:<=>@\[\\\]^_`{}~|\t\r\x00]*")
_NUMBERED = re.compile(r"[0-9]+[.)]")


# --- the parser: CommonMark, raw HTML as text, ~~strike~~ and Telegram's ||spoiler|| ------------------------------
#
# markdown-it-py has no spoiler rule (nor does mdit-py-plugins), so `||` gets one, built like its strikethrough:
# a delimiter run paired by the parser's own balancing, so a spoiler nests with emphasis like any other style.


def _text(state: StateInline, silent: bool) -> bool:
    """The stock text rule (plain text up to a character some rule may start at), with `|` among those characters."""
    found = _TERMINATOR.search(state.src, state.pos, state.posMax)
    end = found.start() if found else state.posMax
    if end == state.pos:
        return False
    if not silent:
        state.pending += state.src[state.pos : end]
    state.pos = end
    return True


def _spoiler_markers(state: StateInline, silent: bool) -> bool:
    """Each `||` of a run becomes a text token and a delimiter; `_pair_spoilers` turns matched ones into tags."""
    from markdown_it.rules_inline.state_inline import Delimiter

    start = state.pos
    if silent or state.src[start] != "|":
        return False
    scanned = state.scanDelims(start, True)
    length = scanned.length
    if length < 2:
        return False
    if length % 2:
        state.push("text", "", 0).content = "|"
        length -= 1
    for _ in range(0, length, 2):
        state.push("text", "", 0).content = "||"
        state.delimiters.append(
            Delimiter(
                marker=_BAR,
                length=0,  # no "rule of 3" for this marker
                token=len(state.tokens) - 1,
                end=-1,
                open=scanned.can_open,
                close=scanned.can_close,
            )
        )
    state.pos += scanned.length
    return True


def _pair_delimiters(state: StateInline, delimiters: list[Delimiter]) -> None:
    lone: list[int] = []
    for delimiter in delimiters:
        if delimiter.marker != _BAR or delimiter.end == -1:
            continue
        closer = delimiters[delimiter.end]
        opening, closing = state.tokens[delimiter.token], state.tokens[closer.token]
        opening.type, opening.nesting = "spoiler_open", 1
        closing.type, closing.nesting = "spoiler_close", -1
        for token in (opening, closing):
            token.tag, token.markup, token.content = "tg-spoiler", "||", ""
        before = state.tokens[closer.token - 1]
        if before.type == "text" and before.content == "|":
            lone.append(closer.token - 1)
    # An odd run (`|||`) leaves one `|` before the closer: it belongs after the closing tags.
    while lone:
        index = lone.pop()
        last = index + 1
        while last < len(state.tokens) and state.tokens[last].type == "spoiler_close":
            last += 1
        last -= 1
        if index != last:
            state.tokens[index], state.tokens[last] = state.tokens[last], state.tokens[index]


def _pair_spoilers(state: StateInline) -> None:
    _pair_delimiters(state, state.delimiters)
    for meta in state.tokens_meta:
        if meta and "delimiters" in meta:
            _pair_delimiters(state, meta["delimiters"])


@functools.cache
def _parser() -> MarkdownIt:
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": False}).enable("strikethrough")
    md.inline.ruler.at("text", _text)
    md.inline.ruler.after("strikethrough", "spoiler", _spoiler_markers)
    md.inline.ruler2.after("strikethrough", "spoiler", _pair_spoilers)
    return md


def parse(text: str) -> SyntaxTreeNode:
    """The syntax tree of `text` (an unclosed code fence, as in a reply still streaming, runs to the end)."""
    from markdown_it.tree import SyntaxTreeNode

    return SyntaxTreeNode(_parser().parse(text))


def plain(text: str) -> bool:
    """Whether `text` is one paragraph of plain text to the parser: one line, no character a Markdown rule starts
    at, no `>` (a quote), not a list's number, no white space at either end (which the parser drops)."""
    return _PLAIN.fullmatch(text) is not None and text == text.strip() and _NUMBERED.match(text) is None


# --- rendering: what both platforms share -------------------------------------------------------------------------

STYLES = ("em", "strong", "s", "spoiler")  # italic, bold, strike, spoiler: markdown-it's node types


def _edges(node: SyntaxTreeNode) -> tuple[str, str]:
    """The first and last source character of an inline node (enough to tell whether a style sits inside a word)."""
    if node.type == "text":
        return node.content[:1], node.content[-1:]
    if node.type in ("softbreak", "hardbreak"):
        return "\n", "\n"
    if node.type == "code_inline":
        return "`", "`"
    if node.type in STYLES:
        return node.markup[:1], node.markup[-1:]
    if node.type == "link":
        return ("<", ">") if node.markup == "autolink" else ("[", ")")
    if node.type == "image":
        return "!", ")"
    return "", ""


def _has_scheme(href: str) -> bool:
    return _SCHEME.match(href) is not None


class Renderer(ABC):
    """Walks the syntax tree of one text; a platform says how each piece is written. Styles are never nested in
    themselves, code inside a link is plain text, and a style inside a word (`2*3*4`) keeps its markers unless the
    platform can show it there."""

    def __init__(self, source: str) -> None:
        self.source = _NEWLINE.sub("\n", source)  # as markdown-it reads it, so that its line numbers match ours
        self.lines = self.source.split("\n")
        self.active: set[str] = set()  # styles open around the current node: never opened twice
        self.quotes = 0
        self.in_link = False

    # what a platform provides (`kind` is one of STYLES)

    @abstractmethod
    def escape(self, text: str) -> str: ...

    @abstractmethod
    def style(self, kind: str, inner: str) -> str: ...

    @abstractmethod
    def styles_inside_words(self, kind: str) -> bool:
        """Whether `kind` can be shown inside a word (`2*3*4`): otherwise its markers stay as written."""
        ...

    @abstractmethod
    def code_span(self, code: str) -> str: ...

    @abstractmethod
    def link(self, href: str, label: str, autolink: bool) -> str: ...

    @abstractmethod
    def code_block(self, code: str, language: str) -> str: ...

    @abstractmethod
    def quote(self, inner: str) -> str: ...

    # blocks

    def render(self) -> str:
        """The whole text, rendered. A line with no character any Markdown rule starts at (nor a list's number) is
        one paragraph of plain text, as the parser would find: escaped without building its tree (many a reply is
        such a line, and a streamed one is rendered again at each edit)."""
        if plain(self.source):
            return self.escape(self.source)
        return self.blocks(parse(self.source).children)

    def blocks(self, nodes: Sequence[SyntaxTreeNode]) -> str:
        """Sibling blocks one line apart, or two where the source had a blank line between them."""
        out: list[str] = []
        for index, node in enumerate(nodes):
            rendered = self.block(node)
            if index and out:
                out.append("\n\n" if self.blank_before(node) else "\n")
            out.append(rendered)
        return "".join(out)

    def blank_before(self, node: SyntaxTreeNode) -> bool:
        if node.map is None or node.map[0] == 0:
            return False
        return _BLANK.fullmatch(self.lines[node.map[0] - 1]) is not None

    def block(self, node: SyntaxTreeNode) -> str:
        kind = node.type
        if kind == "paragraph":
            return self.blocks(node.children)
        if kind == "inline":
            return self.inline(node.children, "", "")
        if kind == "heading":
            return self.styled("strong", lambda: self.blocks(node.children))
        if kind in ("bullet_list", "ordered_list"):
            return self.list(node)
        if kind == "blockquote":
            self.quotes += 1
            try:
                return self.quote(self.blocks(node.children))
            finally:
                self.quotes -= 1
        if kind in ("fence", "code_block"):
            code = node.content[:-1] if node.content.endswith("\n") else node.content
            words = node.info.split()
            language = words[0] if words and _LANGUAGE.fullmatch(words[0]) else ""
            return self.code_block(code, language)
        if kind == "hr":
            return RULE
        return self.escape(node.content)  # nothing else is enabled; text, should one appear

    def list(self, node: SyntaxTreeNode) -> str:
        start = node.attrGet("start")
        number = int(start) if isinstance(start, int | str) and str(start).isdigit() else 1
        items: list[str] = []
        for index, item in enumerate(node.children):
            marker = f"{number + index}. " if node.type == "ordered_list" else "• "
            body = self.blocks(item.children).split("\n")
            lines = [marker + body[0] if body[0] else marker.rstrip()]
            lines += [" " * len(marker) + line if line else line for line in body[1:]]
            if index:
                items.append("\n\n" if self.blank_before(item) else "\n")
            items.append("\n".join(lines))
        return "".join(items)

    # inline

    def styled(self, kind: str, render: Callable[[], str]) -> str:
        if kind in self.active:
            return render()
        self.active.add(kind)
        try:
            return self.style(kind, render())
        finally:
            self.active.discard(kind)

    def inline(self, nodes: Sequence[SyntaxTreeNode], before: str, after: str) -> str:
        edges = [_edges(node) for node in nodes]
        previous = [before]
        for _, last in edges:
            previous.append(last or previous[-1])
        following = [after]
        for first, _ in reversed(edges):
            following.append(first or following[-1])
        following.reverse()
        out: list[str] = []
        for index, node in enumerate(nodes):
            out.append(self.node(node, previous[index], following[index + 1]))
        return "".join(out)

    def node(self, node: SyntaxTreeNode, before: str, after: str) -> str:
        kind = node.type
        if kind == "text":
            return self.escape(node.content)
        if kind in ("softbreak", "hardbreak"):
            return "\n"
        if kind == "code_inline":
            return self.escape(node.content) if self.in_link else self.code_span(node.content)
        if kind in STYLES:
            inside_word = before.isalnum() or after.isalnum()
            if inside_word and not self.styles_inside_words(kind):
                marker = self.escape(node.markup)
                return marker + self.inline(node.children, node.markup[-1:], node.markup[:1]) + marker
            inner = [child for child in node.children if child.type != "text" or child.content]
            if kind == "em" and [child.type for child in inner] == ["strong"]:
                # `***both***` parses as italic around bold; bold outside reads the same and is how Slack writes it
                return self.styled(
                    "strong", lambda: self.styled("em", lambda: self.inline(inner[0].children, "*", "*"))
                )
            return self.styled(kind, lambda: self.inline(inner, node.markup[-1:], node.markup[:1]))
        if kind in ("link", "image"):
            href = str(node.attrGet("href" if kind == "link" else "src") or "")
            was_in_link, self.in_link = self.in_link, True
            try:
                label = self.inline(node.children, "[", "]")
            finally:
                self.in_link = was_in_link
            if not _has_scheme(href):  # a relative link leads nowhere in a chat
                return f"{label} ({self.escape(href)})" if href and label else label or self.escape(href)
            return self.link(href, label, node.markup == "autolink")
        return self.escape(node.content)
