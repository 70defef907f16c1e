"""What the web pages show, made safe and readable: Markdown as HTML with no raw HTML and no images from anywhere,
moments and token counts as people read them, and the usage chart."""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING

from markupsafe import Markup

if TYPE_CHECKING:
    from markdown_it import MarkdownIt

__all__ = ["bar_chart", "markdown_html", "moment", "tokens"]


@functools.cache
def _parser() -> MarkdownIt:
    from markdown_it import MarkdownIt

    # CommonMark with raw HTML shown as text and a line break kept as one (as a chat shows it); no images (a message
    # must not make the page fetch from elsewhere); links keep markdown-it's own check (no javascript:, vbscript:,
    # file: or data:).
    return MarkdownIt("commonmark", {"html": False, "linkify": False, "breaks": True}).disable("image")


def markdown_html(text: str) -> Markup:
    """`text` (Markdown as models write it) as HTML that holds nothing a message could inject: every tag in it is
    escaped, links open in a new tab without telling where they came from."""
    html = _parser().render(text)
    return Markup(html.replace("<a href=", '<a rel="noopener noreferrer nofollow" target="_blank" href='))


def moment(at: float | None, now: float | None = None) -> str:
    """A moment as `2026-11-29 14:03` (local time), or `—` for none."""
    if at is None:
        return "—"
    return dt.datetime.fromtimestamp(at).strftime("%Y-%m-%d %H:%M")


def tokens(count: int) -> str:
    """A token count as people read it: 950, 12.3k, 4.1M."""
    if count < 1000:
        return str(count)
    if count < 1_000_000:
        return f"{count / 1000:.1f}k"
    return f"{count / 1_000_000:.1f}M"


def bar_chart(values: Sequence[tuple[str, int]], *, width: int = 640, height: int = 160) -> Markup:
    """A small SVG bar chart of `values` (label, amount), drawn on the server: no script, no style attribute (the
    page's Content-Security-Policy allows neither inline)."""
    if not values:
        return Markup("")
    top = max(amount for _, amount in values) or 1
    gap = 4
    bar = max(4, (width - gap * len(values)) // len(values))
    parts = [
        f'<svg class="chart" role="img" aria-label="Tokens per day" viewBox="0 0 {width} {height + 20}" '
        f'width="{width}" height="{height + 20}" xmlns="http://www.w3.org/2000/svg">'
    ]
    for index, (label, amount) in enumerate(values):
        tall = max(1, round(amount / top * height))
        x = index * (bar + gap)
        parts.append(
            f'<rect x="{x}" y="{height - tall}" width="{bar}" height="{tall}" fill="#4a7bd0">'
            f"<title>{Markup.escape(label)}: {amount:,} tokens</title></rect>"
        )
        parts.append(f'<text x="{x}" y="{height + 14}" font-size="10">{Markup.escape(label[-5:])}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))
