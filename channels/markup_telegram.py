"""Render the model's Markdown as Telegram HTML (parse_mode HTML): bold, italic, strike, spoilers, code, fenced
blocks with a language, links, headings, quotes; every other `&`, `<`, `>` escaped, and tags always balanced."""

from __future__ import annotations

import re

_FENCE = re.compile(r"^\s*(```|~~~)\s*([\w#+.-]*)\s*$")
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.+?)\s*#*\s*$")
_BULLET = re.compile(r"^(\s*)[-*+]\s+(.*)$")
_QUOTE = re.compile(r"^\s{0,3}>\s?(.*)$")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
_LINK = re.compile(r"\[([^\]\n]+)\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_PLACEHOLDER = re.compile(r"\x00(\d+)\x00")
_INLINE: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*"), "b"),
    (re.compile(r"(?<!\w)__(?=\S)(.+?)(?<=\S)__(?!\w)"), "b"),
    (re.compile(r"~~(?=\S)(.+?)(?<=\S)~~"), "s"),
    (re.compile(r"\|\|(?=\S)(.+?)(?<=\S)\|\|"), "tg-spoiler"),
    (re.compile(r"(?<![\w*])\*(?=[^\s*])(.+?)(?<=[^\s*])\*(?![\w*])"), "i"),
    (re.compile(r"(?<!\w)_(?=[^\s_])(.+?)(?<=[^\s_])_(?!\w)"), "i"),
)
_TAG = re.compile(r"<(/?)([a-z-]+)[^>]*>")


def escape(text: str) -> str:
    """Escape the three characters Telegram's HTML parser treats specially."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _escape_attribute(text: str) -> str:
    return escape(text).replace('"', "&quot;")


def _balanced(html: str) -> bool:
    stack: list[str] = []
    for match in _TAG.finditer(html):
        closing, name = match.group(1), match.group(2)
        if not closing:
            stack.append(name)
        elif not stack or stack.pop() != name:
            return False
    return not stack


def _inline(text: str) -> str:
    """One line of prose: code spans and links are set aside first, so that nothing inside them is formatted."""
    kept: list[str] = []

    def keep(html: str) -> str:
        kept.append(html)
        return f"\x00{len(kept) - 1}\x00"

    text = text.replace("\x00", "")
    text = _CODE_SPAN.sub(lambda match: keep(f"<code>{escape(match.group(2).strip())}</code>"), text)
    text = _LINK.sub(
        lambda match: keep(f'<a href="{_escape_attribute(match.group(2))}">{escape(match.group(1))}</a>'), text
    )
    plain = escape(text)
    formatted = plain
    for pattern, tag in _INLINE:
        formatted = pattern.sub(rf"<{tag}>\1</{tag}>", formatted)
    if not _balanced(formatted):  # markers that overlap (`*a **b* c**`): keep the text, drop the formatting
        formatted = plain
    return _PLACEHOLDER.sub(lambda match: kept[int(match.group(1))], formatted)


def _prose(lines: list[str]) -> list[str]:
    out: list[str] = []
    quote: list[str] = []

    def flush_quote() -> None:
        if quote:
            out.append("<blockquote>" + "\n".join(quote) + "</blockquote>")
            quote.clear()

    for line in lines:
        quoted = _QUOTE.match(line)
        if quoted:
            quote.append(_inline(quoted.group(1)))
            continue
        flush_quote()
        heading = _HEADING.match(line)
        bullet = _BULLET.match(line)
        if heading:
            out.append(f"<b>{_inline(heading.group(1))}</b>")
        elif bullet and not re.fullmatch(r"\s*([-*_])\s*(\1\s*){2,}", line):
            out.append(f"{bullet.group(1)}• {_inline(bullet.group(2))}")
        else:
            out.append(_inline(line))
    flush_quote()
    return out


def markdown_to_html(text: str) -> str:
    """Telegram HTML for `text`; an unclosed code fence (a reply still streaming) runs to the end."""
    out: list[str] = []
    prose: list[str] = []
    code: list[str] | None = None
    fence = language = ""
    for line in text.split("\n"):
        marker = _FENCE.match(line)
        if code is None:
            if marker:
                out += _prose(prose)
                prose = []
                code, fence, language = [], marker.group(1), marker.group(2)
            else:
                prose.append(line)
        elif marker and marker.group(1) == fence and not marker.group(2):
            out.append(_pre(code, language))
            code = None
        else:
            code.append(line)
    out += _prose(prose)
    if code is not None:
        out.append(_pre(code, language))
    return "\n".join(out)


def _pre(lines: list[str], language: str) -> str:
    body = escape("\n".join(lines))
    if language:
        return f'<pre><code class="language-{_escape_attribute(language)}">{body}</code></pre>'
    return f"<pre>{body}</pre>"
