"""Files: how the bot's own go out (method, albums, caption, from disk) and how those that came are fetched."""

from __future__ import annotations

import mimetypes
import os
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import IO, Literal

from telegram import InputFile, InputMediaAudio, InputMediaDocument, InputMediaPhoto, InputMediaVideo
from telegram.error import BadRequest, TelegramError

from channels.base import Attachment, AttachmentKind, OutboundFile, OutboundMessage
from channels.telegram.constants import CAPABILITIES, MAX_ALBUM, MAX_DOWNLOAD_BYTES, MAX_PHOTO_BYTES, TelegramSendError
from channels.telegram.state import AdapterState
from routing.errors import ChannelError

UploadAs = Literal["photo", "voice", "audio", "video", "document"]  # the Bot API method a file goes with
# The methods whose files Telegram puts together in one album (sendMediaGroup): photos with videos, documents with
# documents, audio with audio. A voice note is never part of an album.
_ALBUMS: dict[UploadAs, str] = {"photo": "visual", "video": "visual", "document": "document", "audio": "audio"}
_PHOTO_TYPES = frozenset({"image/jpeg", "image/png", "image/webp"})
_VOICE_TYPES = frozenset({"audio/ogg", "audio/opus"})
_AUDIO_TYPES = frozenset({"audio/mpeg", "audio/mp4", "audio/x-m4a", "audio/m4a"})  # what sendAudio plays: MP3, M4A


@dataclass(frozen=True)
class _Upload:
    """A file the bot sends, its type and the method it goes with."""

    file: OutboundFile
    mime_type: str
    method: UploadAs


def _upload(file: OutboundFile) -> _Upload:
    """How a file goes, checked against the upload limit before anything is sent."""
    try:
        size = os.stat(file.path).st_size
    except OSError as error:
        raise TelegramSendError(f"{file.name}: cannot be read ({error.strerror})") from None
    limit = CAPABILITIES.max_upload_bytes
    if size > limit:
        raise TelegramSendError(f"{file.name} is {size:,} bytes; Telegram takes files of up to {limit:,} from a bot")
    mime = file.mime_type or mimetypes.guess_type(file.name)[0] or "application/octet-stream"
    return _Upload(file, mime, _method(file.kind, mime, size))


def _method(kind: AttachmentKind, mime: str, size: int) -> UploadAs:
    """A photo, a voice note, or audio or video Telegram's apps play, as such; anything else (a photo over
    sendPhoto's 10 MB too) as a document."""
    if kind == "image" and mime in _PHOTO_TYPES and size <= MAX_PHOTO_BYTES:
        return "photo"
    if kind == "voice" and mime in _VOICE_TYPES:
        return "voice"
    if kind in ("audio", "voice") and mime in _AUDIO_TYPES:
        return "audio"
    if kind == "video" and mime == "video/mp4":
        return "video"
    return "document"


def _batches(uploads: list[_Upload]) -> list[list[_Upload]]:
    """The files in order, as the messages Telegram can send them in: albums of up to MAX_ALBUM files that may go
    together, and files that go alone."""
    batches: list[list[_Upload]] = []
    for upload in uploads:
        album = _ALBUMS.get(upload.method)
        last = batches[-1] if batches else []
        if album and last and _ALBUMS.get(last[0].method) == album and len(last) < MAX_ALBUM:
            last.append(upload)
        else:
            batches.append([upload])
    return batches


def _caption(message: OutboundMessage, batches: list[list[_Upload]]) -> str | None:
    """The text as the first files' caption, when there are files and it fits (an album cannot carry buttons: then
    the text goes before it, with them); None when the text goes as a message of its own."""
    text = message.text
    if not batches or not text.strip() or len(text) > CAPABILITIES.max_caption_length:
        return None
    if message.buttons and len(batches[0]) > 1:
        return None
    return text


def _input_file(handle: IO[bytes], upload: _Upload, attach: bool = False) -> InputFile:
    """The file as an open handle the transport streams from disk (PTB would read it into memory otherwise)."""
    data = InputFile(handle, filename=upload.file.name, attach=attach, read_file_handle=False)
    data.mimetype = upload.mime_type
    return data


def _input_media(
    upload: _Upload, handle: IO[bytes], caption: str | None, mode: str | None
) -> InputMediaPhoto | InputMediaVideo | InputMediaAudio | InputMediaDocument:
    media = _input_file(handle, upload, attach=True)
    if upload.method == "photo":
        return InputMediaPhoto(media, caption=caption, parse_mode=mode)
    if upload.method == "video":
        return InputMediaVideo(media, caption=caption, parse_mode=mode)
    if upload.method == "audio":
        return InputMediaAudio(media, caption=caption, parse_mode=mode)
    return InputMediaDocument(media, caption=caption, parse_mode=mode)


class FilesMixin(AdapterState):
    """The part of a TelegramAdapter that fetches the files that came with messages."""

    # --- files that came with messages --------------------------------------------------------------------------

    async def download(self, attachment: Attachment) -> AsyncGenerator[bytes, None]:
        """The file's bytes from the Bot API's file server (getFile, then its file URL), in 64 KiB chunks."""
        url = await self._file_url(attachment.ref)
        try:
            async for chunk in self._request.stream(url):
                yield chunk
        except TelegramError as error:  # the transport's errors never hold the token-bearing URL
            raise ChannelError(f"telegram: could not download the file: {error.message}") from None

    async def _file_url(self, file_id: str) -> str:
        """Where the file server serves the file; ChannelError when Telegram will not give it (over 20 MB)."""
        try:
            found = await self.bot.get_file(file_id)
        except BadRequest as error:
            if "file is too big" in error.message.lower():
                raise ChannelError(
                    f"telegram: the file is larger than the {MAX_DOWNLOAD_BYTES // (1024 * 1024)} MB that Telegram's "
                    "Bot API lets a bot download"
                ) from None
            raise ChannelError(f"telegram: Telegram will not give the file: {error.message}") from None
        except TelegramError as error:
            raise ChannelError(f"telegram: could not look the file up: {error.message}") from None
        if not found.file_path:
            raise ChannelError("telegram: Telegram gave no path for the file")
        # PTB makes the path a URL under base_file_url, unless the path names a file on this machine
        root = self.bot.base_file_url
        return found.file_path if found.file_path.startswith(root) else f"{root}/{found.file_path.lstrip('/')}"
