"""The model's Markdown as Slack mrkdwn: bold, italics, strike, links, headings, lists, quotes, code kept verbatim,
and `& < >` escaped everywhere else so that text never turns into a mention or a broken link."""

from __future__ import annotations

from channels.markdown import Renderer

_MARKS = {"em": "_", "strong": "*", "s": "~", "spoiler": "||"}  # Slack has no spoilers: those keep their marks


def escape(text: str) -> str:
    """Slack's three control characters as entities (the only escaping Slack wants)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class _SlackMrkdwn(Renderer):
    def escape(self, text: str) -> str:
        return escape(text)

    def style(self, kind: str, inner: str) -> str:
        mark = _MARKS[kind]
        return f"{mark}{inner}{mark}"

    def styles_inside_words(self, kind: str) -> bool:
        return False  # Slack shows `*b*` as bold only at a word's edges

    def code_span(self, code: str) -> str:
        return f"`{escape(code)}`"

    def link(self, href: str, label: str, autolink: bool) -> str:
        # `|` and `>` end Slack's link token; `&` is written as an entity, as Slack itself writes it.
        url = escape(href).replace("|", "%7C")
        if autolink or not label or label == escape(href):
            return f"<{url}>"
        return f"<{url}|{label}>"

    def code_block(self, code: str, language: str) -> str:
        return f"```\n{escape(code)}\n```" if code else "``` ```"

    def quote(self, inner: str) -> str:
        return "\n".join(f"> {line}" if line else ">" for line in inner.split("\n"))


def markdown_to_mrkdwn(text: str) -> str:
    """Convert Markdown to Slack mrkdwn. Code (fenced or inline) keeps its text, only escaped; an unclosed fence,
    as in a reply still being streamed, runs to the end."""
    return _SlackMrkdwn(text).render()
