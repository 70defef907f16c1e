"""What a send puts on Discord: its limits (CAPABILITIES), reply-to and buttons, polls, and files in batches."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from datetime import timedelta
from typing import Any, Final

import discord
import discord.ui

from channels.base import Capabilities, OutboundFile, OutboundMessage, Poll
from channels.discord.client import ActionButton
from routing.errors import ChannelError

MAX_CUSTOM_ID = 100  # Discord's limit on a component's custom_id, and so on a button's value
MAX_TEXT = 2000  # a message's content, and so a caption
MAX_FILES_PER_MESSAGE = 10
# A bot's upload limit in DMs and unboosted guilds (boost tier 2 allows 50 MiB, tier 3 100 MiB; one figure per
# account is all Capabilities holds, so the smallest). Each message's files together stay within it too.
MAX_UPLOAD_BYTES = 10 * 1024 * 1024
POLL_DURATION = timedelta(hours=24)
MAX_POLL_QUESTION = 300
MAX_POLL_ANSWERS = 10
MAX_POLL_ANSWER = 55
MAX_THREAD_NAME = 100
THREAD_ARCHIVE_MINUTES: Final = 1440  # a new thread hides from the channel list after a day without messages
PUBLIC_THREAD: Final = 11  # the channel type of a public thread
CAPABILITIES = Capabilities(
    buttons=True,
    edit=True,
    delete=True,
    reactions=True,
    threads=True,
    polls=True,
    files=True,
    max_upload_bytes=MAX_UPLOAD_BYTES,
    max_caption_length=MAX_TEXT,
    max_text_length=MAX_TEXT,
    markup="discord-markdown",
    streaming=True,
    edit_interval_seconds=1.0,
)
_STYLES = {
    "primary": discord.ButtonStyle.primary,
    "secondary": discord.ButtonStyle.secondary,
    "success": discord.ButtonStyle.success,
    "danger": discord.ButtonStyle.danger,
}


async def send_poll(channel: discord.PartialMessageable, text: str, poll: Poll, options: dict[str, Any]) -> str:
    """The text (if any), then the poll; `options` go with the first message. Returns the poll's message id."""
    native = _native_poll(poll)
    if text:
        await channel.send(text, **options)
        options = {}
    sent = await channel.send(poll=native, **options)
    return str(sent.id)


async def send_files(
    channel: discord.PartialMessageable,
    text: str,
    media: Sequence[OutboundFile],
    options: dict[str, Any],
    max_caption_length: int,
) -> str:
    """The files in batches, the text as the first one's caption (sent before them when longer than
    `max_caption_length`); `options` go with the first message. Returns the last message's id."""
    batches = _batches(media)
    caption: str | None = text or None
    if caption is not None and len(caption) > max_caption_length:
        await channel.send(caption, **options)
        caption, options = None, {}
    sent_id = ""
    for batch in batches:
        with contextlib.ExitStack() as stack:
            sent = await channel.send(caption, files=_opened(stack, batch), **options)
        sent_id, caption, options = str(sent.id), None, {}
    return sent_id


def _native_poll(poll: Poll) -> discord.Poll:
    """The poll as discord.py's, open for POLL_DURATION; ChannelError where Discord's limits would refuse it."""
    too_long = len(poll.question) > MAX_POLL_QUESTION or any(len(option) > MAX_POLL_ANSWER for option in poll.options)
    if too_long or len(poll.options) > MAX_POLL_ANSWERS:
        raise ChannelError(
            f"a Discord poll takes a question of up to {MAX_POLL_QUESTION} characters and up to "
            f"{MAX_POLL_ANSWERS} answers of up to {MAX_POLL_ANSWER} characters each"
        )
    native = discord.Poll(question=poll.question, duration=POLL_DURATION)
    for option in poll.options:
        native.add_answer(text=option)
    return native


def _file_size(item: OutboundFile) -> int:
    """The file's size on disk; ChannelError when it is missing or over a bot's upload limit."""
    try:
        size = os.stat(item.path).st_size
    except OSError as error:
        raise ChannelError(f"discord: cannot upload {item.name}: {error.strerror}") from error
    if size > MAX_UPLOAD_BYTES:
        raise ChannelError(
            f"discord: {item.name} is {size} bytes; a bot may upload at most {MAX_UPLOAD_BYTES} bytes "
            f"({MAX_UPLOAD_BYTES // (1024 * 1024)} MiB) per file"
        )
    return size


def _batches(media: Sequence[OutboundFile]) -> list[list[OutboundFile]]:
    """The files grouped into messages: at most MAX_FILES_PER_MESSAGE each, their sizes together within the upload
    limit (sizes are checked for every file before anything is sent)."""
    batches: list[list[OutboundFile]] = []
    room = 0
    for item, size in [(item, _file_size(item)) for item in media]:
        if not batches or len(batches[-1]) >= MAX_FILES_PER_MESSAGE or size > room:
            batches.append([])
            room = MAX_UPLOAD_BYTES
        batches[-1].append(item)
        room -= size
    return batches


def _opened(stack: contextlib.ExitStack, batch: Sequence[OutboundFile]) -> list[discord.File]:
    """discord.File for each file, opened now and closed when `stack` closes (discord.py streams them from disk)."""
    files = []
    for item in batch:
        file = discord.File(item.path, filename=item.name)
        stack.callback(file.close)
        files.append(file)
    return files


def first_options(channel: discord.PartialMessageable, message: OutboundMessage) -> dict[str, Any]:
    """What goes with the first message a send makes: the reply-to and the buttons."""
    options: dict[str, Any] = {}
    if message.reply_to:
        options["reference"] = discord.MessageReference(
            message_id=int(message.reply_to), channel_id=channel.id, fail_if_not_exists=False
        )
    view = buttons_view(message)
    if view is not None:
        options["view"] = view
    return options


def buttons_view(message: OutboundMessage) -> discord.ui.View | None:
    if not message.buttons:
        return None
    view = discord.ui.View(timeout=None)
    for row, buttons in enumerate(message.buttons):
        for button in buttons:
            if not 0 < len(button.value) <= MAX_CUSTOM_ID:
                raise ValueError(f"a Discord button value must be 1 to {MAX_CUSTOM_ID} characters: {button.value!r}")
            item = ActionButton(button.value, button.label, _STYLES[button.style])
            item.row = row
            view.add_item(item)
    return view
