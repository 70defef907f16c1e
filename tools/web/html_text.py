"""HTML to readable text: the title, and lines with `#` headings, `-` list items and `text (url)` links."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from urllib.parse import urlsplit

# --- HTML to text -----------------------------------------------------------------------------------------------------

_SKIP = {"script", "style", "noscript", "template", "svg", "math", "iframe", "object"}
_HEAD_TAGS = {"title", "meta", "link", "base", "style", "script", "noscript", "template"}
_BLOCKS = {
    "p", "div", "section", "article", "header", "footer", "main", "nav", "aside", "ul", "ol", "dl", "dt", "dd",
    "table", "tr", "blockquote", "pre", "hr", "br", "figure", "figcaption", "form", "fieldset", "details",
    "summary", "address", "caption", "body",
}  # fmt: skip
_HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
_SPACES = re.compile(r"[^\S\n]+")
_BLANKS = re.compile(r"\n{3,}")


class _TextExtractor(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title_parts: list[str] | None = None
        self.title: str | None = None
        self.skip = 0
        self.in_head = False
        self.pre = 0
        self.link: str | None = None
        self.link_text: list[str] = []
        self.size = 0  # characters emitted so far (before whitespace is collapsed)

    def _emit(self, text: str) -> None:
        if self.link is not None:
            self.link_text.append(text)
        self.parts.append(text)
        self.size += len(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIP:
            self.skip += 1
            return
        if self.skip:
            return
        if tag == "head":
            self.in_head = True
            return
        if self.in_head and tag not in _HEAD_TAGS:
            self.in_head = False  # a body tag ends an unclosed head, as browsers do
        if tag == "title":
            if self.title is None:
                self.title_parts = []
            return
        if self.in_head:
            return
        if tag in _HEADINGS:
            self._emit("\n\n" + "#" * _HEADINGS[tag] + " ")
        elif tag == "li":
            self._emit("\n- ")
        elif tag in _BLOCKS:
            self._emit("\n")
            if tag == "pre":
                self.pre += 1
        elif tag in ("td", "th"):
            self._emit(" ")
        elif tag == "a":
            href = (dict(attrs).get("href") or "").strip()
            parsed = urlsplit(href)
            self.link = href if parsed.scheme in ("http", "https") and parsed.netloc else None
            self.link_text = []

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIP:
            self.skip = max(0, self.skip - 1)
            return
        if self.skip:
            return
        if tag == "head":
            self.in_head = False
        elif tag == "title" and self.title_parts is not None:
            self.title = " ".join("".join(self.title_parts).split()) or None
            self.title_parts = None
        elif tag in _HEADINGS or tag in _BLOCKS:
            self._emit("\n")
            if tag == "pre":
                self.pre = max(0, self.pre - 1)
        elif tag == "a" and self.link is not None:
            text = " ".join("".join(self.link_text).split())
            link, self.link = self.link, None
            if text and text != link:
                self.parts.append(f" ({link})")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in _SKIP and tag != "a":  # <svg/> and <a/> have no content to skip or link
            self.handle_starttag(tag, attrs)

    def handle_data(self, data: str) -> None:
        if self.skip:
            return
        if self.title_parts is not None:
            self.title_parts.append(data)
            return
        if self.in_head:
            return
        self._emit(data if self.pre else re.sub(r"\s+", " ", data))

    def text(self) -> str:
        lines = (_SPACES.sub(" ", line).strip() for line in "".join(self.parts).split("\n"))
        return _BLANKS.sub("\n\n", "\n".join(lines)).strip()


def html_to_text(markup: str, limit: int | None = None) -> tuple[str | None, str, bool]:
    """The page's title, its readable text, and whether parsing stopped early because the text already exceeds
    `limit` characters. Scripts, styles and the head are dropped, headings are `# ...` lines, blocks and list
    items are on their own lines, and links are `text (url)` when the url is absolute http(s)."""
    parser = _TextExtractor()
    stopped = False
    step = 64 * 1024
    for start in range(0, len(markup), step):
        parser.feed(markup[start : start + step])
        if limit is not None and parser.size > limit and len(parser.text()) > limit and start + step < len(markup):
            stopped = True
            break
    if not stopped:
        parser.close()
    if parser.title is None and parser.title_parts:  # an unclosed <title>
        parser.title = " ".join("".join(parser.title_parts).split()) or None
    return parser.title, parser.text(), stopped
