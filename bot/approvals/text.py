"""How a command waiting for approval is shown to a person: every invisible or control character visibly escaped."""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

__all__ = ["Shown", "shown_command"]

# Escaped wherever they are: controls, format characters (bidi controls, zero-width ones, the BOM, soft hyphen,
# tags), private use, surrogates, unassigned code points, line and paragraph separators.
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Co", "Cs", "Cn", "Zl", "Zp"})
# Invisible characters of other categories (Unicode's default-ignorable ones that are not Cf or Cn, and a few blank
# letters and symbols): combining grapheme joiner, Hangul fillers, Khmer inherent vowels, Mongolian and other
# variation selectors, braille blank.
_HIDDEN_RANGES = (
    (0x034F, 0x034F), (0x115F, 0x1160), (0x17B4, 0x17B5), (0x180B, 0x180F), (0x2800, 0x2800), (0x3164, 0x3164),
    (0xFE00, 0xFE0F), (0xFFA0, 0xFFA0), (0xE0100, 0xE01EF),
)  # fmt: skip
_LISTED = 6  # at most this many different escapes are named in the warning


@dataclass(frozen=True)
class Shown:
    """A command as it is displayed, and the escapes standing for the hidden characters it holds (in the order
    they first appear, each once). With none, `text` is the command exactly; with some, every backslash in
    `text` starts an escape: `\\\\` is a backslash of the command, `\\xNN`, `\\uNNNN`, `\\UNNNNNNNN` a hidden
    character (newline and tab too: a command is shown on one line)."""

    text: str
    escapes: tuple[str, ...] = ()

    @property
    def hidden(self) -> bool:
        return bool(self.escapes)

    def warning(self) -> str | None:
        """The one line a surface adds under the command when it holds hidden characters (Markdown: the escapes
        are code spans); None when it holds none."""
        if not self.escapes:
            return None
        named = ", ".join(f"`{escape}`" for escape in self.escapes[:_LISTED])
        more = f" and {len(self.escapes) - _LISTED} more" if len(self.escapes) > _LISTED else ""
        return (
            f"⚠ This command holds invisible or control characters, shown escaped ({named}{more}); "
            "a backslash of the command is shown as `\\\\`."
        )

    def plain_warning(self) -> str | None:
        """The warning for a terminal (no Markdown)."""
        warning = self.warning()
        return None if warning is None else warning.replace("`", "")


def _is_hidden(char: str) -> bool:
    if char == " ":
        return False
    category = unicodedata.category(char)
    if category in _HIDDEN_CATEGORIES or category.startswith("Z"):  # every space but ' ' (no-break, em, ideographic)
        return True
    code = ord(char)
    return any(low <= code <= high for low, high in _HIDDEN_RANGES)


def _escape(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def shown_command(command: str) -> Shown:
    """`command` as a person must see it before allowing it: unchanged when every character is visible; else each
    hidden character (controls and escape sequences' ESC, bidi controls, zero-width and other invisible or format
    characters, every whitespace but the plain space) written as `\\xNN`/`\\uNNNN`/`\\UNNNNNNNN` and every
    backslash doubled, so that the text reads back to the command unambiguously and nothing in it is interpreted."""
    if not any(_is_hidden(char) for char in command):
        return Shown(command)
    parts: list[str] = []
    escapes: dict[str, None] = {}
    for char in command:
        if char == "\\":
            parts.append("\\\\")
        elif _is_hidden(char):
            escape = _escape(char)
            escapes.setdefault(escape)
            parts.append(escape)
        else:
            parts.append(char)
    return Shown("".join(parts), tuple(escapes))
