"""The memory tools: notes appended to Markdown files, BM25 search over an index that follows the files, safe refs."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tools.base import RunInfo, Tool, ToolContext, ToolResult, invoke
from tools.memory import (
    CHUNK,
    INDEX_FILE,
    MAX_NOTE,
    SNIPPET,
    fts_query,
    memory_tools,
    snippet,
    split_passages,
)

NOW = datetime(2026, 11, 22, 9, 14)
TODAY = "memory/2026-11-22.md"


def tools() -> dict[str, Tool]:
    return {tool.name: tool for tool in memory_tools(now=lambda: NOW)}


async def call(name: str, args: dict[str, Any], ws: Path | None) -> ToolResult:
    run = RunInfo(agent="main", session_key="agent:main:t", workspace=str(ws) if ws is not None else None)
    return await invoke(tools()[name], "call_1", args, ToolContext(run))


def payload(result: ToolResult) -> Any:
    assert not result.is_error, result.text
    return json.loads(result.text)


def error(result: ToolResult) -> str:
    assert result.is_error, result.text
    body = json.loads(result.text)
    assert body["status"] == "error"
    return str(body["error"])


async def search(ws: Path, query: str, **extra: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = payload(await call("memory_search", {"query": query, **extra}, ws))
    return found


async def refs(ws: Path, query: str, **extra: Any) -> list[str]:
    return [hit["ref"] for hit in await search(ws, query, **extra)]


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    return workspace


CORPUS_LONG_TERM = """\
# Memory

## Family
Tom's daughter Ada was born in March; her birthday party is usually at the climbing gym.

## Food
Tom is vegetarian and allergic to peanuts. He likes Thai curry without fish sauce.

## Work
Tom works on the billing service. The database is Postgres 16, deployed with Helm on Kubernetes.
"""

CORPUS_DAY_1 = """\
## 08:30
Baking: the sourdough starter needs feeding twice a day; use rye flour and keep it warm.

## 12:05
Travel: flight to Lisbon on 3 December, seat 14C, hotel near the Alfama district.

## 17:40
Postgres vacuum ran for three hours last night; the billing migration is waiting for the vacuum to finish.
"""

CORPUS_DAY_2 = """\
## 10:00
Garden: the tomato seedlings go outside after the last frost, around mid May.

## 15:20
The Kafka migration plan: move the invoice events topic first, then the billing consumers. Kafka retention is 7 days.
"""


@pytest.fixture
def corpus(ws: Path) -> Path:
    (ws / "MEMORY.md").write_text(CORPUS_LONG_TERM)
    (ws / "memory").mkdir()
    (ws / "memory" / "2026-11-20.md").write_text(CORPUS_DAY_1)
    (ws / "memory" / "2026-11-21.md").write_text(CORPUS_DAY_2)
    return ws


# --- the tools ---------------------------------------------------------------------------------------------


def test_three_tools_in_the_memory_group_with_described_parameters() -> None:
    listed = memory_tools()
    assert [tool.name for tool in listed] == ["memory_write", "memory_search", "memory_get"]
    for tool in listed:
        assert tool.group == "group:memory"
        assert tool.description
        schema = tool.json_schema()
        for name, prop in schema["properties"].items():
            assert prop.get("description"), f"{tool.name}.{name} has no description"
    search_limit = tools()["memory_search"].json_schema()["properties"]["limit"]
    assert (search_limit["default"], search_limit["maximum"]) == (5, 20)


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("memory_write", {"text": "hello"}),
        ("memory_search", {"query": "hello"}),
        ("memory_get", {"ref": "MEMORY.md#1"}),
    ],
)
async def test_no_workspace_is_an_error(name: str, args: dict[str, Any]) -> None:
    assert error(await call(name, args, None)) == "this agent has no workspace"


# --- memory_write ------------------------------------------------------------------------------------------


async def test_write_appends_timestamped_entries_to_todays_journal(ws: Path) -> None:
    first = payload(await call("memory_write", {"text": "Tom prefers tea to coffee."}, ws))
    second = payload(await call("memory_write", {"text": "  Meeting moved to Friday.\n\n"}, ws))
    assert first == {"status": "ok", "file": TODAY, "ref": f"{TODAY}#1"}
    assert second == {"status": "ok", "file": TODAY, "ref": f"{TODAY}#2"}
    assert (ws / TODAY).read_text() == "## 09:14\nTom prefers tea to coffee.\n\n## 09:14\nMeeting moved to Friday.\n"
    assert not (ws / "MEMORY.md").exists()


async def test_write_creates_the_workspace_folders_it_needs(tmp_path: Path) -> None:
    ws = tmp_path / "not-yet"
    assert payload(await call("memory_write", {"text": "first note"}, ws))["file"] == TODAY
    assert (ws / TODAY).read_text() == "## 09:14\nfirst note\n"


async def test_write_long_term_appends_to_memory_md_after_a_persons_text(ws: Path) -> None:
    (ws / "MEMORY.md").write_text("# Memory\n\n## Family\nDaughter: Ada.")  # no newline at the end
    result = payload(await call("memory_write", {"text": "Tom is allergic to peanuts.", "long_term": True}, ws))
    assert result == {"status": "ok", "file": "MEMORY.md", "ref": "MEMORY.md#2"}
    assert (ws / "MEMORY.md").read_text() == (
        "# Memory\n\n## Family\nDaughter: Ada.\n\n## 2026-11-22 09:14\nTom is allergic to peanuts.\n"
    )
    assert not (ws / "memory").exists()
    got = payload(await call("memory_get", {"ref": result["ref"]}, ws))
    assert (got["heading"], got["text"]) == ("2026-11-22 09:14", "Tom is allergic to peanuts.")


async def test_write_ref_points_at_the_notes_first_passage_even_when_it_brings_headings(ws: Path) -> None:
    payload(await call("memory_write", {"text": "one"}, ws))
    result = payload(await call("memory_write", {"text": "### Plan\nShip on Monday.\n### Risks\nNone."}, ws))
    assert result["ref"] == f"{TODAY}#2"
    got = payload(await call("memory_get", {"ref": result["ref"]}, ws))
    assert (got["heading"], got["text"]) == ("Plan", "Ship on Monday.")


async def test_write_closes_a_code_fence_the_note_left_open(ws: Path) -> None:
    payload(await call("memory_write", {"text": "The command:\n```sh\nmake deploy"}, ws))
    later = payload(await call("memory_write", {"text": "after the fence"}, ws))
    assert later["ref"] == f"{TODAY}#2"  # the second heading is still a heading
    assert (ws / TODAY).read_text().startswith("## 09:14\nThe command:\n```sh\nmake deploy\n```\n")


@pytest.mark.parametrize("text", ["", "   \n\t  "])
async def test_write_refuses_an_empty_note(ws: Path, text: str) -> None:
    assert "empty" in error(await call("memory_write", {"text": text}, ws))
    assert not (ws / "memory").exists()


async def test_write_refuses_a_note_of_headings_only(ws: Path) -> None:
    assert "headings" in error(await call("memory_write", {"text": "## Just a title"}, ws))
    assert not (ws / TODAY).exists()


async def test_write_caps_the_note_length(ws: Path) -> None:
    assert "8000" in error(await call("memory_write", {"text": "x" * (MAX_NOTE + 1)}, ws))
    assert not (ws / "memory").exists()
    assert payload(await call("memory_write", {"text": "x" * MAX_NOTE}, ws))["file"] == TODAY


async def test_write_will_not_follow_a_symlink_out_of_the_workspace(ws: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.md"
    outside.write_text("keep me\n")
    (ws / "MEMORY.md").symlink_to(outside)
    assert "outside the workspace" in error(await call("memory_write", {"text": "x", "long_term": True}, ws))
    assert outside.read_text() == "keep me\n"


# --- passages ----------------------------------------------------------------------------------------------


def test_passages_are_sections_with_text_and_fenced_hashes_are_not_headings() -> None:
    content = "intro line\n# Title\n\n## A\nbody a\n```\n# not a heading\n```\n## Empty\n\n## B ##\nbody b\n"
    passages = split_passages(content)
    assert [(p.number, p.heading, p.text) for p in passages] == [
        (1, "", "intro line"),
        (2, "A", "body a\n```\n# not a heading\n```"),
        (3, "B", "body b"),
    ]
    assert all(content[p.start : p.end] == p.text for p in passages)


def test_a_long_section_is_cut_at_paragraph_boundaries() -> None:
    paragraphs = [f"Paragraph {n}. " + "lorem ipsum dolor " * 20 for n in range(12)]  # ~375 characters each
    content = "## Long\n" + "\n\n".join(p.strip() for p in paragraphs) + "\n"
    passages = split_passages(content)
    assert len(passages) > 1
    assert all(len(p.text) <= CHUNK and p.heading == "Long" for p in passages)
    assert all(p.text.startswith("Paragraph ") and p.text.endswith("dolor") for p in passages)
    assert "\n\n".join(p.text for p in passages) == content[len("## Long\n") :].strip()


def test_a_paragraph_longer_than_a_chunk_is_cut_at_words() -> None:
    passages = split_passages("word " * 1_000)
    assert len(passages) == 4
    assert all(len(p.text) <= CHUNK and not p.text.endswith(" ") and "wor " not in p.text for p in passages)


# --- memory_search -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("How do I feed the sourdough starter?", "memory/2026-11-20.md#1"),
        ("when is Ada's birthday", "MEMORY.md#1"),
        ("peanuts allergy", "MEMORY.md#2"),
        ("Lisbon flight seat", "memory/2026-11-20.md#2"),
        ("tomato seedlings frost", "memory/2026-11-21.md#1"),
        ("Kubernetes Helm", "MEMORY.md#3"),
    ],
)
async def test_search_ranks_the_passage_about_the_topic_first(corpus: Path, query: str, expected: str) -> None:
    assert (await refs(corpus, query))[0] == expected


async def test_search_prefers_more_matching_words(corpus: Path) -> None:
    # "Postgres" is in two passages; only the journal passage also has "vacuum" (twice)
    found = await refs(corpus, "postgres vacuum")
    assert found[:2] == ["memory/2026-11-20.md#3", "MEMORY.md#3"]


async def test_search_prefers_the_rarer_word(corpus: Path) -> None:
    # "billing" is in three of the eight passages, "Lisbon" in one: the Lisbon passage ranks above them
    found = await refs(corpus, "billing Lisbon")
    assert found[0] == "memory/2026-11-20.md#2"
    assert set(found[1:]) == {"MEMORY.md#3", "memory/2026-11-20.md#3", "memory/2026-11-21.md#2"}


async def test_search_results_have_refs_files_headings_snippets_and_falling_scores(corpus: Path) -> None:
    hits = await search(corpus, "billing")
    assert [hit["file"] for hit in hits] and all(
        set(hit) == {"ref", "file", "heading", "snippet", "score"} for hit in hits
    )
    scores = [hit["score"] for hit in hits]
    assert scores == sorted(scores, reverse=True) and all(isinstance(score, float) for score in scores)
    work = next(hit for hit in hits if hit["ref"] == "MEMORY.md#3")
    assert work["heading"] == "Work"
    assert work["snippet"].startswith("Tom works on the billing service.")


async def test_search_snippet_of_a_long_passage_is_short_and_shows_the_match(ws: Path) -> None:
    filler = "Nothing much happened on this ordinary day. " * 10
    (ws / "MEMORY.md").write_text(f"## Diary\n{filler}\n{filler}The zeppelin landed at noon.\n{filler}\n")
    [hit] = await search(ws, "zeppelin")
    assert "The zeppelin landed at noon." in hit["snippet"]
    assert SNIPPET - 20 <= len(hit["snippet"]) <= SNIPPET + 2
    assert hit["snippet"].startswith("…") and hit["snippet"].endswith("…")
    inner = hit["snippet"].strip("…").split(" ")
    assert {inner[0], inner[-1]} <= set(filler.split())  # cut between words
    assert "\n" not in hit["snippet"]  # whitespace collapsed


def test_snippet_shows_the_densest_run_of_matches() -> None:
    text = "kafka " + "x" * 400 + " then " + "filler " * 80 + "[kafka kafka billing] " + "tail " * 80
    marked = text.replace("kafka", "\ue000kafka\ue001").replace("billing", "\ue000billing\ue001")
    cut = snippet(marked)
    assert "[kafka kafka billing]" in cut and len(cut) <= SNIPPET + 2
    assert snippet("short \ue000text\ue001\n\nhere") == "short text here"
    assert snippet("no marks " * 100).startswith("no marks no marks")  # a match in the heading only


async def test_search_respects_the_limit(corpus: Path) -> None:
    query = "Tom billing Kafka sourdough Lisbon tomato Ada"  # a word from every passage
    assert len(await refs(corpus, query)) == 5  # the default
    assert len(await refs(corpus, query, limit=2)) == 2
    assert len(await refs(corpus, query, limit=20)) == 8
    assert "limit" in error(await call("memory_search", {"query": query, "limit": 21}, corpus))
    assert "limit" in error(await call("memory_search", {"query": query, "limit": 0}, corpus))


async def test_search_finds_a_note_just_written_and_nothing_in_an_empty_workspace(ws: Path) -> None:
    assert await search(ws, "anything") == []
    ref = payload(await call("memory_write", {"text": "The wifi password is on the fridge."}, ws))["ref"]
    assert await refs(ws, "wifi password") == [ref]
    assert (ws / INDEX_FILE).is_file()


async def test_concurrent_writes_and_searches(ws: Path) -> None:
    writes = [call("memory_write", {"text": f"note number {n} about otters"}, ws) for n in range(8)]
    searches = [call("memory_search", {"query": "otters"}, ws) for _ in range(8)]
    results = await asyncio.gather(*writes, *searches)
    assert not any(result.is_error for result in results), [r.text for r in results if r.is_error]
    assert sorted(payload(result)["ref"] for result in results[:8]) == sorted(f"{TODAY}#{n}" for n in range(1, 9))
    assert len(await refs(ws, "otters", limit=20)) == 8


async def test_search_follows_a_persons_edit(corpus: Path) -> None:
    assert await refs(corpus, "Lisbon") == ["memory/2026-11-20.md#2"]
    day = corpus / "memory" / "2026-11-20.md"
    day.write_text(day.read_text().replace("Lisbon", "Porto"))
    assert await refs(corpus, "Lisbon") == []
    assert await refs(corpus, "Porto") == ["memory/2026-11-20.md#2"]


async def test_search_sees_an_edit_that_keeps_size_and_mtime(corpus: Path) -> None:
    day = corpus / "memory" / "2026-11-21.md"
    before = day.stat()
    assert await refs(corpus, "tomato") == ["memory/2026-11-21.md#1"]
    day.write_text(day.read_text().replace("tomato", "pepper"))  # same length
    os.utime(day, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert day.stat().st_size == before.st_size
    assert await refs(corpus, "tomato") == []
    assert await refs(corpus, "pepper") == ["memory/2026-11-21.md#1"]


async def test_search_forgets_deleted_files_and_learns_new_ones(corpus: Path) -> None:
    assert await refs(corpus, "Kafka") == ["memory/2026-11-21.md#2"]
    (corpus / "memory" / "2026-11-21.md").unlink()
    assert await refs(corpus, "Kafka") == []
    (corpus / "memory" / "ideas.md").write_text("# Ideas\n\nA Kafka dashboard for the invoice events.\n")
    assert await refs(corpus, "Kafka") == ["memory/ideas.md#1"]
    (corpus / "MEMORY.md").unlink()
    assert await refs(corpus, "vegetarian") == []


async def test_search_reads_only_memory_files(corpus: Path) -> None:
    (corpus / "notes.md").write_text("## Secret\nplatypus\n")
    (corpus / "memory" / "sub").mkdir()
    (corpus / "memory" / "sub" / "deep.md").write_text("platypus\n")
    (corpus / "memory" / ".hidden.md").write_text("platypus\n")
    (corpus / "memory" / "notes.txt").write_text("platypus\n")
    assert await refs(corpus, "platypus") == []


async def test_search_skips_a_memory_file_that_links_out_of_the_workspace(corpus: Path, tmp_path: Path) -> None:
    outside = tmp_path / "secret.md"
    outside.write_text("## Keys\nplatypus\n")
    (corpus / "memory" / "link.md").symlink_to(outside)
    assert await refs(corpus, "platypus") == []


@pytest.mark.parametrize(
    "syntax",
    [
        '"',
        '""',
        "*",
        "AND",
        "OR",
        "NOT",
        "NEAR(",
        "NEAR(a b, 2)",
        "-",
        ":",
        "text:",
        "path:",
        "{heading text}:",
        "^",
        "(",
        ")",
        "+",
        "'; DROP TABLE files; --",
        '"kafka',
        "kafka*",
        "-kafka",
        "kafka:",
        "(kafka)",
        "^kafka",
        "NEAR(kafka",
    ],
)
@pytest.mark.parametrize("shape", ["kafka {}", "{} kafka", "kafka {} billing"])
async def test_fts_syntax_in_a_query_never_errors(corpus: Path, syntax: str, shape: str) -> None:
    hits = await refs(corpus, shape.format(syntax))
    assert hits[0] == "memory/2026-11-21.md#2"  # the Kafka passage, whatever surrounds the word


async def test_fts_operators_are_plain_words(corpus: Path) -> None:
    assert await refs(corpus, "NEAR") == ["memory/2026-11-20.md#2"]  # "hotel near the Alfama"
    assert await refs(corpus, "NOT") == []
    assert set(await refs(corpus, "AND")) == {"MEMORY.md#2", "memory/2026-11-20.md#1"}  # the passages with "and"


@pytest.mark.parametrize("query", ["", "   ", '"" * - : ( ) ^', "!!!"])
async def test_a_query_without_words_is_an_error(corpus: Path, query: str) -> None:
    assert "no words" in error(await call("memory_search", {"query": query}, corpus))


def test_fts_query_quotes_each_word_and_ors_them() -> None:
    assert fts_query('Kafka AND "billing"* near(x') == '"Kafka" OR "AND" OR "billing" OR "near" OR "x"'
    assert fts_query("kafka Kafka KAFKA") == '"kafka"'
    assert fts_query("naïve café 東京") == '"naïve" OR "café" OR "東京"'
    assert fts_query("-*:") is None


async def test_a_damaged_index_is_rebuilt(corpus: Path) -> None:
    assert await refs(corpus, "Kafka") == ["memory/2026-11-21.md#2"]
    (corpus / INDEX_FILE).write_bytes(b"this is not a database" * 100)
    assert await refs(corpus, "Kafka") == ["memory/2026-11-21.md#2"]
    with sqlite3.connect(corpus / INDEX_FILE) as conn:
        assert conn.execute("SELECT count(*) FROM files").fetchone()[0] == 3


# --- memory_get --------------------------------------------------------------------------------------------


async def test_get_reads_the_passage_a_search_found(corpus: Path) -> None:
    [hit] = await search(corpus, "Lisbon")
    got = payload(await call("memory_get", {"ref": hit["ref"]}, corpus))
    assert got == {
        "ref": "memory/2026-11-20.md#2",
        "file": "memory/2026-11-20.md",
        "heading": "12:05",
        "text": "Travel: flight to Lisbon on 3 December, seat 14C, hotel near the Alfama district.",
        "passages": 3,
    }


async def test_get_reads_the_file_as_a_person_left_it(corpus: Path) -> None:
    [hit] = await search(corpus, "vegetarian")
    memory = corpus / "MEMORY.md"
    memory.write_text(memory.read_text().replace("allergic to peanuts", "allergic to cashews"))
    got = payload(await call("memory_get", {"ref": hit["ref"]}, corpus))
    assert "cashews" in got["text"] and "peanuts" not in got["text"]


async def test_get_an_unknown_passage_or_file_is_a_clear_error(corpus: Path) -> None:
    assert "has 3 passages now; there is no #9" in error(await call("memory_get", {"ref": "MEMORY.md#9"}, corpus))
    assert "does not exist" in error(await call("memory_get", {"ref": "memory/2020-01-01.md#1"}, corpus))


@pytest.mark.parametrize(
    "ref",
    [
        "../secret.md#1",
        "/etc/passwd#1",
        "notes.md#1",
        "memory/../../x.md#1",
        "memory/../secret.md#1",
        "memory/sub/deep.md#1",
        "memory/.hidden.md#1",
        "./MEMORY.md#1",
        "memory\\..\\secret.md#1",
        "MEMORY.md",
        "MEMORY.md#0",
        "MEMORY.md#one",
        "#1",
    ],
)
async def test_get_refuses_refs_that_are_not_memory_passages(corpus: Path, ref: str) -> None:
    (corpus.parent / "secret.md").write_text("## Keys\nhunter2\n")
    (corpus / "notes.md").write_text("## Notes\nhunter2\n")
    message = error(await call("memory_get", {"ref": ref}, corpus))
    assert "hunter2" not in message
    assert "ref" in message or "memory file" in message or "numbered from 1" in message


async def test_get_refuses_a_memory_file_that_links_out_of_the_workspace(corpus: Path, tmp_path: Path) -> None:
    outside = tmp_path / "secret.md"
    outside.write_text("## Keys\nhunter2\n")
    (corpus / "memory" / "link.md").symlink_to(outside)
    message = error(await call("memory_get", {"ref": "memory/link.md#1"}, corpus))
    assert "outside the workspace" in message and "hunter2" not in message
