"""WebChat: the channel of the bot's own web page. One account per agent (the page of agent X is account X); each
person who logs in has a direct chat (`web:<login>`), whose messages this adapter keeps while the bot runs and
hands to the page as they change. The web server (bot.gateway.web) turns a browser's requests into `say` and
`click`; everything the bot sends arrives here through the outbox, as on every platform."""

from __future__ import annotations

import asyncio
import itertools
import os
import secrets
import shutil
import time
from collections import OrderedDict, deque
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from channels.base import (
    AccountSettings,
    ActionEvent,
    Attachment,
    AttachmentKind,
    Capabilities,
    ChatTarget,
    InboundMessage,
    OnAction,
    OnMessage,
    OutboundMessage,
)
from channels.health import ChannelHealth
from routing import Peer
from routing.errors import ChannelError

__all__ = ["CHANNEL", "WEB_CAPABILITIES", "ChatEvent", "PageMessage", "Upload", "WebChannel"]

CHANNEL = "web"
KEPT_PER_CHAT = 300  # messages a chat page shows after a reload (the session's transcript keeps all of them)
KEPT_UPLOADS = 100  # files people sent, held until the bot has fetched them (and a page may show them back)
MAX_FILE_BYTES = 50 * 1024 * 1024  # the largest file the bot hands a browser
CHUNK = 64 * 1024

WEB_CAPABILITIES = Capabilities(
    buttons=True,
    edit=True,
    delete=True,
    files=True,
    max_upload_bytes=MAX_FILE_BYTES,
    max_caption_length=4000,
    max_text_length=100_000,
    markup="markdown",
    streaming=True,
    edit_interval_seconds=0.25,
)


@dataclass
class PageMessage:
    """One message on a chat page: the person's (`person`) or the bot's, its text (Markdown for the bot's), its
    buttons, the files it carries (download id, name), and whether the buttons still count."""

    id: str
    side: Literal["person", "bot"]
    text: str
    at: float
    buttons: list[list[tuple[str, str, str]]] = field(default_factory=list)  # (label, value, style)
    files: list[tuple[str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class ChatEvent:
    """What changed on a chat page: a message shown (`shown`), changed (`changed`) or taken back (`gone`)."""

    kind: Literal["shown", "changed", "gone"]
    message: PageMessage


@dataclass(frozen=True)
class Upload:
    """A file a person sent from the page: its name, type and bytes (already held to the account's media limit)."""

    name: str
    mime_type: str | None
    data: bytes


@dataclass
class _Chat:
    shown: deque[PageMessage] = field(default_factory=lambda: deque(maxlen=KEPT_PER_CHAT))
    watchers: set[asyncio.Queue[ChatEvent]] = field(default_factory=set)


class WebChannel:
    """The WebChat account of one agent (`account` is the agent's id). `files_dir` holds what the bot sends (a
    copy, so a file the agent later changes or removes stays as sent)."""

    channel = CHANNEL
    bot_username: str | None = None

    def __init__(self, account: str, files_dir: Path) -> None:
        self.account = account
        self.capabilities = WEB_CAPABILITIES
        self.files_dir = files_dir
        # A person reaches this chat only through a login the web server checked: the page is the gate.
        self._settings = AccountSettings(dm_policy="open", streaming="partial", require_mention=False)
        self.health = ChannelHealth(CHANNEL, account)
        self._chats: dict[str, _Chat] = {}
        self._uploads: OrderedDict[str, Upload] = OrderedDict()
        self._downloads: dict[str, tuple[str, Path, str]] = {}  # id -> (chat, file, name)
        self._on_message: OnMessage | None = None
        self._on_action: OnAction | None = None
        self._prefix = secrets.token_hex(4)
        self._ids = itertools.count(1)

    @property
    def settings(self) -> AccountSettings:
        return self._settings

    # --- the web server's side -------------------------------------------------------------------------------------

    async def say(self, login: str, text: str, *, name: str | None = None, files: tuple[Upload, ...] = ()) -> str:
        """`text` (and `files`) from the person logged in as `login`, into their chat: shown on their page at once,
        and handed to the gateway (journaled) before this returns; the message's id."""
        if self._on_message is None:
            raise ChannelError(f"{CHANNEL}/{self.account} is not running")
        message_id = self._new_id("in")
        attachments = []
        for upload in files:
            ref = self._new_id("up")
            self._uploads[ref] = upload
            while len(self._uploads) > KEPT_UPLOADS:
                self._uploads.popitem(last=False)
            kind: AttachmentKind = "image" if (upload.mime_type or "").startswith("image/") else "document"
            size = len(upload.data)
            attachments.append(Attachment(kind=kind, ref=ref, name=upload.name, mime_type=upload.mime_type, size=size))
        names = [(attachment.ref, attachment.name or "file") for attachment in attachments]
        self._show(login, PageMessage(message_id, "person", text, time.time(), files=names), "shown")
        message = InboundMessage(
            channel=CHANNEL, account=self.account, peer=Peer("direct", login), sender_id=login, sender_name=name,
            text=text, message_id=message_id, attachments=attachments,
        )  # fmt: skip
        await self._on_message(message)
        return message_id

    async def click(self, login: str, message_id: str, value: str, *, name: str | None = None) -> str | None:
        """A click by `login` on a button of a message in their chat; the notice only they see, if any. A value that
        is not one of that message's buttons is refused (ChannelError), as a platform would."""
        if self._on_action is None:
            raise ChannelError(f"{CHANNEL}/{self.account} is not running")
        shown = self._find(login, message_id)
        if shown is None or not any(value == button[1] for row in shown.buttons for button in row):
            raise ChannelError("no such button on that message")
        event = ActionEvent(
            channel=CHANNEL, account=self.account, peer=Peer("direct", login), sender_id=login, sender_name=name,
            message_id=message_id, value=value, click_id=self._new_id("click"),
        )  # fmt: skip
        return await self._on_action(event)

    def shown(self, login: str) -> list[PageMessage]:
        """The messages of `login`'s chat, oldest first."""
        chat = self._chats.get(login)
        return list(chat.shown) if chat is not None else []

    def watch(self, login: str) -> asyncio.Queue[ChatEvent]:
        """A queue of `login`'s chat: first every message it holds (a page that was rendered a moment ago misses
        nothing said since; it places a message by its id), then what changes; `unwatch` it when the page goes."""
        queue: asyncio.Queue[ChatEvent] = asyncio.Queue(maxsize=KEPT_PER_CHAT + 1000)
        for shown in self.shown(login):
            queue.put_nowait(ChatEvent("shown", shown))
        self._chat(login).watchers.add(queue)
        return queue

    def unwatch(self, login: str, queue: asyncio.Queue[ChatEvent]) -> None:
        self._chat(login).watchers.discard(queue)

    def download_file(self, login: str, download_id: str) -> tuple[Path, str] | None:
        """The file (and its name) the bot sent to `login`'s chat under `download_id`; None for any other."""
        found = self._downloads.get(download_id)
        if found is None or found[0] != login:
            return None
        return found[1], found[2]

    def upload_of(self, login: str, ref: str) -> Upload | None:
        """A file `login` sent (a page shows it back), None for anyone else's."""
        upload = self._uploads.get(ref)
        if upload is None or not any(ref == file for shown in self.shown(login) for file, _ in shown.files):
            return None
        return upload

    # --- the gateway's side (ChannelAdapter) -------------------------------------------------------------------

    async def start(self, on_message: OnMessage, on_action: OnAction) -> None:
        # What an earlier run kept for its pages: nobody can reach those downloads any more.
        await asyncio.to_thread(shutil.rmtree, self.files_dir, True)
        self._on_message, self._on_action = on_message, on_action
        self.health.set("connected")

    async def stop(self) -> None:
        self._on_message = self._on_action = None
        self.health.set("stopped")

    async def send(self, target: ChatTarget, message: OutboundMessage) -> str | None:
        message_id = self._new_id("out")
        files = [await asyncio.to_thread(self._keep_file, target, file.path, file.name) for file in message.media]
        text = message.text
        if message.poll is not None:
            options = "\n".join(f"- {option}" for option in message.poll.options)
            text = f"{text}\n\n**{message.poll.question}**\n{options}".strip()
        shown = PageMessage(message_id, "bot", text, time.time(), _buttons(message), files)
        self._show(_login(target), shown, "shown")
        return message_id

    async def edit(self, target: ChatTarget, message_id: str, message: OutboundMessage) -> None:
        shown = self._find(_login(target), message_id)
        if shown is None:
            raise ChannelError(f"{CHANNEL}: no message {message_id!r} to edit")
        shown.text, shown.buttons = message.text, _buttons(message)
        self._show(_login(target), shown, "changed")

    async def delete(self, target: ChatTarget, message_id: str) -> None:
        login = _login(target)
        shown = self._find(login, message_id)
        if shown is None:
            raise ChannelError(f"{CHANNEL}: no message {message_id!r} to delete")
        self._chat(login).shown.remove(shown)
        self._notify(login, ChatEvent("gone", shown))

    async def react(self, target: ChatTarget, message_id: str, emoji: str) -> None:
        raise ChannelError(f"{CHANNEL} has no reactions")

    async def typing(self, target: ChatTarget) -> None:
        return None  # the page shows a streamed answer as it comes: no separate sign

    async def download(self, attachment: Attachment) -> AsyncGenerator[bytes, None]:
        upload = self._uploads.get(attachment.ref)
        if upload is None:
            raise ChannelError(f"{CHANNEL}: no file {attachment.ref!r} (sent before the bot restarted?)")
        for start in range(0, len(upload.data), CHUNK):
            yield upload.data[start : start + CHUNK]

    async def create_thread(self, target: ChatTarget, name: str, message_id: str | None = None) -> str:
        raise ChannelError(f"{CHANNEL} has no threads")

    # --- inside ------------------------------------------------------------------------------------------------------

    def _keep_file(self, target: ChatTarget, path: str, name: str) -> tuple[str, str]:
        source = Path(path)
        if source.stat().st_size > MAX_FILE_BYTES:
            raise ChannelError(f"{name} is larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB")
        download_id = self._new_id("file")
        self.files_dir.mkdir(parents=True, exist_ok=True)
        kept = self.files_dir / download_id
        shutil.copyfile(source, kept)
        self._downloads[download_id] = (_login(target), kept, os.path.basename(name) or "file")
        return download_id, os.path.basename(name) or "file"

    def _chat(self, login: str) -> _Chat:
        chat = self._chats.get(login)
        if chat is None:
            chat = self._chats[login] = _Chat()
        return chat

    def _find(self, login: str, message_id: str) -> PageMessage | None:
        return next((shown for shown in self.shown(login) if shown.id == message_id), None)

    def _show(self, login: str, shown: PageMessage, kind: Literal["shown", "changed"]) -> None:
        if kind == "shown":
            self._chat(login).shown.append(shown)
        self._notify(login, ChatEvent(kind, shown))

    def _notify(self, login: str, event: ChatEvent) -> None:
        for queue in list(self._chat(login).watchers):
            if queue.full():  # a page that stopped reading: it reloads what it missed
                self._chat(login).watchers.discard(queue)
                continue
            queue.put_nowait(event)

    def _new_id(self, kind: str) -> str:
        return f"{kind}-{self._prefix}-{next(self._ids)}"


def _login(target: ChatTarget) -> str:
    if target.peer.kind != "direct" or not target.peer.id:
        raise ChannelError(f"{CHANNEL} has only direct chats, not {target.peer.kind} {target.peer.id}")
    return target.peer.id


def _buttons(message: OutboundMessage) -> list[list[tuple[str, str, str]]]:
    return [[(button.label, button.value, button.style) for button in row] for row in message.buttons]
