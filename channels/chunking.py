"""Split a long reply into messages within a platform's limit: at paragraphs, then lines, then words,
never inside a fenced code block (a block too long for one message is closed and reopened)."""

from __future__ import annotations

import re

_FENCE = re.compile(r"^\s*(```|~~~)")
_CLOSE = "```"


def _blocks(text: str) -> list[str]:
    """Paragraphs and whole fenced code blocks, in order; blank lines between them are dropped."""
    blocks: list[str] = []
    current: list[str] = []
    fence: str | None = None
    for line in text.split("\n"):
        marker = _FENCE.match(line)
        if fence is None and marker:
            if current:
                blocks.append("\n".join(current))
            current, fence = [line], marker.group(1)
        elif fence is not None:
            current.append(line)
            if marker and marker.group(1) == fence and len(current) > 1:
                blocks.append("\n".join(current))
                current, fence = [], None
        elif line.strip():
            current.append(line)
        elif current:
            blocks.append("\n".join(current))
            current = []
    if current:
        blocks.append("\n".join(current))
    return blocks


def _hard_split(text: str, limit: int) -> list[str]:
    """Split at spaces where possible, else exactly at the limit."""
    parts = []
    while len(text) > limit:
        cut = text.rfind(" ", 0, limit + 1)
        cut = cut if cut > limit // 2 else limit
        parts.append(text[:cut].rstrip())
        text = text[cut:].lstrip(" ")
    if text:
        parts.append(text)
    return parts


def _pack(pieces: list[str], limit: int, joiner: str) -> list[str]:
    """Greedily join pieces (each within the limit) into as few chunks as fit."""
    chunks: list[str] = []
    for piece in pieces:
        if chunks and len(chunks[-1]) + len(joiner) + len(piece) <= limit:
            chunks[-1] += joiner + piece
        else:
            chunks.append(piece)
    return chunks


def _split_block(block: str, limit: int) -> list[str]:
    """A block longer than the limit, cut into pieces that each fit."""
    lines = block.split("\n")
    if _FENCE.match(lines[0]):
        opener = lines[0]
        closed = len(lines) > 1 and _FENCE.match(lines[-1]) is not None
        body = lines[1:-1] if closed else lines[1:]
        room = limit - len(opener) - len(_CLOSE) - 2
        if room < 1:
            raise ValueError(f"a limit of {limit} leaves no room for a code fence")
        pieces = [part for line in body for part in (_hard_split(line, room) if len(line) > room else [line])]
        return [f"{opener}\n{chunk}\n{_CLOSE}" for chunk in _pack(pieces, room, "\n")]
    pieces = [part for line in lines for part in (_hard_split(line, limit) if len(line) > limit else [line])]
    return _pack(pieces, limit, "\n")


def chunk_text(text: str, limit: int) -> list[str]:
    """Messages of at most `limit` characters that together carry `text`."""
    if limit < 1:
        raise ValueError("limit must be positive")
    if len(text) <= limit:
        return [text] if text.strip() else []
    pieces: list[str] = []
    for block in _blocks(text):
        pieces += [block] if len(block) <= limit else _split_block(block, limit)
    return _pack(pieces, limit, "\n\n")
