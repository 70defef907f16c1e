"""Raw updates as InboundMessages (an album's parts as one) and clicks as ActionEvents, handed to the gateway."""

from __future__ import annotations

import logging
import re
from typing import Any

from telegram import CallbackQuery, Message, MessageEntity, Sticker, Update
from telegram.error import TelegramError

from channels.base import NOTICE_BUDGET_SECONDS, ActionEvent, Attachment, AttachmentKind, InboundMessage, within
from channels.telegram.client import _seconds
from channels.telegram.constants import _TOPIC
from channels.telegram.state import AdapterState
from routing import Peer

log = logging.getLogger("channels.telegram")  # the package's one logger: filters on channels.telegram keep working


class ParsingMixin(AdapterState):
    """The part of a TelegramAdapter that reads updates: each raw update parsed (a bad one logged and skipped), the
    messages handed to `on_message` and the clicks to `on_action`."""

    async def handle_update(self, raw: dict[str, Any]) -> None:
        """Hand one raw update to the gateway; a bad one is logged and skipped, never fatal."""
        await self.handle_updates([raw])

    async def handle_updates(self, raws: list[dict[str, Any]]) -> None:
        """Hand the gateway one update, or an album's parts as one message; bad ones are logged and skipped."""
        parsed = [self._parse(raw) for raw in raws]
        for item in parsed:
            if isinstance(item, CallbackQuery):
                await self._action(item)
        parts = [item for item in parsed if isinstance(item, InboundMessage)]
        if parts and self._on_message is not None:
            await self._on_message(_merged(parts))

    def _parse(self, raw: dict[str, Any]) -> InboundMessage | CallbackQuery | None:
        """A raw update as a message or a button click; None (logged) for what is not handled or malformed."""
        update_id = raw.get("update_id")
        try:
            update = Update.de_json(raw, self.bot)
            if update.callback_query is not None:
                return update.callback_query
            message = update.message if update.message is not None else update.channel_post
            if message is None:
                kinds = ", ".join(sorted(key for key in raw if key != "update_id")) or "nothing"
                log.info("telegram %s: skipped update %s of a type not handled (%s)", self.account, update_id, kinds)
                return None
            inbound = self._inbound(message)
        except Exception as error:
            log.warning(
                "telegram %s: skipped malformed update %s: %s: %s", self.account, update_id, type(error).__name__, error
            )
            return None
        if inbound is None:
            log.debug("telegram %s: skipped update %s: a service message with no text", self.account, update_id)
        return inbound

    def _peer(self, message: Message) -> tuple[Peer, Peer | None, str | None]:
        chat = message.chat
        if chat.type == "private":
            return Peer("direct", chat.id), None, None
        if chat.type == "channel":
            return Peer("channel", chat.id), None, None
        if message.is_topic_message and message.message_thread_id is not None:
            thread = str(message.message_thread_id)
            return Peer("group", f"{chat.id}{_TOPIC}{thread}"), Peer("group", chat.id), thread
        return Peer("group", chat.id), None, None

    def _inbound(self, message: Message) -> InboundMessage | None:
        peer, parent, thread = self._peer(message)
        user = message.from_user
        if user is not None:
            sender_id, sender_is_bot = str(user.id), user.is_bot
            sender_name = user.full_name or user.username
        elif message.sender_chat is not None:
            sender_id, sender_is_bot = str(message.sender_chat.id), False
            sender_name = message.sender_chat.title or message.sender_chat.username
        else:
            raise ValueError("a message with neither from nor sender_chat")
        if user is not None and self.bot_id is not None and user.id == self.bot_id:
            sender_is_bot = True
        text = message.text or message.caption or ""
        attachments = _attachments(message)
        if not text and not attachments:
            return None  # joins, leaves, pins, topic events: nothing for an agent to answer
        reply = message.reply_to_message
        if reply is not None and reply.forum_topic_created is not None:
            reply = None  # in a topic every message "replies" to the topic's first message: not a real reply
        reply_to_bot = bool(
            reply is not None and reply.from_user is not None and self.bot_id and reply.from_user.id == self.bot_id
        )
        return InboundMessage(
            channel=self.channel,
            account=self.account,
            peer=peer,
            parent_peer=parent,
            sender_id=sender_id,
            sender_name=sender_name,
            sender_is_bot=sender_is_bot,
            text=text,
            message_id=str(message.message_id),
            reply_to=str(reply.message_id) if reply is not None else None,
            reply_to_bot=reply_to_bot,
            thread_id=thread,
            was_mentioned=reply_to_bot or self._mentions_bot(message, text),
            attachments=attachments,
        )

    def _mentions_bot(self, message: Message, text: str) -> bool:
        if not self.bot_username:
            return False
        handle = f"@{self.bot_username}".lower()
        entities = message.entities or message.caption_entities or ()
        for entity in entities:
            if entity.type == MessageEntity.TEXT_MENTION and entity.user is not None and entity.user.id == self.bot_id:
                return True
            if entity.type in (MessageEntity.MENTION, MessageEntity.BOT_COMMAND):
                # offsets count UTF-16 units; parse_entity gets that right
                piece = (message.parse_entity(entity) if message.text else message.parse_caption_entity(entity)).lower()
                if piece == handle or piece.endswith(handle):
                    return True
        # Without an entity: the whole handle, not a prefix of a longer one (`@fake_botnet` is not `@fake_bot`).
        return re.search(rf"(?<![\w@]){re.escape(handle)}(?!\w)", text, re.IGNORECASE) is not None

    async def _action(self, query: CallbackQuery) -> None:
        notice = None
        try:
            event = self._action_event(query)
            if event is not None and self._on_action is not None:
                notice = await within(
                    self._on_action(event), NOTICE_BUDGET_SECONDS, f"telegram {self.account}: a click"
                )
        finally:
            try:  # always answered, so the client's spinner stops; a notice shows as an alert
                await query.answer(text=notice, show_alert=bool(notice))
            except TelegramError as error:
                log.warning("telegram %s: could not answer callback query %s: %s", self.account, query.id, error)

    def _action_event(self, query: CallbackQuery) -> ActionEvent | None:
        message = query.message
        if message is None or not query.data:
            log.info("telegram %s: skipped a button click without a message or data", self.account)
            return None
        if not isinstance(message, Message):  # an inaccessible (too old) message
            peer, thread = Peer("direct" if message.chat.type == "private" else "group", message.chat.id), None
        else:
            peer, _, thread = self._peer(message)
        return ActionEvent(
            channel=self.channel,
            account=self.account,
            peer=peer,
            sender_id=str(query.from_user.id),
            sender_name=query.from_user.full_name or query.from_user.username,
            message_id=str(message.message_id),
            value=query.data,
            thread_id=thread,
            click_id=query.id,
        )


# Message fields holding one file, with the kind each is and the type Telegram omits for it. An animation comes with
# a `document` copy of itself (for old clients): it is looked at first, and the copy is not a second file.
_FILE_FIELDS: tuple[tuple[str, AttachmentKind, str | None], ...] = (
    ("animation", "video", "video/mp4"),
    ("voice", "voice", "audio/ogg"),
    ("audio", "audio", None),
    ("video", "video", "video/mp4"),
    ("video_note", "video", "video/mp4"),
    ("document", "document", None),
)


def _attachments(message: Message) -> list[Attachment]:
    """The file a message carries (Telegram's messages carry one; an album is several messages)."""
    if message.photo:  # the sizes Telegram made of one photo: the largest is the photo
        largest = max(message.photo, key=lambda size: (size.width * size.height, size.file_size or 0))
        return [Attachment(kind="image", ref=largest.file_id, mime_type="image/jpeg", size=largest.file_size)]
    if message.sticker is not None:
        return [_sticker(message.sticker)]
    for field, kind, usual_type in _FILE_FIELDS:
        item = getattr(message, field)
        if item is not None:
            return [
                Attachment(
                    kind=kind,
                    ref=item.file_id,
                    name=getattr(item, "file_name", None),
                    mime_type=getattr(item, "mime_type", None) or usual_type,
                    size=item.file_size,
                    duration=_seconds(item, "duration"),
                )
            ]
    return []


def _sticker(sticker: Sticker) -> Attachment:
    """A sticker: a WebP image, a WebM video, or an animated (Lottie) `.tgs` sticker."""
    if sticker.is_animated:
        mime = "application/x-tgsticker"
    elif sticker.is_video:
        mime = "video/webm"
    else:
        mime = "image/webp"
    return Attachment(kind="sticker", ref=sticker.file_id, mime_type=mime, size=sticker.file_size)


def _merged(parts: list[InboundMessage]) -> InboundMessage:
    """An album's parts as one message: the first part's ids, the caption there is as its text (any other part's
    caption on that part's file), and every file in order."""
    if len(parts) == 1:
        return parts[0]
    captioned = next((part for part in parts if part.text), parts[0])
    files = [
        file.model_copy(update={"caption": part.text}) if part.text and part is not captioned else file
        for part in parts
        for file in part.attachments
    ]
    update = {
        "text": captioned.text,
        "attachments": files,
        "was_mentioned": any(part.was_mentioned for part in parts),
        "reply_to_bot": any(part.reply_to_bot for part in parts),
    }
    return parts[0].model_copy(update=update)
