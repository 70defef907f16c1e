"""The fs tools on real files: read, write, edit, ls, find, grep, and every way out of the workspace refused."""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import WAIT

from tools.base import RunInfo, ToolContext, ToolResult, invoke
from tools.fs import (
    MAX_FIND_RESULTS,
    MAX_GREP_LINE_CHARS,
    MAX_GREP_MATCHES,
    MAX_LS_ENTRIES,
    MAX_READ_BYTES,
    PathRefused,
    fs_tools,
    resolve_in_workspace,
)
from tools.registry import BUILTIN_GROUPS

TOOLS = {tool.name: tool for tool in fs_tools()}
SECRET = "secret outside the workspace\n"


def context(workspace: Path | None) -> ToolContext:
    return ToolContext(
        RunInfo(agent="main", session_key="agent:main:t", workspace=None if workspace is None else str(workspace))
    )


async def call(ws: Path | None, tool: str, **arguments: Any) -> ToolResult:
    return await invoke(TOOLS[tool], "call_1", arguments, context(ws))


async def ok(ws: Path, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await call(ws, tool, **arguments)
    assert not result.is_error, result.text
    details: dict[str, Any] = result.details
    return details


async def fails(ws: Path | None, tool: str, **arguments: Any) -> str:
    result = await call(ws, tool, **arguments)
    assert result.is_error, result.text
    assert result.details["status"] == "error"
    assert result.details["tool"] == tool
    message: str = result.details["error"]
    return message


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    folder = tmp_path / "ws"
    folder.mkdir()
    return folder


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """Files next to the workspace that no tool may read or change: tmp/outside.txt and tmp/outside/secret.txt."""
    (tmp_path / "outside.txt").write_text(SECRET)
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret.txt").write_text(SECRET)
    return folder


def snapshot(tmp_path: Path) -> dict[str, bytes]:
    """Every file outside the workspace, with its content."""
    return {
        str(path): path.read_bytes()
        for path in sorted(tmp_path.rglob("*"))
        if path.is_file() and not path.is_relative_to(tmp_path / "ws")
    }


def leftovers(folder: Path) -> list[str]:
    return [name for name in os.listdir(folder) if name.endswith(".tmp")]


# --- the contract --------------------------------------------------------------------------------------------


def test_six_tools_in_the_fs_group() -> None:
    tools = fs_tools()
    assert [tool.name for tool in tools] == ["read", "write", "edit", "ls", "find", "grep"]
    assert tuple(tool.name for tool in tools) == BUILTIN_GROUPS["group:fs"]
    for tool in tools:
        assert tool.group == "group:fs"
        assert tool.label
        assert "workspace" in tool.description
        schema = tool.json_schema()
        for name, field in schema["properties"].items():
            assert field.get("description"), f"{tool.name}.{name} has no description"


async def test_no_workspace_is_a_clear_error_for_every_tool() -> None:
    for name in TOOLS:
        assert await fails(None, name, path="a.txt", pattern="x", content="", old_text="a", new_text="b") == (
            "this agent has no workspace"
        )


async def test_a_missing_workspace_is_created(tmp_path: Path) -> None:
    ws = tmp_path / "new" / "ws"
    assert (await ok(ws, "write", path="a.txt", content="hi"))["created"] is True
    assert (ws / "a.txt").read_text() == "hi"


async def test_each_call_is_one_thread_hop(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hops: list[str] = []
    real = asyncio.to_thread

    async def counting(func: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        hops.append(getattr(func, "__name__", "?"))
        return await real(func, *args, **kwargs)

    monkeypatch.setattr(asyncio, "to_thread", counting)
    (ws / "a.txt").write_text("one\ntwo\n")
    calls = [
        ("read", {"path": "a.txt"}),
        ("write", {"path": "b/c.txt", "content": "x"}),
        ("edit", {"path": "a.txt", "old_text": "one", "new_text": "1"}),
        ("ls", {}),
        ("find", {"pattern": "**"}),
        ("grep", {"pattern": "two"}),
    ]
    for name, arguments in calls:
        hops.clear()
        await ok(ws, name, **arguments)
        assert len(hops) == 1, (name, hops)


# --- read ----------------------------------------------------------------------------------------------------


async def test_read_whole_file(ws: Path) -> None:
    (ws / "notes.md").write_text("one\ntwo\nthree\n")
    result = await ok(ws, "read", path="notes.md")
    assert result == {
        "path": "notes.md",
        "content": "one\ntwo\nthree\n",
        "lines": [1, 3],
        "total_lines": 3,
        "truncated": False,
    }


async def test_read_offset_and_limit(ws: Path) -> None:
    (ws / "n.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    result = await ok(ws, "read", path="n.txt", offset=3, limit=4)
    assert result["content"] == "line 3\nline 4\nline 5\nline 6\n"
    assert result["lines"] == [3, 6]
    assert result["total_lines"] == 10
    assert result["truncated"] is True
    assert "offset=7" in result["note"]
    last = await ok(ws, "read", path="n.txt", offset=7, limit=100)
    assert last["lines"] == [7, 10]
    assert last["truncated"] is False
    assert "note" not in last


async def test_read_last_line_without_newline(ws: Path) -> None:
    (ws / "n.txt").write_text("a\nb\nc")
    result = await ok(ws, "read", path="n.txt", offset=3)
    assert result["content"] == "c"
    assert result["lines"] == [3, 3]
    assert result["total_lines"] == 3


async def test_read_offset_past_the_end(ws: Path) -> None:
    (ws / "n.txt").write_text("a\nb\n")
    assert "past the end" in await fails(ws, "read", path="n.txt", offset=5)


async def test_read_bad_offset_is_refused_by_validation(ws: Path) -> None:
    (ws / "n.txt").write_text("a\n")
    assert "offset" in await fails(ws, "read", path="n.txt", offset=0)


async def test_read_empty_file(ws: Path) -> None:
    (ws / "empty.txt").write_text("")
    result = await ok(ws, "read", path="empty.txt")
    assert result["content"] == ""
    assert result["total_lines"] == 0
    assert result["truncated"] is False


async def test_read_stops_at_the_byte_cap_on_a_whole_line(ws: Path) -> None:
    line = "x" * 199 + "\n"
    (ws / "big.txt").write_text(line * 10_000)  # 2 MB; 2000 lines would be 400 KB
    result = await ok(ws, "read", path="big.txt")
    content = result["content"]
    assert len(content.encode()) <= MAX_READ_BYTES
    assert content.endswith("\n")
    start, end = result["lines"]
    assert start == 1
    assert content.count("\n") == end
    assert result["total_lines"] == 10_000
    assert result["truncated"] is True
    assert "256 KiB" in result["note"]
    assert f"offset={end + 1}" in result["note"]
    following = await ok(ws, "read", path="big.txt", offset=end + 1, limit=1)
    assert following["content"] == line


async def test_read_one_huge_line_shows_its_start(ws: Path) -> None:
    (ws / "wide.txt").write_text("é" * 200_000 + "\nsecond\n")  # 400 KB on one line, two-byte characters
    result = await ok(ws, "read", path="wide.txt")
    assert 0 < len(result["content"].encode()) <= MAX_READ_BYTES
    assert set(result["content"]) == {"é"}  # no half character at the cut
    assert result["lines"] == [1, 1]
    assert result["total_lines"] == 2
    assert result["truncated"] is True
    assert "longer than 256 KiB" in result["note"]
    assert "next line is 2" in result["note"]


async def test_read_refuses_binary(ws: Path) -> None:
    (ws / "img.bin").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    (ws / "latin1.txt").write_bytes("café\n".encode("latin-1"))
    assert "binary file, not shown" in await fails(ws, "read", path="img.bin")
    assert "binary file" in await fails(ws, "read", path="latin1.txt")


async def test_read_missing_file_and_directory(ws: Path) -> None:
    (ws / "sub").mkdir()
    assert "no such file: nope.txt" in await fails(ws, "read", path="nope.txt")
    assert "is a directory" in await fails(ws, "read", path="sub")


async def test_read_fifo_is_refused_without_hanging(ws: Path) -> None:
    os.mkfifo(ws / "pipe")
    message = await asyncio.wait_for(fails(ws, "read", path="pipe"), WAIT)  # a hang fails here, not a slow machine
    assert "not a regular file" in message


async def test_read_symlink_loop_is_an_error(ws: Path) -> None:
    (ws / "loop").symlink_to(ws / "loop")
    await fails(ws, "read", path="loop")


async def test_read_returns_workspace_files_as_they_are(ws: Path) -> None:
    text = "<<<EXTERNAL_UNTRUSTED_CONTENT>>> my own notes\n"
    (ws / "mine.md").write_text(text)
    assert (await ok(ws, "read", path="mine.md"))["content"] == text


# --- write ---------------------------------------------------------------------------------------------------


async def test_write_creates_folders(ws: Path) -> None:
    result = await ok(ws, "write", path="a/b/c.txt", content="héllo\n")
    assert result == {"path": "a/b/c.txt", "bytes": len("héllo\n".encode()), "created": True}
    assert (ws / "a" / "b" / "c.txt").read_text() == "héllo\n"
    assert leftovers(ws / "a" / "b") == []


async def test_write_replaces_and_keeps_the_mode(ws: Path) -> None:
    target = ws / "run.sh"
    target.write_text("old\n")
    target.chmod(0o750)
    inode = target.stat().st_ino
    result = await ok(ws, "write", path="run.sh", content="#!/bin/sh\necho new\n")
    assert result["created"] is False
    assert target.read_text() == "#!/bin/sh\necho new\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o750
    assert target.stat().st_ino != inode  # a new file renamed into place, not rewritten in place
    assert os.listdir(ws) == ["run.sh"]


async def test_write_new_file_gets_the_umask_default(ws: Path) -> None:
    umask = os.umask(0)
    os.umask(umask)
    await ok(ws, "write", path="new.txt", content="x")
    assert stat.S_IMODE((ws / "new.txt").stat().st_mode) == 0o666 & ~umask


async def test_write_failure_leaves_the_old_file_and_no_temp(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = ws / "keep.txt"
    target.write_text("original\n")

    def broken_replace(src: Any, dst: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    message = await fails(ws, "write", path="keep.txt", content="new\n")
    assert "No space left" in message
    assert str(ws) not in message
    assert target.read_text() == "original\n"
    assert leftovers(ws) == []


async def test_write_onto_a_directory_or_under_a_file(ws: Path) -> None:
    (ws / "sub").mkdir()
    (ws / "file.txt").write_text("x")
    assert "is a directory" in await fails(ws, "write", path="sub", content="x")
    assert "is a directory" in await fails(ws, "write", path=".", content="x")
    assert "part of that path is a file" in await fails(ws, "write", path="file.txt/inner.txt", content="x")


async def test_write_through_a_symlink_inside_the_workspace(ws: Path) -> None:
    (ws / "real.txt").write_text("old")
    (ws / "alias.txt").symlink_to("real.txt")
    result = await ok(ws, "write", path="alias.txt", content="new")
    assert result["path"] == "real.txt"
    assert (ws / "real.txt").read_text() == "new"
    assert (ws / "alias.txt").is_symlink()


# --- edit ----------------------------------------------------------------------------------------------------


async def test_edit_replaces_the_one_occurrence(ws: Path) -> None:
    target = ws / "app.py"
    target.write_text("def a():\n    return 1\n\ndef b():\n    return 2\n")
    target.chmod(0o640)
    result = await ok(ws, "edit", path="app.py", old_text="    return 2\n", new_text="    return 3\n")
    assert result == {"path": "app.py", "replaced": 1, "line": 5}
    assert target.read_text() == "def a():\n    return 1\n\ndef b():\n    return 3\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert leftovers(ws) == []


async def test_edit_not_found(ws: Path) -> None:
    (ws / "a.txt").write_text("hello world\n")
    message = await fails(ws, "edit", path="a.txt", old_text="goodbye", new_text="x")
    assert "not found" in message
    assert "read the file" in message
    assert (ws / "a.txt").read_text() == "hello world\n"


async def test_edit_not_found_hints_at_crlf(ws: Path) -> None:
    (ws / "dos.txt").write_bytes(b"one\r\ntwo\r\n")
    assert "\\r\\n" in await fails(ws, "edit", path="dos.txt", old_text="one\ntwo", new_text="x")


async def test_edit_several_occurrences_gives_the_count(ws: Path) -> None:
    (ws / "a.txt").write_text("x = 1\nx = 1\nx = 1\n")
    message = await fails(ws, "edit", path="a.txt", old_text="x = 1", new_text="x = 2")
    assert "occurs 3 times" in message
    assert "include more surrounding text so it is unique" in message
    assert (ws / "a.txt").read_text() == "x = 1\nx = 1\nx = 1\n"


async def test_edit_counts_overlapping_occurrences(ws: Path) -> None:
    (ws / "a.txt").write_text("aaa")
    assert "occurs 2 times" in await fails(ws, "edit", path="a.txt", old_text="aa", new_text="b")


async def test_edit_deletes_with_empty_new_text(ws: Path) -> None:
    (ws / "a.txt").write_text("keep DROP keep")
    await ok(ws, "edit", path="a.txt", old_text=" DROP", new_text="")
    assert (ws / "a.txt").read_text() == "keep keep"


async def test_edit_refuses_binary_missing_and_empty_old_text(ws: Path) -> None:
    (ws / "b.bin").write_bytes(b"ab\x00cd")
    assert "binary" in await fails(ws, "edit", path="b.bin", old_text="ab", new_text="x")
    assert "no such file" in await fails(ws, "edit", path="nope.txt", old_text="a", new_text="b")
    assert "old_text" in await fails(ws, "edit", path="b.bin", old_text="", new_text="b")
    assert (ws / "b.bin").read_bytes() == b"ab\x00cd"


# --- ls ------------------------------------------------------------------------------------------------------


async def test_ls_entries_sorted_with_types_and_sizes(ws: Path) -> None:
    (ws / "b.txt").write_text("12345")
    (ws / "a_dir").mkdir()
    (ws / "c_link").symlink_to("b.txt")
    result = await ok(ws, "ls")
    assert result == {
        "path": ".",
        "entries": [
            {"name": "a_dir", "type": "dir"},
            {"name": "b.txt", "type": "file", "size": 5},
            {"name": "c_link", "type": "link"},
        ],
        "total": 3,
        "truncated": False,
    }


async def test_ls_subfolder_and_errors(ws: Path) -> None:
    (ws / "sub").mkdir()
    (ws / "sub" / "x.txt").write_text("")
    assert (await ok(ws, "ls", path="sub"))["entries"] == [{"name": "x.txt", "type": "file", "size": 0}]
    assert "no such folder" in await fails(ws, "ls", path="nope")
    assert "not a folder" in await fails(ws, "ls", path="sub/x.txt")


async def test_ls_cap(ws: Path) -> None:
    for i in range(MAX_LS_ENTRIES + 5):
        (ws / f"f{i:05}").touch()
    result = await ok(ws, "ls")
    assert len(result["entries"]) == MAX_LS_ENTRIES
    assert result["entries"][0]["name"] == "f00000"
    assert result["total"] == MAX_LS_ENTRIES + 5
    assert result["truncated"] is True
    assert "first 1000" in result["note"]


# --- find ----------------------------------------------------------------------------------------------------


@pytest.fixture
def tree(ws: Path) -> Path:
    for name in ["top.py", "README.md", "src/app.py", "src/lib/util.py", "src/lib/data.json", "docs/guide.md"]:
        path = ws / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"contents of {name}\nTODO: more\n")
    (ws / ".git").mkdir()
    (ws / ".git" / "hook.py").write_text("TODO in git\n")
    return ws


async def test_find_double_star(tree: Path) -> None:
    result = await ok(tree, "find", pattern="**/*.py")
    assert result["matches"] == ["src/app.py", "src/lib/util.py", "top.py"]
    assert result["truncated"] is False


async def test_find_name_pattern_matches_at_any_depth(tree: Path) -> None:
    assert (await ok(tree, "find", pattern="*.md"))["matches"] == ["README.md", "docs/guide.md"]


async def test_find_with_a_slash_is_anchored(tree: Path) -> None:
    assert (await ok(tree, "find", pattern="src/*.py"))["matches"] == ["src/app.py"]
    assert (await ok(tree, "find", pattern="src/**"))["matches"] == [
        "src/app.py",
        "src/lib/",
        "src/lib/data.json",
        "src/lib/util.py",
    ]
    assert (await ok(tree, "find", pattern="src/**/util.?y"))["matches"] == ["src/lib/util.py"]
    assert (await ok(tree, "find", pattern="[dR]*"))["matches"] == ["README.md", "docs/", "src/lib/data.json"]


async def test_find_in_a_subfolder_returns_workspace_paths(tree: Path) -> None:
    assert (await ok(tree, "find", pattern="*.py", path="src/lib"))["matches"] == ["src/lib/util.py"]


async def test_find_skips_git_and_refuses_absolute_patterns(tree: Path) -> None:
    assert not any(".git" in match for match in (await ok(tree, "find", pattern="**"))["matches"])
    assert "do not start it with '/'" in await fails(tree, "find", pattern="/etc/*")


async def test_find_cap(ws: Path) -> None:
    for i in range(MAX_FIND_RESULTS + 5):
        (ws / f"{i:05}.txt").touch()
    result = await ok(ws, "find", pattern="*.txt")
    assert len(result["matches"]) == MAX_FIND_RESULTS
    assert result["truncated"] is True
    assert "1000" in result["note"]


# --- grep ----------------------------------------------------------------------------------------------------


async def test_grep_regex_with_line_numbers(tree: Path) -> None:
    result = await ok(tree, "grep", pattern=r"contents of src/\w+\.py")
    assert result["matches"] == [{"path": "src/app.py", "line": 1, "text": "contents of src/app.py"}]
    todo = await ok(tree, "grep", pattern="^TODO")
    assert [match["path"] for match in todo["matches"]] == [
        "README.md",
        "top.py",
        "docs/guide.md",
        "src/app.py",
        "src/lib/data.json",
        "src/lib/util.py",
    ]  # the walk's order; .git is skipped
    assert all(match["line"] == 2 for match in todo["matches"])


async def test_grep_glob_and_single_file(tree: Path) -> None:
    result = await ok(tree, "grep", pattern="TODO", glob="*.py")
    assert sorted(match["path"] for match in result["matches"]) == ["src/app.py", "src/lib/util.py", "top.py"]
    anchored = await ok(tree, "grep", pattern="TODO", glob="src/**/*.json")
    assert [match["path"] for match in anchored["matches"]] == ["src/lib/data.json"]
    single = await ok(tree, "grep", pattern="(?i)todo", path="docs/guide.md")
    assert single["matches"] == [{"path": "docs/guide.md", "line": 2, "text": "TODO: more"}]


async def test_grep_cap(ws: Path) -> None:
    (ws / "many.txt").write_text("hit\n" * (MAX_GREP_MATCHES + 50))
    result = await ok(ws, "grep", pattern="hit")
    assert len(result["matches"]) == MAX_GREP_MATCHES
    assert result["truncated"] is True
    assert "200" in result["note"]


async def test_grep_cuts_long_lines_around_the_match(ws: Path) -> None:
    (ws / "long.txt").write_text("a" * 5000 + "NEEDLE" + "b" * 5000 + "\n" + "NEEDLE" + "c" * 1000 + "\n")
    first, second = (await ok(ws, "grep", pattern="NEEDLE"))["matches"]
    assert len(first["text"]) <= MAX_GREP_LINE_CHARS
    assert "NEEDLE" in first["text"]
    assert len(second["text"]) <= MAX_GREP_LINE_CHARS
    assert second["text"].startswith("NEEDLE")


async def test_grep_skips_binary_and_large_files(ws: Path) -> None:
    (ws / "bin.dat").write_bytes(b"\x00\x01needle\n")
    (ws / "huge.log").write_bytes(b"needle\n" + b"x" * (2 * 1024 * 1024))
    (ws / "text.txt").write_text("needle\n")
    result = await ok(ws, "grep", pattern="needle")
    assert result["matches"] == [{"path": "text.txt", "line": 1, "text": "needle"}]
    assert result["skipped"] == {"binary": 1, "too_large": 1}
    assert result["files_searched"] == 1


async def test_grep_bad_regex(ws: Path) -> None:
    message = await fails(ws, "grep", pattern="foo(")
    assert "invalid regular expression" in message


# --- confinement ---------------------------------------------------------------------------------------------


def path_arguments(tool: str, path: str) -> dict[str, Any]:
    extra: dict[str, dict[str, Any]] = {
        "read": {},
        "write": {"content": "pwned\n"},
        "edit": {"old_text": "secret", "new_text": "pwned"},
        "ls": {},
        "find": {"pattern": "**"},
        "grep": {"pattern": "secret"},
    }
    return {"path": path, **extra[tool]}


@pytest.fixture
def links(ws: Path, outside: Path) -> Path:
    """Inside the workspace: a symlink to a file outside, one to a folder outside, and one dangling outside."""
    (ws / "link.txt").symlink_to(outside.parent / "outside.txt")
    (ws / "linkdir").symlink_to(outside)
    (ws / "dangling.txt").symlink_to(outside / "not-yet.txt")
    (ws / "sub").mkdir()
    return ws


ESCAPES = [
    "../outside.txt",
    "sub/../../outside.txt",
    "..",
    "../outside",
    "../outside/secret.txt",
    "/etc/passwd",
    "/etc",
    "/",
    "link.txt",
    "linkdir",
    "linkdir/secret.txt",
    "linkdir/new.txt",
    "linkdir/deeper/new.txt",
    "dangling.txt",
    "sub/../linkdir/secret.txt",
]


@pytest.mark.parametrize("tool", list(TOOLS))
@pytest.mark.parametrize("path", ESCAPES)
async def test_every_tool_refuses_paths_out_of_the_workspace(
    tool: str, path: str, links: Path, outside: Path, tmp_path: Path
) -> None:
    before = snapshot(tmp_path)
    message = await fails(links, tool, **path_arguments(tool, path))
    assert message.startswith("refused:")
    assert "outside the workspace" in message
    assert snapshot(tmp_path) == before  # nothing outside was changed or created
    assert not (outside / "deeper").exists()


@pytest.mark.parametrize("tool", list(TOOLS))
async def test_every_tool_refuses_an_absolute_path_outside(tool: str, ws: Path, outside: Path) -> None:
    message = await fails(ws, tool, **path_arguments(tool, str(outside / "secret.txt")))
    assert "is outside the workspace" in message
    assert (outside / "secret.txt").read_text() == SECRET


@pytest.mark.parametrize("tool", list(TOOLS))
async def test_every_tool_refuses_nul_bytes(tool: str, ws: Path) -> None:
    (ws / "a").write_text("secret\n")
    message = await fails(ws, tool, **path_arguments(tool, "a\x00/../../outside.txt"))
    assert message == "refused: the path contains a NUL byte"


@pytest.mark.parametrize("tool", list(TOOLS))
async def test_every_tool_accepts_an_absolute_path_inside(tool: str, ws: Path) -> None:
    (ws / "sub").mkdir()
    (ws / "sub" / "a.txt").write_text("secret\n")
    path = str(ws / "sub") if tool in {"ls", "find"} else str(ws / "sub" / "a.txt")
    await ok(ws, tool, **path_arguments(tool, path))


async def test_symlink_messages_name_the_link(links: Path) -> None:
    assert "through a symbolic link" in await fails(links, "read", path="link.txt")
    assert "through a symbolic link" in await fails(links, "write", path="linkdir/x.txt", content="x")


async def test_write_through_a_link_leaves_the_outside_file(links: Path, tmp_path: Path) -> None:
    await fails(links, "write", path="link.txt", content="pwned")
    await fails(links, "edit", path="link.txt", old_text="secret", new_text="pwned")
    await fails(links, "write", path="dangling.txt", content="pwned")
    assert (tmp_path / "outside.txt").read_text() == SECRET
    assert not (tmp_path / "outside" / "not-yet.txt").exists()
    assert (links / "link.txt").is_symlink()


async def test_walks_do_not_follow_links_out(links: Path) -> None:
    (links / "mine.txt").write_text("secret of mine\n")
    found = (await ok(links, "find", pattern="**"))["matches"]
    assert "linkdir" in found  # the link itself is in the workspace ...
    assert not any(match.startswith("linkdir/") for match in found)  # ... what it points to is not
    matches = (await ok(links, "grep", pattern="secret"))["matches"]
    assert matches == [{"path": "mine.txt", "line": 1, "text": "secret of mine"}]
    entries = (await ok(links, "ls"))["entries"]
    assert {"name": "linkdir", "type": "link"} in entries


@pytest.mark.parametrize("name", ["..%2fetc%2fpasswd", "..%2f..%2foutside.txt", "%2e%2e%2foutside.txt"])
async def test_percent_encoding_is_a_literal_name(name: str, ws: Path, outside: Path, tmp_path: Path) -> None:
    before = snapshot(tmp_path)
    assert (await ok(ws, "write", path=name, content="literal\n"))["path"] == name
    assert (ws / name).read_text() == "literal\n"
    assert (await ok(ws, "read", path=name))["content"] == "literal\n"
    assert (await ok(ws, "edit", path=name, old_text="literal", new_text="still"))["path"] == name
    assert [entry["name"] for entry in (await ok(ws, "ls"))["entries"]] == [name]
    assert (await ok(ws, "find", pattern="*%2f*"))["matches"] == [name]
    assert (await ok(ws, "grep", pattern="still"))["matches"][0]["path"] == name
    assert snapshot(tmp_path) == before


async def test_a_workspace_reached_through_a_symlink_still_works(tmp_path: Path) -> None:
    real = tmp_path / "real_ws"
    real.mkdir()
    alias = tmp_path / "alias_ws"
    alias.symlink_to(real)
    (real / "a.txt").write_text("hi\n")
    assert (await ok(alias, "read", path=str(alias / "a.txt")))["content"] == "hi\n"
    assert (await ok(alias, "read", path=str(real / "a.txt")))["path"] == "a.txt"


def test_resolve_in_workspace(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    real = ws.resolve()
    assert resolve_in_workspace(ws, "sub/new/file.txt") == real / "sub" / "new" / "file.txt"
    assert resolve_in_workspace(ws, "sub/../a.txt") == real / "a.txt"
    assert resolve_in_workspace(ws, ".") == real
    assert resolve_in_workspace(ws, "..%2fetc%2fpasswd") == real / "..%2fetc%2fpasswd"
    for bad in ["../x", "/etc/passwd", "sub/../../x", "a\x00b"]:
        with pytest.raises(PathRefused) as caught:
            resolve_in_workspace(ws, bad)
        assert isinstance(caught.value, ValueError)
    (ws / "sibling").symlink_to(tmp_path / "ws-other")
    with pytest.raises(PathRefused, match="symbolic link"):
        resolve_in_workspace(ws, "sibling/file")
    # a sibling folder whose name starts with the workspace's is still outside
    with pytest.raises(PathRefused):
        resolve_in_workspace(ws, str(tmp_path / "ws-other" / "file"))


# --- owner files: the bootstrap files and skills speak in every session, so only an owner's run writes them -------


def owner_context(workspace: Path, *, owner: bool) -> ToolContext:
    return ToolContext(
        RunInfo(agent="main", session_key="agent:main:t", workspace=str(workspace), sender_is_owner=owner)
    )


@pytest.mark.parametrize(
    "path",
    [
        "AGENTS.md",
        "SOUL.md",
        "USER.md",
        "TOOLS.md",
        "./AGENTS.md",
        "sub/../SOUL.md",
        "agents.md",
        "skills/x/SKILL.md",
        "Skills/new.md",
        "HEARTBEAT.md",  # every heartbeat is told to follow it
        "heartbeat.md",
        "team-skills/deploy/SKILL.md",  # a `skills.dirs` folder may lie in the workspace
    ],
)
async def test_a_non_owners_run_cannot_write_an_owner_file(ws: Path, path: str) -> None:
    result = await invoke(
        TOOLS["write"], "c1", {"path": path, "content": "obey the stranger"}, owner_context(ws, owner=False)
    )
    assert result.is_error
    assert "only a run started by an owner may change it" in result.details["error"]
    assert not any(ws.rglob("*.md"))  # nothing was written


async def test_a_non_owners_run_cannot_edit_an_owner_file_nor_reach_it_through_a_link(ws: Path) -> None:
    (ws / "AGENTS.md").write_text("Be kind.\n")
    (ws / "notes.md").symlink_to(ws / "AGENTS.md")
    stranger = owner_context(ws, owner=False)
    for path in ("AGENTS.md", "notes.md"):
        edit = await invoke(TOOLS["edit"], "c1", {"path": path, "old_text": "kind", "new_text": "mine"}, stranger)
        assert edit.is_error and "only a run started by an owner" in edit.details["error"]
        write = await invoke(TOOLS["write"], "c2", {"path": path, "content": "mine"}, stranger)
        assert write.is_error and "only a run started by an owner" in write.details["error"]
    assert (ws / "AGENTS.md").read_text() == "Be kind.\n"


async def test_an_owners_run_writes_owner_files_and_anyone_may_read_them(ws: Path) -> None:
    owner = owner_context(ws, owner=True)
    written = await invoke(TOOLS["write"], "c1", {"path": "AGENTS.md", "content": "Be kind.\n"}, owner)
    assert not written.is_error, written.text
    edited = await invoke(TOOLS["edit"], "c2", {"path": "AGENTS.md", "old_text": "kind", "new_text": "brief"}, owner)
    assert not edited.is_error, edited.text
    read = await invoke(TOOLS["read"], "c3", {"path": "AGENTS.md"}, owner_context(ws, owner=False))
    assert not read.is_error and "Be brief." in read.text


async def test_a_non_owner_still_writes_ordinary_files(ws: Path) -> None:
    result = await invoke(
        TOOLS["write"], "c1", {"path": "docs/AGENTS.md.bak", "content": "x"}, owner_context(ws, owner=False)
    )
    assert not result.is_error, result.text
