"""The model's Markdown as Telegram HTML (parse_mode HTML): bold, italic, strike, spoilers, code, fenced blocks with
a language, links, headings, lists, quotes; every other `&`, `<`, `>` escaped, and tags always balanced."""

from __future__ import annotations

from channels.markdown import Renderer

_TAGS = {"em": "i", "strong": "b", "s": "s", "spoiler": "tg-spoiler"}


def escape(text: str) -> str:
    """Escape the three characters Telegram's HTML parser treats specially."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _attribute(text: str) -> str:
    return escape(text).replace('"', "&quot;")


class _TelegramHTML(Renderer):
    def escape(self, text: str) -> str:
        return escape(text)

    def style(self, kind: str, inner: str) -> str:
        tag = _TAGS[kind]
        return f"<{tag}>{inner}</{tag}>"

    def styles_inside_words(self, kind: str) -> bool:
        return kind != "em"  # `2*3*4` is arithmetic far more often than a word with an italic middle

    def code_span(self, code: str) -> str:
        return f"<code>{escape(code)}</code>"

    def link(self, href: str, label: str, autolink: bool) -> str:
        return f'<a href="{_attribute(href)}">{label or escape(href)}</a>'

    def code_block(self, code: str, language: str) -> str:
        if language:
            return f'<pre><code class="language-{_attribute(language)}">{escape(code)}</code></pre>'
        return f"<pre>{escape(code)}</pre>"

    def quote(self, inner: str) -> str:
        if self.quotes > 1:  # Telegram refuses a blockquote inside another: the inner one is marked by hand
            return "\n".join(f"&gt; {line}" if line else "&gt;" for line in inner.split("\n"))
        return f"<blockquote>{inner}</blockquote>"


def markdown_to_html(text: str) -> str:
    """Telegram HTML for `text`; an unclosed code fence (a reply still streaming) runs to the end."""
    return _TelegramHTML(text).render()
