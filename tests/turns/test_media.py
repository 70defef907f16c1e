"""Files people send (issue 15), platform-independent: fetched into the workspace's inbox under safe names, within
the account's limits, shown to a model that can see, kept by reference in the transcript, transcribed when they are
speech. The platforms' own download and upload paths are proved in their adapters' tests."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from configs import config_of
from fakes.llm import FakeLLM, Reply, ToolCallSpec
from helpers import FakeClock, eventually, finished, tool_result, user_images, user_text

from bot import App, Config
from bot.turns.media import safe_name
from channels import AccountSettings, Attachment, Capabilities, MemoryChannel, Poll
from channels.base import MediaLimits

WED = datetime(2026, 11, 25, 14, 3, tzinfo=UTC).timestamp()
INBOX = Path("inbox/2026-11-25")
PHOTO = b"\xff\xd8\xff\xe0" + bytes(range(256)) * 40  # JPEG-ish bytes, 10 KiB


def config(llm: FakeLLM, tmp_path: Path, model: str = "gpt-4o", **media: Any) -> Config:
    defaults = {"model": f"fake/{model}", "timezone": "UTC"}
    return config_of(tmp_path, llm, defaults=defaults, owners=["memory:ann"], media=media)


def chat(**limits: int) -> MemoryChannel:
    return MemoryChannel(settings=AccountSettings(dm_policy="open", media=MediaLimits(**limits)))


async def converse(app: App, channel: MemoryChannel, *said: tuple[str, list[Attachment]], replies: int = 1) -> None:
    async with app.running():
        for text, attachments in said:
            await channel.say(text, sender="ann", attachments=attachments)
            await channel.replies(replies)


@pytest.mark.parametrize(
    ("name", "kind", "mime", "expected"),
    [
        ("../../x", "document", None, "x"),
        (".bashrc", "document", None, "bashrc"),
        ("..\\..\\evil.exe", "document", None, "evil.exe"),
        ("a\x00b\nc\u202e.txt", "document", None, "a_b_c_.txt"),
        ("...", "document", "application/pdf", "file.pdf"),
        (None, "image", "image/jpeg", "photo.jpg"),
        (None, "voice", "audio/ogg", "voice.oga"),
        ("x" * 300 + ".tar.gz", "document", None, "x" * 97 + ".gz"),
    ],
)
def test_a_file_s_name_cannot_lead_anywhere(name: str | None, kind: Any, mime: str | None, expected: str) -> None:
    assert safe_name(Attachment(kind=kind, ref="r", name=name, mime_type=mime)) == expected


async def test_a_photo_without_a_caption_reaches_the_model_as_an_image_and_a_file(
    fake_llm: FakeLLM, tmp_path: Path
) -> None:
    fake_llm.script("A test pattern.")
    channel = chat()
    app = App(config(fake_llm, tmp_path), tmp_path / "state", adapters=[channel], clock=FakeClock(WED))
    await converse(app, channel, ("", [channel.attach(PHOTO, kind="image", mime_type="image/jpeg")]))

    saved = tmp_path / "ws" / "main" / INBOX / "photo.jpg"
    assert saved.read_bytes() == PHOTO
    assert user_images(fake_llm) == [PHOTO]
    assert user_text(fake_llm) == f"[image (10.2 KB), saved as {INBOX}/photo.jpg]"


async def test_a_captioned_photo_carries_both_and_the_transcript_keeps_it_by_reference(
    fake_llm: FakeLLM, tmp_path: Path
) -> None:
    fake_llm.script(*[f"Answer {n}." for n in range(1, 7)])
    channel = chat()
    app = App(config(fake_llm, tmp_path, image_turns=2), tmp_path / "state", adapters=[channel], clock=FakeClock(WED))
    photo = channel.attach(PHOTO, kind="image", mime_type="image/jpeg", name="cat.jpg")
    await converse(app, channel, ("look at my cat", [photo]), *[(f"and {n}?", []) for n in range(2, 5)])

    assert user_text(fake_llm, 0) == f'look at my cat\n[image "cat.jpg" (10.2 KB), saved as {INBOX}/cat.jpg]'
    assert [len(user_images(fake_llm, n)) for n in range(4)] == [1, 0, 0, 0]
    history = fake_llm.requests[1].body["messages"]
    first = next(m for m in history if m["role"] == "user")
    assert [p["type"] for p in first["content"]] == ["text", "image_url"]  # read back for the next turn
    assert not any(
        m["role"] == "user" and isinstance(m["content"], list) for m in fake_llm.requests[2].body["messages"]
    )
    transcript = next((tmp_path / "state" / "transcripts").glob("*.jsonl")).read_text()
    assert base64.b64encode(PHOTO).decode()[:40] not in transcript
    assert str(tmp_path / "ws" / "main" / INBOX / "cat.jpg") in transcript


async def test_a_model_that_cannot_see_gets_the_line_alone(fake_llm: FakeLLM, tmp_path: Path) -> None:
    fake_llm.script("I cannot see it, but it is saved.")
    channel = chat()
    app = App(
        config(fake_llm, tmp_path, model="llama3.1"), tmp_path / "state", adapters=[channel], clock=FakeClock(WED)
    )
    await converse(app, channel, ("", [channel.attach(PHOTO, kind="image", mime_type="image/jpeg")]))

    assert user_images(fake_llm) == []
    assert user_text(fake_llm) == f"[image (10.2 KB), saved as {INBOX}/photo.jpg]"


async def test_hostile_names_land_inside_the_inbox_and_a_clash_gets_a_suffix(fake_llm: FakeLLM, tmp_path: Path) -> None:
    fake_llm.script("Got them.")
    channel = chat()
    app = App(config(fake_llm, tmp_path), tmp_path / "state", adapters=[channel], clock=FakeClock(WED))
    files = [channel.attach(b"one", name="../../x"), channel.attach(b"two", name=".bashrc")]
    files.append(channel.attach(b"three", name="x"))
    await converse(app, channel, ("files", files))

    inbox = tmp_path / "ws" / "main" / INBOX
    assert {path.name: path.read_bytes() for path in inbox.iterdir()} == {
        "x": b"one",
        "bashrc": b"two",
        "x (2)": b"three",
    }
    assert not (tmp_path / "ws" / "x").exists() and not (tmp_path / "ws" / "main" / ".bashrc").exists()


async def test_an_inbox_linked_out_of_the_workspace_is_not_written_through(fake_llm: FakeLLM, tmp_path: Path) -> None:
    fake_llm.script("Hm.")
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "ws" / "main").mkdir(parents=True)
    (tmp_path / "ws" / "main" / "inbox").symlink_to(outside)
    channel = chat()
    app = App(config(fake_llm, tmp_path), tmp_path / "state", adapters=[channel], clock=FakeClock(WED))
    await converse(app, channel, ("", [channel.attach(b"data", name="a.txt")]), replies=2)

    assert list(outside.iterdir()) == []
    assert '[file "a.txt" (4 bytes): not fetched, the download failed (PathRefused)]' in user_text(fake_llm)


async def test_a_file_over_the_limit_is_refused_with_a_word_to_the_person(fake_llm: FakeLLM, tmp_path: Path) -> None:
    fake_llm.script("The big one did not come through.")
    channel = chat(max_bytes=1000)
    app = App(config(fake_llm, tmp_path), tmp_path / "state", adapters=[channel], clock=FakeClock(WED))
    big = channel.attach(b"x" * 5000, name="big.bin")
    await converse(app, channel, ("here", [big, channel.attach(b"small", name="small.txt")]), replies=2)

    notice, answer = channel.sent
    assert notice.text == 'I could not take the file "big.bin": larger than the limit of 1.0 KB (it is 5.0 KB).'
    assert answer.text == "The big one did not come through."
    assert user_text(fake_llm).splitlines() == [
        "here",
        '[file "big.bin" (5.0 KB): not fetched, larger than the limit of 1.0 KB (it is 5.0 KB)]',
        f'[file "small.txt" (5 bytes), saved as {INBOX}/small.txt]',
    ]
    assert [path.name for path in (tmp_path / "ws" / "main" / INBOX).iterdir()] == ["small.txt"]


async def test_a_file_that_cannot_be_fetched_is_tried_twice_then_named(fake_llm: FakeLLM, tmp_path: Path) -> None:
    fake_llm.script("Sorry about the file.")
    channel = chat()
    app = App(config(fake_llm, tmp_path), tmp_path / "state", adapters=[channel], clock=FakeClock(WED))
    gone = Attachment(kind="document", ref="no-such-file", name="gone.pdf")
    await converse(app, channel, ("see attached", [gone]), replies=2)

    assert "could not take" in channel.sent[0].text and channel.sent[1].text == "Sorry about the file."
    assert '[file "gone.pdf": not fetched, the download failed (ChannelError)]' in user_text(fake_llm)


async def test_a_voice_note_is_transcribed_and_the_transcript_is_the_message(fake_llm: FakeLLM, tmp_path: Path) -> None:
    fake_llm.script("Milk it is.")
    fake_llm.transcribe_as("Please buy milk.")
    channel = chat()
    transcription = {"base_url": fake_llm.openai_base_url, "model": "whisper-1", "api_key": "sk-transcribe"}
    settings = config(fake_llm, tmp_path, transcription=transcription)
    app = App(settings, tmp_path / "state", adapters=[channel], clock=FakeClock(WED))
    voice = channel.attach(b"OggS" + b"\x00" * 100, kind="voice", mime_type="audio/ogg")
    await converse(app, channel, ("", [voice]))

    [upload] = fake_llm.transcriptions
    assert (upload.model, upload.data, upload.authorization) == (
        "whisper-1",
        b"OggS" + b"\x00" * 100,
        "Bearer sk-transcribe",
    )
    assert (
        user_text(fake_llm)
        == f"[voice note (104 bytes), saved as {INBOX}/voice.oga; its transcript:]\nPlease buy milk."
    )


async def test_without_transcription_a_voice_note_is_a_file(fake_llm: FakeLLM, tmp_path: Path) -> None:
    fake_llm.script("I have your voice note.")
    channel = chat()
    app = App(config(fake_llm, tmp_path), tmp_path / "state", adapters=[channel], clock=FakeClock(WED))
    voice = channel.attach(b"OggS", kind="voice", mime_type="audio/ogg")
    await converse(app, channel, ("", [voice]))
    assert fake_llm.transcriptions == []
    assert user_text(fake_llm) == f"[voice note (4 bytes), saved as {INBOX}/voice.oga]"


FILES = Capabilities(files=True, max_upload_bytes=1_000_000, max_caption_length=100, threads=True, polls=True)


async def test_the_agent_sends_a_file_from_its_workspace(fake_llm: FakeLLM, tmp_path: Path) -> None:
    report = tmp_path / "ws" / "main" / "reports" / "q3.pdf"
    report.parent.mkdir(parents=True)
    report.write_bytes(b"%PDF-1.7 quarterly")
    send = ToolCallSpec("message", {"action": "send", "text": "The report.", "media": ["reports/q3.pdf"]})
    fake_llm.script(Reply.tool_calls(send), "NO_REPLY")
    channel = MemoryChannel(capabilities=FILES)
    app = App(config(fake_llm, tmp_path), tmp_path / "state", adapters=[channel], clock=FakeClock(WED))
    await converse(app, channel, ("send me the q3 report", []))

    [sent] = channel.sent
    [file] = sent.message.media
    assert (sent.text, file.name, file.kind, Path(file.path).read_bytes()) == (
        "The report.", "q3.pdf", "document", b"%PDF-1.7 quarterly"
    )  # fmt: skip
    assert tool_result(fake_llm, 1)["files"] == ["q3.pdf"]


@pytest.mark.parametrize(
    ("media", "refusal"),
    [
        (["../../state/state.db"], "outside the workspace"),
        (["/etc/passwd"], "outside the workspace"),
        (["missing.pdf"], "is not a file in your workspace"),
        (["big.bin"], "this channel takes files up to 1,000,000"),
    ],
)
async def test_the_agent_sends_nothing_from_outside_its_workspace_or_too_large(
    fake_llm: FakeLLM, tmp_path: Path, media: list[str], refusal: str
) -> None:
    (tmp_path / "ws" / "main").mkdir(parents=True)
    (tmp_path / "ws" / "main" / "big.bin").write_bytes(b"x" * 1_000_001)
    send = ToolCallSpec("message", {"action": "send", "text": "Here.", "media": media})
    fake_llm.script(Reply.tool_calls(send), "Could not send it.")
    channel = MemoryChannel(capabilities=FILES)
    app = App(config(fake_llm, tmp_path), tmp_path / "state", adapters=[channel], clock=FakeClock(WED))
    await converse(app, channel, ("send it", []))

    assert [sent.text for sent in channel.sent] == ["Could not send it."]
    assert refusal in json.dumps(fake_llm.requests[1].body["messages"][-1])


async def test_a_channel_without_uploads_offers_no_media(fake_llm: FakeLLM, tmp_path: Path) -> None:
    fake_llm.script("Hi.")
    channel = chat()
    app = App(config(fake_llm, tmp_path), tmp_path / "state", adapters=[channel], clock=FakeClock(WED))
    await converse(app, channel, ("hi", []))
    [message_tool] = [t for t in fake_llm.requests[0].body["tools"] if t["function"]["name"] == "message"]
    assert "media" not in message_tool["function"]["parameters"]["properties"]


async def test_the_agent_starts_a_thread_and_posts_a_poll(fake_llm: FakeLLM, tmp_path: Path) -> None:
    thread = ToolCallSpec("message", {"action": "thread-create", "thread_name": "Lunch"}, id="t1")
    poll = ToolCallSpec("message", {"action": "poll", "poll_question": "Where?", "poll_options": ["Pizza", " Sushi "]})
    fake_llm.script(Reply.tool_calls(thread), Reply.tool_calls(poll), "NO_REPLY")
    channel = MemoryChannel(capabilities=FILES)
    app = App(config(fake_llm, tmp_path), tmp_path / "state", adapters=[channel], clock=FakeClock(WED))
    async with app.running():
        await channel.say("set up a lunch poll", sender="ann")
        await eventually(lambda: fake_llm.pending == 0 and len(channel.sent) == 1, "the thread and the poll")
        await finished(tmp_path / "state")

    [(where, thread_id, name, started_from)] = channel.threads
    assert (where.peer.id, name, started_from) == ("ann", "Lunch", None)
    assert tool_result(fake_llm, 1)["thread_id"] == thread_id
    [sent] = channel.sent
    assert sent.message.poll == Poll(question="Where?", options=["Pizza", "Sushi"])


async def test_a_poll_needs_two_answers(fake_llm: FakeLLM, tmp_path: Path) -> None:
    poll = ToolCallSpec("message", {"action": "poll", "poll_question": "Where?", "poll_options": ["Pizza", " "]})
    fake_llm.script(Reply.tool_calls(poll), "Never mind.")
    channel = MemoryChannel(capabilities=FILES)
    app = App(config(fake_llm, tmp_path), tmp_path / "state", adapters=[channel], clock=FakeClock(WED))
    await converse(app, channel, ("poll please", []))
    assert [sent.text for sent in channel.sent] == ["Never mind."]
    assert "poll needs 2 to 10 poll_options (got 1)" in json.dumps(fake_llm.requests[1].body["messages"][-1])


async def test_reading_an_image_shows_it_to_a_model_that_can_see(fake_llm: FakeLLM, tmp_path: Path) -> None:
    (tmp_path / "ws" / "main").mkdir(parents=True)
    (tmp_path / "ws" / "main" / "chart.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 64)
    fake_llm.script(Reply.tool_calls(ToolCallSpec("read", {"path": "chart.png"})), "A chart.")
    channel = chat()
    app = App(config(fake_llm, tmp_path), tmp_path / "state", adapters=[channel], clock=FakeClock(WED))
    await converse(app, channel, ("what is in chart.png?", []))

    assert user_images(fake_llm, 1) == [b"\x89PNG\r\n\x1a\n" + b"\x00" * 64]
    assert tool_result(fake_llm, 1) == {"path": "chart.png", "image": "image/png", "bytes": 72}
