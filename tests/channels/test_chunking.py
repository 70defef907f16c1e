"""Chunking replies to a platform's limit: paragraph, line, word boundaries; code fences closed and reopened."""

from __future__ import annotations

import pytest

from channels.chunking import chunk_text


def test_short_text_is_one_chunk() -> None:
    assert chunk_text("hello", 10) == ["hello"]
    assert chunk_text("", 10) == []


def test_paragraphs_are_packed_and_split_at_blank_lines() -> None:
    text = "first paragraph here\n\nsecond one\n\nthird paragraph is longer"
    assert chunk_text(text, 35) == ["first paragraph here\n\nsecond one", "third paragraph is longer"]


def test_a_long_paragraph_splits_at_lines_then_words() -> None:
    text = "line one is here\nline two is here\n" + "word " * 12
    chunks = chunk_text(text.strip(), 20)
    assert chunks[:2] == ["line one is here", "line two is here"]
    assert all(len(chunk) <= 20 for chunk in chunks)
    assert " ".join(" ".join(chunks[2:]).split()) == " ".join(["word"] * 12)


def test_a_word_longer_than_the_limit_is_cut() -> None:
    assert chunk_text("x" * 25, 10) == ["x" * 10, "x" * 10, "x" * 5]


def test_never_splits_inside_a_code_block_that_fits() -> None:
    code = "```python\nprint(1)\n\nprint(2)\n```"
    text = f"intro text\n\n{code}\n\nafter"
    chunks = chunk_text(text, len(code) + 2)
    assert code in chunks
    assert all(chunk.count("```") % 2 == 0 for chunk in chunks)


def test_a_code_block_too_long_is_closed_and_reopened() -> None:
    body = "\n".join(f"line_{n} = {n}" for n in range(30))
    text = f"Here:\n\n```python\n{body}\n```\n\nDone."
    chunks = chunk_text(text, 120)
    assert all(len(chunk) <= 120 for chunk in chunks)
    code_chunks = [chunk for chunk in chunks if "line_" in chunk]
    assert len(code_chunks) > 1
    for chunk in code_chunks:  # each piece of the block is a whole fenced block of its own
        assert chunk.count("```python\n") == 1
        assert chunk.count("```") == 2
    rebuilt = [line for chunk in code_chunks for line in chunk.split("\n") if line.startswith("line_")]
    assert rebuilt == body.split("\n")


@pytest.mark.parametrize("limit", [50, 100, 500, 4096])
def test_no_chunk_exceeds_the_limit_and_no_text_is_lost(limit: int) -> None:
    text = ("A paragraph of prose that goes on. " * 20 + "\n\n") * 5 + "```\n" + "code line\n" * 80 + "```"
    chunks = chunk_text(text, limit)
    assert all(len(chunk) <= limit for chunk in chunks)
    words = [w for w in text.split() if w != "```"]
    assert [w for chunk in chunks for w in chunk.split() if w != "```"] == words
