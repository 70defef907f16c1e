"""Transcripts on disk: append and read back, crash damage skipped with a warning, file names that cannot escape."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from agent.compaction import SUMMARY_HEADER, since_last_summary, summary_message
from agent.messages import AssistantMessage, Message, ToolCall, ToolResultMessage, UserMessage
from agent.sessions import append_transcript, load_history, load_transcript, read_transcript, transcript_for
from bot.store import new_session_id
from tools.base import TextBlock

SESSION_ID = "Zq3_x-9KpL0mN2bV4cX6zA"


def conversation() -> list[Message]:
    return [
        UserMessage.of("what is in notes.txt?"),
        AssistantMessage(text="Let me look.", tool_calls=[ToolCall(id="c1", name="read", arguments={"path": "n"})]),
        ToolResultMessage(call_id="c1", name="read", content=[TextBlock(text="buy milk\nünïcödé")]),
        AssistantMessage(text="It says: buy milk."),
    ]


async def test_append_then_read_gives_back_the_same_messages(tmp_path: Path) -> None:
    path = transcript_for(tmp_path, SESSION_ID)
    messages = conversation()
    await append_transcript(path, messages[:1])
    await append_transcript(path, messages[1:])
    await append_transcript(path, [])
    assert await read_transcript(path) == messages
    assert path.read_bytes().count(b"\n") == 4


async def test_missing_and_empty_transcripts_read_as_empty(tmp_path: Path) -> None:
    path = transcript_for(tmp_path, SESSION_ID)
    assert await read_transcript(path) == []
    path.parent.mkdir(parents=True)
    path.write_bytes(b"")
    assert await read_transcript(path) == []
    path.write_bytes(b"\n\n")
    assert await read_transcript(path) == []


async def test_a_torn_last_line_is_skipped_and_the_next_append_starts_a_fresh_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = transcript_for(tmp_path, SESSION_ID)
    first, second, *_ = conversation()
    await append_transcript(path, [first])
    with path.open("ab") as handle:  # the process died halfway through writing the second message
        handle.write(b'{"role":"assistant","text":"I was cut sh')

    with caplog.at_level(logging.WARNING, logger="agent.sessions"):
        assert await read_transcript(path) == [first]
    assert "torn last line" in caplog.text
    assert f"{path}:2" in caplog.text

    await append_transcript(path, [second])
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="agent.sessions"):
        assert await read_transcript(path) == [first, second]
    assert f"{path}:2: skipped a line" in caplog.text  # the torn line is now in the middle, still skipped


async def test_a_last_line_that_lost_only_its_newline_is_kept(tmp_path: Path) -> None:
    path = transcript_for(tmp_path, SESSION_ID)
    first, second, third, _ = conversation()
    await append_transcript(path, [first, second])
    path.write_bytes(path.read_bytes().rstrip(b"\n"))
    assert await read_transcript(path) == [first, second]
    await append_transcript(path, [third])
    assert await read_transcript(path) == [first, second, third]


async def test_unparseable_middle_lines_are_skipped_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = transcript_for(tmp_path, SESSION_ID)
    first, second, third, _ = conversation()
    await append_transcript(path, [first])
    with path.open("ab") as handle:
        handle.write(b"not json at all\n")
        handle.write(b'{"role":"wizard","text":"valid JSON, not a message"}\n')
        handle.write(b"\xff\xfe broken bytes\n")
    await append_transcript(path, [second, third])

    with caplog.at_level(logging.WARNING, logger="agent.sessions"):
        assert await read_transcript(path) == [first, second, third]
    skipped = [record.getMessage() for record in caplog.records if "skipped" in record.getMessage()]
    assert skipped == [f"{path}:{number}: skipped a line that is not a message" for number in (2, 3, 4)]


async def test_the_history_starts_at_the_latest_summary_as_the_whole_transcript_would_give_it(tmp_path: Path) -> None:
    path = transcript_for(tmp_path, SESSION_ID)
    quoting = UserMessage.of(f"my notes say {SUMMARY_HEADER} somewhere")  # quotes the header: not a summary
    latest = [summary_message("later"), AssistantMessage(text="kept"), quoting, *conversation()]
    await append_transcript(path, conversation())
    await append_transcript(path, [summary_message("early"), UserMessage.of("kept too")])
    await append_transcript(path, latest)
    assert load_history(path) == latest == since_last_summary(load_transcript(path))


async def test_a_history_without_a_summary_is_the_whole_transcript(tmp_path: Path) -> None:
    path = transcript_for(tmp_path, SESSION_ID)
    assert load_history(path) == []
    await append_transcript(path, conversation())
    assert load_history(path) == conversation()


async def test_a_summary_torn_by_a_crash_is_skipped_and_the_history_starts_at_the_one_before(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = transcript_for(tmp_path, SESSION_ID)
    kept = [summary_message("early"), *conversation()]
    await append_transcript(path, [UserMessage.of("hello"), *kept])
    whole = summary_message("late").model_dump_json().encode()
    with path.open("ab") as handle:  # the process died halfway through writing the next summary
        handle.write(whole[: whole.index(b"late")])  # the header is there, the rest is not

    with caplog.at_level(logging.WARNING, logger="agent.sessions"):
        assert load_history(path) == kept
    assert f"{path}:7: skipped a torn last line" in caplog.text

    await append_transcript(path, [AssistantMessage(text="after the crash")])
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="agent.sessions"):
        assert load_history(path) == [*kept, AssistantMessage(text="after the crash")]
    assert f"{path}:7: skipped a line" in caplog.text  # the torn line is in the middle now, and numbered as it is


def test_transcript_for_names_a_file_per_session_id(tmp_path: Path) -> None:
    assert transcript_for(tmp_path, SESSION_ID) == tmp_path / "transcripts" / f"{SESSION_ID}.jsonl"
    session_id = new_session_id()
    assert transcript_for(tmp_path, session_id).parent == tmp_path / "transcripts"


@pytest.mark.parametrize(
    "bad",
    ["../x", "/abs", "a/b", "..", "", "short", "../../../../etc/passwd", "a" * 15, "a" * 129, "abcdefghijklmnop\n"],
)
def test_transcript_for_refuses_anything_but_a_session_id(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ValueError, match="not a session id"):
        transcript_for(tmp_path, bad)


def test_generated_session_ids_are_always_accepted(tmp_path: Path) -> None:
    for _ in range(1000):
        transcript_for(tmp_path, new_session_id())
