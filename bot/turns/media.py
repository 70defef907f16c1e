"""Files that come with messages: fetched from the platform into the agent's workspace before the turn runs (once:
a turn run again after a crash takes them from where they went), streamed to disk chunk by chunk, transcribed when
they are speech, and described to the model."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import mimetypes
import os
from collections.abc import Sequence
from contextlib import aclosing
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import aiofiles
import httpx

from agent.messages import ImageBlock
from bot.config.settings import TranscriptionConfig
from bot.store import InboxStore
from channels.base import Attachment, ChannelAdapter, MediaLimits
from tools.base import IMAGE_TYPES, image_file
from tools.fs import FsError, new_file, resolve_in_workspace, safe_file_name

__all__ = ["InboxBook", "Received", "describe", "images", "receive", "refusal", "safe_name", "transcribe"]

log = logging.getLogger(__name__)

INBOX = "inbox"
# Image types every provider takes as image input; other images are files the agent may read.
SHOWN_IMAGE_TYPES = frozenset(IMAGE_TYPES.values())
_LABELS = {
    "image": "image",
    "audio": "audio",
    "voice": "voice note",
    "video": "video",
    "document": "file",
    "sticker": "sticker",
}
_DEFAULT_NAMES = {"image": "photo", "voice": "voice", "audio": "audio", "video": "video", "sticker": "sticker"}
_DEFAULT_EXTENSIONS = {"image": ".jpg", "voice": ".ogg", "sticker": ".webp"}


class TooLarge(Exception):
    """The file turned out larger than the limit while it streamed in (the platform did not say its size)."""


@dataclass(frozen=True)
class Received:
    """One attachment after fetching: where it landed in the workspace (`relative` to it), or why it did not,
    and what it says when it is speech that was transcribed."""

    attachment: Attachment
    path: Path | None = None
    relative: str | None = None
    problem: str | None = None
    transcript: str | None = None


@dataclass(frozen=True)
class InboxBook:
    """Where the files of a turn's messages go, recorded per message before each is fetched (bot.store.inbox): a turn
    run again after a crash takes a file fetched before from its place, and fetches one cut short under its name
    again, so the inbox never holds a second copy (`photo (2).jpg`) of the same file."""

    store: InboxStore
    inbound_ids: Sequence[int]  # the turn's journal rows (a folded batch has several); the last one records

    async def find(self, attachment: Attachment) -> tuple[str, bool] | None:
        """Where the file went (relative to the workspace) and whether all of it is there; None if nowhere yet."""
        known = await self.store.inbox_file(self.inbound_ids, attachment.ref)
        return (known.path, known.complete) if known is not None else None

    async def note(self, attachment: Attachment, relative: str, *, complete: bool) -> None:
        await self.store.set_inbox_file(self.inbound_ids[-1], attachment.ref, relative, complete=complete)


def safe_name(attachment: Attachment) -> str:
    """A file name for the attachment that stays where it is put (tools.fs.safe_file_name), named for its kind
    when the platform gave none that is usable."""
    return safe_file_name(attachment.name, _DEFAULT_NAMES.get(attachment.kind, "file"), _extension(attachment))


def _extension(attachment: Attachment) -> str:
    guessed = mimetypes.guess_extension(attachment.mime_type or "") if attachment.mime_type else None
    return guessed or _DEFAULT_EXTENSIONS.get(attachment.kind, "")


async def receive(
    adapter: ChannelAdapter,
    attachments: Sequence[Attachment],
    workspace: Path,
    limits: MediaLimits,
    now: datetime,
    transcription: TranscriptionConfig | None = None,
    book: InboxBook | None = None,
) -> list[Received]:
    """Fetch each attachment into `<workspace>/inbox/<YYYY-MM-DD>/` under a safe, unique name, within the limits;
    a failed download is tried once more, then reported, never raised. With a `book`, a file fetched before for the
    same message is taken from where it went. Speech is transcribed when `transcription` is configured."""
    found: list[Received] = []
    for index, attachment in enumerate(attachments):
        if index >= limits.max_files:
            problem = f"more than {limits.max_files} files in one message"
            found.append(Received(attachment, problem=problem))
        elif attachment.size is not None and attachment.size > limits.max_bytes:
            found.append(Received(attachment, problem=_too_large(attachment.size, limits.max_bytes)))
        else:
            found.append(await _fetch_with_retry(adapter, attachment, workspace, limits.max_bytes, now, book))
    if transcription is not None:
        found = [await _transcribed(received, transcription) for received in found]
    return found


async def _fetch_with_retry(
    adapter: ChannelAdapter, attachment: Attachment, workspace: Path, limit: int, now: datetime, book: InboxBook | None
) -> Received:
    known = await book.find(attachment) if book is not None else None
    if known is not None:
        relative, complete = known
        kept = await asyncio.to_thread(_kept, workspace, relative) if complete else None
        if kept is not None:
            return Received(attachment, path=kept, relative=relative)
        await asyncio.to_thread(_discard, workspace, relative)  # cut short by a crash: its name is free again
    folder = f"{INBOX}/{now:%Y-%m-%d}"
    for attempt in (1, 2):
        try:
            path, relative = await _fetch(adapter, attachment, workspace, folder, limit, book)
        except TooLarge:
            return Received(attachment, problem=_too_large(None, limit))
        except Exception as error:  # the platform, the network or the disk: the turn runs with a note
            kind, name = attachment.kind, type(error).__name__
            log.warning("fetching a %s (attempt %d) failed: %s: %s", kind, attempt, name, error)
            problem = f"the download failed ({type(error).__name__})"
            continue
        return Received(attachment, path=path, relative=relative)
    return Received(attachment, problem=problem)


def _kept(workspace: Path, relative: str) -> Path | None:
    """The file fetched before, if it is still there as it was left: a regular file, reached through no link."""
    path = Path(os.path.realpath(workspace)) / relative
    try:
        unlinked = resolve_in_workspace(workspace, relative) == path
    except FsError:
        return None
    return path if unlinked and path.is_file() else None


def _discard(workspace: Path, relative: str) -> None:
    """Remove what a fetch cut short left (the entry itself, never what a link there points to)."""
    path = Path(os.path.realpath(workspace)) / relative
    with contextlib.suppress(OSError, FsError):
        if resolve_in_workspace(workspace, Path(relative).parent.as_posix()) == path.parent:
            path.unlink()


async def _fetch(
    adapter: ChannelAdapter, attachment: Attachment, workspace: Path, folder: str, limit: int, book: InboxBook | None
) -> tuple[Path, str]:
    """Stream the attachment into a new file in `folder` (inside the workspace, however its folders are linked),
    its place recorded in `book` first; the file is removed again if anything goes wrong. The file and its path
    relative to the workspace."""
    path = await asyncio.to_thread(new_file, workspace, folder, safe_name(attachment))
    relative = path.relative_to(Path(os.path.realpath(workspace))).as_posix()
    written = 0
    try:
        if book is not None:
            await book.note(attachment, relative, complete=False)
        async with aiofiles.open(path, "wb") as out, aclosing(adapter.download(attachment)) as chunks:
            async for chunk in chunks:
                written += len(chunk)
                if written > limit:
                    raise TooLarge
                await out.write(chunk)
        if book is not None:
            await book.note(attachment, relative, complete=True)
    except BaseException:
        await asyncio.to_thread(path.unlink, True)
        raise
    return path, relative


def _too_large(size: int | None, limit: int) -> str:
    said = f" (it is {_size(size)})" if size is not None else ""
    return f"larger than the limit of {_size(limit)}{said}"


def _size(size: int) -> str:
    for unit, scale in (("MB", 1_000_000), ("KB", 1_000)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} bytes"


async def _transcribed(received: Received, config: TranscriptionConfig) -> Received:
    if received.path is None or received.attachment.kind not in ("voice", "audio"):
        return received
    try:
        text = await transcribe(received.path, received.attachment, config)
    except (httpx.HTTPError, ValueError) as error:
        log.warning("transcribing %s failed: %s", received.relative, error)
        return received
    return Received(received.attachment, received.path, received.relative, transcript=text)


async def transcribe(path: Path, attachment: Attachment, config: TranscriptionConfig) -> str:
    """What the recording says, from the OpenAI-compatible `/audio/transcriptions` endpoint (the file streamed up);
    httpx.HTTPError or ValueError when it gives no text."""
    headers = {"authorization": f"Bearer {config.api_key}"} if config.api_key else {}
    async with httpx.AsyncClient(timeout=config.timeout_seconds, follow_redirects=False) as client:
        with path.open("rb") as handle:
            upload = {"file": (path.name, handle, attachment.mime_type or "application/octet-stream")}
            response = await client.post(
                f"{config.base_url}/audio/transcriptions",
                data={"model": config.model, "response_format": "json"},
                files=upload,
                headers=headers,
            )
    if response.status_code >= 300:
        raise ValueError(f"the transcription endpoint answered {response.status_code}")
    text = response.json().get("text")
    if not isinstance(text, str):
        raise ValueError("the transcription endpoint gave no text")
    return text.strip()


def describe(received: Received) -> str:
    """One line that tells the model about an attachment: its kind, the sender's name for it (quoted: data), its
    size or length, and where it is in the workspace, or why it is not; a transcript follows on its own lines."""
    attachment = received.attachment
    details = [_size(attachment.size)] if attachment.size is not None else []
    if attachment.duration is not None:
        details.append(f"{attachment.duration:.0f} s")
    if attachment.caption:
        details.append(f"caption {json.dumps(attachment.caption, ensure_ascii=False)}")
    head = _named(attachment) + (f" ({', '.join(details)})" if details else "")
    if received.relative is None:
        return f"[{head}: not fetched, {received.problem}]"
    if received.transcript is not None:
        return f"[{head}, saved as {received.relative}; its transcript:]\n{received.transcript}"
    return f"[{head}, saved as {received.relative}]"


def refusal(received: Received) -> str | None:
    """What the person is told about a file that did not arrive (None when it did)."""
    if received.relative is not None:
        return None
    return f"I could not take the {_named(received.attachment)}: {received.problem}."


def _named(attachment: Attachment) -> str:
    """`file "report.pdf"`: the kind, and the sender's name for it quoted as data."""
    name = f" {json.dumps(attachment.name, ensure_ascii=False)}" if attachment.name else ""
    return _LABELS[attachment.kind] + name


def images(received: Sequence[Received]) -> list[ImageBlock]:
    """The fetched images a model can be shown, read from their files (kept by reference in the transcript); a
    model that cannot see gets the lines `describe` wrote alone. Reads files: call it off the event loop."""
    found = []
    for item in received:
        mime_type = (item.attachment.mime_type or "").lower()
        if item.path is not None and mime_type in SHOWN_IMAGE_TYPES:
            image = image_file(item.path, mime_type)
            if image is not None:
                found.append(image)
    return found
