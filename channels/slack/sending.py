"""What the adapter does in Slack: posts with buttons, edits, deletions, reactions, threads, files up and down."""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin

from channels.accounts import SlackAccount
from channels.base import Attachment, ChatTarget, OutboundFile, OutboundMessage
from channels.markup_slack import markdown_to_mrkdwn
from channels.slack.blocks import build_blocks
from channels.slack.files import (
    CHUNK_BYTES,
    MAX_REDIRECTS,
    REDIRECTS,
    file_chunks,
    origin,
    refuse_download,
    transfer_timeout,
)
from channels.slack.parsing import text_or_none
from routing.errors import ChannelError

if TYPE_CHECKING:  # the SDK is imported only when a Slack account starts
    import aiohttp
    from slack_sdk.web.async_client import AsyncWebClient

log = logging.getLogger("channels.slack")  # one logger for the channel, whichever module logs

MAX_UPLOAD_BYTES = 1024**3  # Slack's limit for one file (slack_sdk's MAX_V2_FILE_SIZE says the same)
MAX_CAPTION = 4000  # files.completeUploadExternal's initial_comment
MAX_FILES_PER_MESSAGE = 10  # files shared together in one message by one files.completeUploadExternal
SHARE_PAUSES = (0.0, 0.5, 1.0, 2.0)  # files.info is asked for the share's ts after these pauses (Slack shares late)
_EMOJI_NAMES = {
    "👍": "thumbsup",
    "👎": "thumbsdown",
    "✅": "white_check_mark",
    "❌": "x",
    "👀": "eyes",
    "❤️": "heart",
    "❤": "heart",
    "🎉": "tada",
    "😂": "joy",
    "🔥": "fire",
    "🤔": "thinking_face",
    "⏳": "hourglass_flowing_sand",
    "🙏": "pray",
    "👋": "wave",
    "⚠️": "warning",
    "🚀": "rocket",
    "💯": "100",
    "😊": "blush",
    "🙂": "slightly_smiling_face",
}


def _share_ts(file: Any, channel: str) -> str | None:
    """The ts of the message that shared `file` in `channel`, from the file's `shares` (public or private)."""
    shares = file.get("shares") if isinstance(file, dict) else None
    for scope in ("public", "private"):
        places = shares.get(scope) if isinstance(shares, dict) else None
        entries = places.get(channel) if isinstance(places, dict) else None
        for entry in entries if isinstance(entries, list) else []:
            if isinstance(entry, dict) and text_or_none(entry.get("ts")):
                return str(entry["ts"])
    return None


class Sending:
    """The SlackAdapter's outbound side, through the Web API and Slack's file hosts (a part of SlackAdapter)."""

    account: str
    settings: SlackAccount
    client: AsyncWebClient | None
    _sleep: Callable[[float], Awaitable[None]]
    _dm_channels: dict[str, str]
    _message_channels: OrderedDict[str, str]
    _file_origins: frozenset[tuple[str, str, int]]

    def _api(self) -> AsyncWebClient:
        if self.client is None:
            raise RuntimeError(f"slack account {self.account} is not started")
        return self.client

    async def _channel(self, target: ChatTarget, ts: str | None = None, *, conversation: bool = False) -> str:
        """The Slack channel id for a target; for a DM, the D... channel (posting to a user id opens it, so a user id
        does for a new message unless a `conversation` id is needed: file shares take only C/G/D ids)."""
        peer_id = target.peer.id
        if not peer_id:
            raise ValueError("a Slack target needs a peer id")
        if target.peer.kind != "direct":
            return peer_id
        if ts is not None and ts in self._message_channels:
            return self._message_channels[ts]
        if peer_id in self._dm_channels:
            return self._dm_channels[peer_id]
        if ts is None and not conversation:
            return peer_id
        opened = await self._api().conversations_open(users=peer_id)
        channel = str(opened["channel"]["id"])
        self._dm_channels[peer_id] = channel
        return channel

    def _remember(self, ts: str, channel: str) -> None:
        self._message_channels[ts] = channel
        while len(self._message_channels) > 4096:
            self._message_channels.popitem(last=False)

    @staticmethod
    def _render(message: OutboundMessage) -> tuple[str, list[dict[str, Any]]]:
        text = markdown_to_mrkdwn(message.text)
        return text, build_blocks(text, message.buttons) if message.buttons else []

    async def send(self, target: ChatTarget, message: OutboundMessage) -> str | None:
        """Text (with buttons), or files with the text as their comment; the ts of the last message posted."""
        if message.poll is not None:
            raise ChannelError("slack: Slack has no native polls")
        if message.media:
            return await self._send_files(target, message)
        return await self._post(target, message)

    async def _post(self, target: ChatTarget, message: OutboundMessage) -> str:
        text, blocks = self._render(message)
        extra: dict[str, Any] = {"blocks": blocks} if blocks else {}
        thread = message.thread_id or target.thread_id
        if thread:
            extra["thread_ts"] = thread
        response = await self._api().chat_postMessage(channel=await self._channel(target), text=text, **extra)
        ts, channel = str(response["ts"]), str(response["channel"])
        self._remember(ts, channel)
        if target.peer.kind == "direct" and target.peer.id:
            self._dm_channels.setdefault(target.peer.id, channel)
        return ts

    @staticmethod
    def _caption(message: OutboundMessage) -> str | None:
        """The text as the files' comment, when it fits one and has no buttons (a file share carries none)."""
        text = markdown_to_mrkdwn(message.text)
        return text if text.strip() and not message.buttons and len(text) <= MAX_CAPTION else None

    async def _send_files(self, target: ChatTarget, message: OutboundMessage) -> str | None:
        """Upload the files (up to ten shared in one message) after the text, unless the text is their comment.
        Returns the last share's ts, or None where Slack has not said it (the files are shared all the same)."""
        channel = await self._channel(target, conversation=True)
        thread = message.thread_id or target.thread_id
        caption = self._caption(message)
        last: str | None = None
        if caption is None and message.text.strip():
            last = await self._post(target, message)
        for start in range(0, len(message.media), MAX_FILES_PER_MESSAGE):
            uploaded = [await self._upload(file) for file in message.media[start : start + MAX_FILES_PER_MESSAGE]]
            last = await self._share(channel, uploaded, thread, caption)
            caption = None
        return last

    async def _upload(self, file: OutboundFile) -> dict[str, str | None]:
        """files.getUploadURLExternal, then the bytes streamed from disk to the upload URL; the file's id and title."""
        import aiofiles.os

        try:
            size = (await aiofiles.os.stat(file.path)).st_size
        except OSError as error:
            raise ChannelError(f"slack: cannot read {file.name}: {error.strerror}") from None
        if size > MAX_UPLOAD_BYTES:
            raise ChannelError(f"slack: {file.name} is {size} bytes; Slack takes files up to {MAX_UPLOAD_BYTES}")
        ticket = await self._api().files_getUploadURLExternal(filename=file.name, length=size)
        await self._upload_bytes(str(ticket["upload_url"]), file, size)
        return {"id": str(ticket["file_id"]), "title": file.name}

    async def _upload_bytes(self, url: str, file: OutboundFile, size: int) -> None:
        """POST the file's raw bytes to its upload URL as slack_sdk does, but chunk by chunk from disk (slack_sdk
        reads the whole file into memory first). The URL is signed by Slack: no token goes with it."""
        import aiohttp

        headers = {"Content-Type": "application/octet-stream", "Content-Length": str(size)}
        try:
            async with (
                aiohttp.ClientSession(timeout=transfer_timeout()) as session,
                session.post(url, data=file_chunks(file.path), headers=headers, proxy=self._proxy()) as response,
            ):
                if response.status != 200:
                    raise ChannelError(f"slack: uploading {file.name} failed: HTTP {response.status}")
        except (aiohttp.ClientError, TimeoutError, OSError) as error:
            raise ChannelError(f"slack: uploading {file.name} failed: {type(error).__name__}: {error}") from None

    async def _share(
        self, channel: str, files: list[dict[str, str | None]], thread: str | None, text: str | None
    ) -> str | None:
        """files.completeUploadExternal: one message in `channel` (in `thread`) with the files and `text`."""
        done = await self._api().files_completeUploadExternal(
            files=files, channel_id=channel, thread_ts=thread, initial_comment=text
        )
        answered = done.get("files")
        first = answered[0] if isinstance(answered, list) and answered else None
        ts = _share_ts(first, channel) or await self._share_ts_later(str(files[0]["id"]), channel)
        if ts is not None:
            self._remember(ts, channel)
        return ts

    async def _share_ts_later(self, file_id: str, channel: str) -> str | None:
        """The ts of the message that shared a file, from files.info: completeUploadExternal does not say it, and
        Slack shares a moment later, so it is asked again after short pauses. None if Slack never says."""
        from slack_sdk.errors import SlackApiError

        for pause in SHARE_PAUSES:
            if pause:
                await self._sleep(pause)
            try:
                info = await self._api().files_info(file=file_id)
            except SlackApiError as error:
                log.warning("slack %s: files.info on %s: %s", self.account, file_id, error.response.get("error"))
                return None
            ts = _share_ts(info.get("file"), channel)
            if ts is not None:
                return ts
        log.info("slack %s: file %s shared, but Slack has not said in which message", self.account, file_id)
        return None

    def _proxy(self) -> str | None:
        """The proxy the Web API client uses (slack_sdk reads HTTPS_PROXY), for file transfers too."""
        proxy = self.client.proxy if self.client is not None else None
        return proxy if isinstance(proxy, str) and proxy else None

    async def download(self, attachment: Attachment) -> AsyncGenerator[bytes, None]:
        """The bytes of a file of a message (its url_private), CHUNK_BYTES at a time, with the bot token (which
        needs the files:read scope). The token goes only to Slack's file host (`file_origins`): a file elsewhere is
        refused, and a redirect to another host is followed without it."""
        import aiohttp

        what = f"slack: the file {attachment.name or '(no name)'}"
        if origin(attachment.ref) not in self._file_origins:
            raise ChannelError(f"{what} is not on Slack's file host; not downloaded")
        try:
            async with (
                aiohttp.ClientSession(timeout=transfer_timeout()) as session,
                await self._fetch(session, attachment, what) as response,
            ):
                async for chunk in response.content.iter_chunked(CHUNK_BYTES):
                    yield chunk
        except (aiohttp.ClientError, TimeoutError) as error:
            # Not chained: an aiohttp error's request_info carries the request's headers, the token among them.
            raise ChannelError(f"{what} could not be downloaded: {type(error).__name__}: {error}") from None

    async def _fetch(self, session: aiohttp.ClientSession, attachment: Attachment, what: str) -> aiohttp.ClientResponse:
        """The response at the end of the file's redirects, followed here rather than by aiohttp so that each hop
        is judged: the Authorization header goes only to a hop on Slack's file host."""
        url = attachment.ref
        token = self.settings.bot_token.get_secret_value()
        for _ in range(MAX_REDIRECTS + 1):
            headers = {"Authorization": f"Bearer {token}"} if origin(url) in self._file_origins else {}
            response = await session.get(url, headers=headers, allow_redirects=False, proxy=self._proxy())
            location = response.headers.get("Location")
            if response.status not in REDIRECTS or not location:
                refuse_download(response, attachment, what)
                return response
            response.release()
            url = urljoin(str(response.url), location)
            if origin(url) is None:
                raise ChannelError(f"{what} could not be downloaded: redirected to a non-HTTP address")
        raise ChannelError(f"{what} could not be downloaded: more than {MAX_REDIRECTS} redirects")

    async def create_thread(self, target: ChatTarget, name: str, message_id: str | None = None) -> str:
        """A Slack thread is the replies to one message: `message_id` when given (nothing is posted), else `name`
        posted as a new message in the chat. Returns the parent's ts, the thread_ts that ChatTarget.thread_id holds."""
        if message_id:
            return message_id
        return await self._post(target.model_copy(update={"thread_id": None}), OutboundMessage(text=name))

    async def edit(self, target: ChatTarget, message_id: str, message: OutboundMessage) -> None:
        text, blocks = self._render(message)
        # An empty list takes away the buttons an earlier version had; leaving blocks out would keep them.
        channel = await self._channel(target, message_id)
        await self._api().chat_update(channel=channel, ts=message_id, text=text, blocks=blocks)

    async def delete(self, target: ChatTarget, message_id: str) -> None:
        await self._api().chat_delete(channel=await self._channel(target, message_id), ts=message_id)

    async def react(self, target: ChatTarget, message_id: str, emoji: str) -> None:
        name = _EMOJI_NAMES.get(emoji.strip(), emoji.strip().strip(":"))
        channel = await self._channel(target, message_id)
        await self._api().reactions_add(channel=channel, timestamp=message_id, name=name)

    async def typing(self, target: ChatTarget) -> None:
        # Slack shows no typing indicator for bots (the RTM one is gone); nothing to send.
        log.debug("slack %s: typing in %s:%s (no-op on Slack)", self.account, target.peer.kind, target.peer.id)
