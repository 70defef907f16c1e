"""Sending, editing, deleting and reacting to messages (HTML, files, polls, buttons); typing; forum topics."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from telegram import InlineKeyboardButton, InlineKeyboardMarkup, Message, ReactionTypeEmoji, ReplyParameters
from telegram.constants import ChatAction, ParseMode, PollLimit
from telegram.error import BadRequest, ChatMigrated, TelegramError

from channels.base import ChatTarget, OutboundMessage, Poll
from channels.markup_telegram import markdown_to_html
from channels.telegram.constants import (
    _TOPIC,
    CAPABILITIES,
    MAX_CALLBACK_DATA_BYTES,
    MAX_TOPIC_NAME,
    TelegramSendError,
)
from channels.telegram.files import UploadAs, _batches, _caption, _input_file, _input_media, _Upload, _upload
from channels.telegram.state import AdapterState
from routing.errors import ChannelError

log = logging.getLogger("channels.telegram")  # the package's one logger: filters on channels.telegram keep working
_T = TypeVar("_T")


def chat_and_thread(target: ChatTarget) -> tuple[int | str, int | None]:
    """The Bot API chat id and topic id for a target (`group:-100…:topic:7` names the topic in the peer)."""
    peer_id = target.peer.id or ""
    chat, _, topic = peer_id.partition(_TOPIC)
    thread = target.thread_id or topic or None
    try:
        chat_id: int | str = int(chat)
    except ValueError:
        chat_id = chat  # an @channelusername
    return chat_id, int(thread) if thread else None


def _check_buttons(message: OutboundMessage) -> InlineKeyboardMarkup | None:
    if not message.buttons:
        return None
    rows = []
    for row in message.buttons:
        for button in row:
            size = len(button.value.encode())
            if not 1 <= size <= MAX_CALLBACK_DATA_BYTES:
                raise TelegramSendError(
                    f"button {button.label!r}: its value is {size} bytes; Telegram allows 1 to "
                    f"{MAX_CALLBACK_DATA_BYTES} bytes of callback data"
                )
        rows.append([InlineKeyboardButton(button.label, callback_data=button.value) for button in row])
    return InlineKeyboardMarkup(rows)


def _check_poll(poll: Poll) -> None:
    """Telegram's limits on a poll, checked before anything is sent."""
    question, options = len(poll.question), len(poll.options)
    if not PollLimit.MIN_QUESTION_LENGTH <= question <= PollLimit.MAX_QUESTION_LENGTH:
        raise TelegramSendError(f"a poll's question is 1 to {PollLimit.MAX_QUESTION_LENGTH} characters, not {question}")
    if options > PollLimit.MAX_OPTION_NUMBER:
        raise TelegramSendError(f"a poll has at most {PollLimit.MAX_OPTION_NUMBER} options, not {options}")
    if any(not PollLimit.MIN_OPTION_LENGTH <= len(option) <= PollLimit.MAX_OPTION_LENGTH for option in poll.options):
        raise TelegramSendError(f"a poll's options are 1 to {PollLimit.MAX_OPTION_LENGTH} characters each")


def _entity_error(error: BadRequest) -> bool:
    return "can't parse entities" in error.message.lower() or "can't find end tag" in error.message.lower()


class SendingMixin(AdapterState):
    """The part of a TelegramAdapter that writes to chats."""

    # --- sending ------------------------------------------------------------------------------------------------

    async def send(self, target: ChatTarget, message: OutboundMessage) -> str | None:
        """Send one message as Telegram HTML (plain text if Telegram cannot parse it); the gateway's delivery has
        split the text to `max_text_length`. Files go with the text as their caption when it fits, else after it;
        a poll goes after the text. Returns the id of the last message sent."""
        chat_id, thread = chat_and_thread(target)
        if message.thread_id:
            thread = int(message.thread_id)
        batches = _batches([_upload(file) for file in message.media])
        if message.poll is not None:
            _check_poll(message.poll)
        if message.buttons and not message.text.strip() and batches and len(batches[0]) > 1:
            raise TelegramSendError("buttons cannot go on an album: send a text with them")
        try:
            sent = await self._deliver(chat_id, thread, message, batches)
        except ChatMigrated as error:
            log.warning("telegram %s: chat %s moved to %s", self.account, chat_id, error.new_chat_id)
            sent = await self._deliver(error.new_chat_id, thread, message, batches)
        return str(sent)

    async def _deliver(
        self, chat_id: int | str, thread: int | None, message: OutboundMessage, batches: list[list[_Upload]]
    ) -> int:
        """The text, the files and the poll, in this order; the first message sent replies and carries the buttons.
        Returns the id of the last message sent."""
        reply = ReplyParameters(int(message.reply_to), allow_sending_without_reply=True) if message.reply_to else None
        head: dict[str, Any] = {
            "message_thread_id": thread,
            "reply_markup": _check_buttons(message),
            "reply_parameters": reply,
        }
        rest: dict[str, Any] = {"message_thread_id": thread}
        caption = _caption(message, batches)
        sent: int | None = None
        if caption is None and (message.text.strip() or not (batches or message.poll)):
            sent = await self._send_text(chat_id, message.text, head)
            head = rest
        for batch in batches:
            sent = (await self._send_files(chat_id, batch, caption or "", head)).message_id
            head, caption = rest, None
        if message.poll is not None:
            poll = await self.bot.send_poll(chat_id, message.poll.question, message.poll.options, **head)
            sent = poll.message_id
        if sent is None:
            raise AssertionError("nothing was sent")  # not reached: a message has a text, files or a poll
        return sent

    async def _send_text(self, chat_id: int | str, text: str, kwargs: dict[str, Any]) -> int:
        async def attempt(body: str | None, mode: str | None) -> int:
            return await self.bot.send_message_id(chat_id, body or "", parse_mode=mode, **kwargs)

        return await self._html_or_plain(attempt, text)

    async def _send_files(
        self, chat_id: int | str, batch: list[_Upload], caption: str, head: dict[str, Any]
    ) -> Message:
        """One file by its own method, or an album (its caption is its first file's); returns the last message.
        Each file is streamed from disk by the transport, opened anew for each attempt."""
        if len(batch) == 1:
            upload = batch[0]
            send = self._senders()[upload.method]

            async def one(text: str | None, mode: str | None) -> Message:
                with open(upload.file.path, "rb") as handle:
                    return await send(chat_id, _input_file(handle, upload), caption=text, parse_mode=mode, **head)

            return await self._html_or_plain(one, caption)
        album_kwargs = {key: value for key, value in head.items() if key != "reply_markup"}

        async def album(text: str | None, mode: str | None) -> Message:
            with contextlib.ExitStack() as files:
                handles = [files.enter_context(open(upload.file.path, "rb")) for upload in batch]
                media = [
                    _input_media(upload, handle, *((text, mode) if index == 0 else (None, None)))
                    for index, (upload, handle) in enumerate(zip(batch, handles, strict=True))
                ]
                sent = await self.bot.send_media_group(chat_id, media, **album_kwargs)
            return sent[-1]

        return await self._html_or_plain(album, caption)

    def _senders(self) -> dict[UploadAs, Callable[..., Awaitable[Message]]]:
        bot = self.bot
        return {
            "photo": bot.send_photo,
            "voice": bot.send_voice,
            "audio": bot.send_audio,
            "video": bot.send_video,
            "document": bot.send_document,
        }

    async def _html_or_plain(self, send: Callable[[str | None, str | None], Awaitable[_T]], text: str) -> _T:
        """`send(text, parse_mode)` with the text as Telegram HTML, or as plain text when Telegram cannot parse the
        HTML; `send(None, None)` when there is no text."""
        if not text:
            return await send(None, None)
        try:
            return await send(markdown_to_html(text), ParseMode.HTML)
        except BadRequest as error:
            if not _entity_error(error):
                raise
            log.info("telegram %s: Telegram could not parse the HTML (%s); sending plain text", self.account, error)
            return await send(text, None)

    async def edit(self, target: ChatTarget, message_id: str, message: OutboundMessage) -> None:
        """Replace a message's text (and buttons); an edit that changes nothing is not an error."""
        markup = _check_buttons(message)
        chat_id, _ = chat_and_thread(target)
        text = message.text
        if len(text) > CAPABILITIES.max_text_length:  # a streaming preview: the final send chunks properly
            text = text[: CAPABILITIES.max_text_length - 1] + "…"

        async def attempt(body: str | None, mode: str | None) -> None:
            await self.bot.edit_text(chat_id, int(message_id), body or "", parse_mode=mode, reply_markup=markup)

        try:
            await self._html_or_plain(attempt, text)
        except BadRequest as error:
            if "message is not modified" not in error.message.lower():
                raise

    async def delete(self, target: ChatTarget, message_id: str) -> None:
        chat_id, _ = chat_and_thread(target)
        await self.bot.delete_message(chat_id, int(message_id))

    async def react(self, target: ChatTarget, message_id: str, emoji: str) -> None:
        """Set the bot's reaction; Telegram accepts only its own list of emoji (others are a BadRequest)."""
        chat_id, _ = chat_and_thread(target)
        await self.bot.set_message_reaction(chat_id, int(message_id), [ReactionTypeEmoji(emoji)] if emoji else [])

    async def typing(self, target: ChatTarget) -> None:
        chat_id, thread = chat_and_thread(target)
        await self.bot.send_chat_action(chat_id, ChatAction.TYPING, message_thread_id=thread)

    async def create_thread(self, target: ChatTarget, name: str, message_id: str | None = None) -> str:
        """A forum topic named `name` in the target's supergroup (Telegram starts a topic on its own, not from a
        message: `message_id` is not used); its message_thread_id is the thread id, as in `chat_and_thread`."""
        chat_id, _ = chat_and_thread(target)
        try:
            topic = await self.bot.create_forum_topic(chat_id, name[:MAX_TOPIC_NAME] or "Topic")
        except TelegramError as error:
            raise ChannelError(f"telegram: could not create the topic: {error.message}") from None
        return str(topic.message_thread_id)
