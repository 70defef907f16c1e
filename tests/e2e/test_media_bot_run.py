"""Files a person sends, through a real `bot run` process on each platform (issue 15): the real adapter on its fake
server (and its file host), a model that can see on the fake LLM. What the agent gets and what the person sees: a
photo reaches the model as an image and lands in the workspace's inbox, a photo with text carries both, hostile names
stay inside the inbox, a voice note is transcribed, and a file over the account's limit is refused with a word to the
person and never fetched. Each platform's own file paths (Telegram's albums and uploads, Discord's and Slack's
uploads and threads, a turn run again after a SIGKILL) are in tests/e2e/test_<platform>_media_bot_run.py;
tests/turns/test_media.py proves the same behaviours on the in-memory channel."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from fakes.llm import FakeLLM
from helpers import bot_run, files_under, finished, inbox_of, user_images, user_parts, user_text
from platforms import File, Platform

PHOTO = b"\xff\xd8\xff\xe0" + bytes(range(256)) * 40  # JPEG-ish bytes, 10,244 of them: "10.2 KB"
TRANSCRIBE_KEY = "sk-transcribe-fake-key"


def config(
    platform: Platform, tmp_path: Path, llm: FakeLLM, *, limits: dict[str, int] | None = None, **media: Any
) -> dict[str, Any]:
    """A bot with one account on the platform (`limits` as its `media`), an agent on a model that can see, days in
    UTC."""
    account: dict[str, Any] = {"streaming": "off"} | ({"media": limits} if limits is not None else {})
    defaults = {"model": "fake/gpt-4o", "timezone": "UTC"}
    return platform.config(tmp_path, llm, account, defaults=defaults, media=media)


@contextlib.asynccontextmanager
async def running(
    platform: Platform, config: dict[str, Any], tmp_path: Path, env: dict[str, str] | None = None
) -> AsyncIterator[Path]:
    """`bot run` on `config`; yields its state directory. Stopped (exit 0) at the end."""
    async with bot_run(config, tmp_path, platform.started, env=env) as path:
        yield path.parent / "state"


async def test_a_photo_without_text_reaches_the_model_as_an_image_and_a_file_in_the_inbox(
    platform: Platform, tmp_path: Path, fake_llm: FakeLLM
) -> None:
    photo = File(PHOTO, "IMG_0001.jpg", "image/jpeg", kind="image")
    fake_llm.script("A test pattern.")
    async with running(platform, config(platform, tmp_path, fake_llm), tmp_path) as state:
        [key] = await platform.send_files([photo])
        [answer] = await platform.wait_said(lambda said: len(said) >= 1)
        await finished(state)
        day = inbox_of(state)

    assert answer == "A test pattern."
    name = platform.saved_as(photo)  # Telegram names no photo: it is named for its kind, with its type's extension
    assert files_under(tmp_path / "ws" / "main" / "inbox") == {f"{day.removeprefix('inbox/')}/{name}": PHOTO}
    assert len(fake_llm.requests) == 1
    assert user_images(fake_llm) == [PHOTO]  # on Telegram the largest size, not the thumbnail the fake also offers
    assert user_text(fake_llm) == f"[image{platform.line_name(photo)} (10.2 KB), saved as {day}/{name}]"
    assert platform.fetched() == [key]  # fetched once, the platform's way


async def test_a_photo_with_text_carries_the_text_the_line_and_the_image(
    platform: Platform, tmp_path: Path, fake_llm: FakeLLM
) -> None:
    photo = File(PHOTO, "cat.jpg", "image/jpeg", kind="image")
    fake_llm.script("A fine cat.")
    async with running(platform, config(platform, tmp_path, fake_llm), tmp_path) as state:
        await platform.send_files([photo], "look at my cat")
        [answer] = await platform.wait_said(lambda said: len(said) >= 1)
        await finished(state)
        day = inbox_of(state)

    assert answer == "A fine cat."
    name = platform.saved_as(photo)
    assert (tmp_path / "ws" / "main" / day / name).read_bytes() == PHOTO
    assert [part["type"] for part in user_parts(fake_llm)] == ["text", "image_url"]
    assert user_text(fake_llm) == f"look at my cat\n[image{platform.line_name(photo)} (10.2 KB), saved as {day}/{name}]"
    assert user_images(fake_llm) == [PHOTO]


async def test_hostile_file_names_land_inside_the_inbox_and_nowhere_else(
    platform: Platform, tmp_path: Path, fake_llm: FakeLLM
) -> None:
    fake_llm.script("Got them.")
    async with running(platform, config(platform, tmp_path, fake_llm), tmp_path) as state:
        # Files sent together (an album of documents on Telegram), each with the sender's own name.
        files = [File(b"one", "../../x"), File(b"two", ".bashrc")]
        files.append(File(b"three", "x"))  # the name the first one was given: a suffix
        keys = await platform.send_files(files, "files")
        await platform.wait_said(lambda said: len(said) >= 1)
        await finished(state)
        day = inbox_of(state)

    assert platform.said() == ["Got them."]  # every file taken: no refusal
    assert sorted(platform.fetched()) == sorted(keys)  # each fetched once, the platform's way
    folder = day.removeprefix("inbox/")
    assert files_under(tmp_path / "ws" / "main" / "inbox") == {
        f"{folder}/x": b"one",
        f"{folder}/bashrc": b"two",
        f"{folder}/x (2)": b"three",
    }
    landed = [path for path in tmp_path.rglob("*") if path.name in ("x", "bashrc", ".bashrc", "x (2)")]
    assert sorted(path.relative_to(tmp_path).as_posix() for path in landed) == [
        f"ws/main/{day}/bashrc",
        f"ws/main/{day}/x",
        f"ws/main/{day}/x (2)",
    ]
    assert user_text(fake_llm).splitlines() == [
        "files",
        f'[file "../../x" (3 bytes), saved as {day}/x]',  # the sender's name, quoted as data
        f'[file ".bashrc" (3 bytes), saved as {day}/bashrc]',
        f'[file "x" (5 bytes), saved as {day}/x (2)]',
    ]
    assert user_images(fake_llm) == []


async def test_a_voice_note_is_transcribed_and_the_transcript_follows_its_line(
    platform: Platform, tmp_path: Path, fake_llm: FakeLLM
) -> None:
    note = platform.voice_note()  # as the platform's app records one: Telegram's names none
    fake_llm.script("Milk it is.")
    fake_llm.transcribe_as("Please buy milk.")
    transcription = {"base_url": fake_llm.openai_base_url, "model": "whisper-1", "api_key": "${SB_TRANSCRIBE_KEY}"}
    settings = config(platform, tmp_path, fake_llm, transcription=transcription)
    async with running(platform, settings, tmp_path, env={"SB_TRANSCRIBE_KEY": TRANSCRIBE_KEY}) as state:
        await platform.send_files([note])
        [answer] = await platform.wait_said(lambda said: len(said) >= 1)
        await finished(state)
        day = inbox_of(state)

    assert answer == "Milk it is."
    name = platform.saved_as(note)
    [upload] = fake_llm.transcriptions
    assert (upload.model, upload.file_name, upload.content_type, upload.data, upload.authorization) == (
        "whisper-1", name, note.mime_type, note.data, f"Bearer {TRANSCRIBE_KEY}"
    )  # fmt: skip
    assert (tmp_path / "ws" / "main" / day / name).read_bytes() == note.data
    assert user_text(fake_llm) == (
        f"[voice note{platform.line_name(note)} (104 bytes, 4 s), saved as {day}/{name}; its transcript:]\n"
        "Please buy milk."
    )
    assert user_images(fake_llm) == []
    # the key went to the transcription endpoint only: never to the model
    assert all(TRANSCRIBE_KEY not in json.dumps(request.headers) for request in fake_llm.requests)


async def test_a_file_over_the_account_limit_is_refused_with_a_word_to_the_person_and_never_fetched(
    platform: Platform, tmp_path: Path, fake_llm: FakeLLM
) -> None:
    fake_llm.script("The big one did not come through.")
    async with running(platform, config(platform, tmp_path, fake_llm, limits={"max_bytes": 1000}), tmp_path) as state:
        _, small = await platform.send_files(
            [File(b"x" * 5000, "big.bin"), File(b"small", "small.txt", "text/plain")], "here"
        )
        notice, answer = await platform.wait_said(lambda said: len(said) >= 2)
        await finished(state)
        day = inbox_of(state)

    assert notice == 'I could not take the file "big.bin": larger than the limit of 1.0 KB (it is 5.0 KB).'
    assert answer == "The big one did not come through."
    assert len(platform.said()) == 2
    assert user_text(fake_llm).splitlines() == [
        "here",
        '[file "big.bin" (5.0 KB): not fetched, larger than the limit of 1.0 KB (it is 5.0 KB)]',
        f'[file "small.txt" (5 bytes), saved as {day}/small.txt]',
    ]
    assert files_under(tmp_path / "ws" / "main" / "inbox") == {f"{day.removeprefix('inbox/')}/small.txt": b"small"}
    # the big one was never looked up nor fetched: the platform said its size, and that was enough
    assert platform.fetched() == [small]
