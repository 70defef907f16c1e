"""Slack events and button clicks read into InboundMessage and ActionEvent: who, in which chat and thread, files."""

from __future__ import annotations

import logging
import re
from typing import Any

from channels.base import ActionEvent, Attachment, AttachmentKind, InboundMessage
from routing import Peer

log = logging.getLogger("channels.slack")  # one logger for the channel, whichever module logs

_KINDS: dict[str, AttachmentKind] = {"image": "image", "audio": "audio", "video": "video"}
# Message subtypes that are something someone said; the rest (edits, deletions, joins ...) are not messages to answer.
_SAID = {None, "bot_message", "thread_broadcast", "file_share", "me_message"}


def text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _file_kind(file: dict[str, Any]) -> AttachmentKind:
    """image, audio or video by the mimetype's type; a clip recorded in Slack's audio recorder (subtype
    `slack_audio`) is a voice note whatever its mimetype; anything else is a document."""
    if file.get("subtype") == "slack_audio":
        return "voice"
    return _KINDS.get((text_or_none(file.get("mimetype")) or "").split("/")[0], "document")


def _attachment(file: Any) -> Attachment | None:
    """One file of a message; None for a file with nothing to fetch from Slack (deleted, hidden by the free plan's
    limit, stored elsewhere, or a Slack Connect file whose details need files.info)."""
    if not isinstance(file, dict) or file.get("is_external"):
        return None
    ref = text_or_none(file.get("url_private")) or text_or_none(file.get("url_private_download"))
    if ref is None:
        log.debug("slack: file %s without url_private (mode %r) skipped", file.get("id"), file.get("mode"))
        return None
    size, duration = file.get("size"), file.get("duration_ms")
    return Attachment(
        kind=_file_kind(file),
        ref=ref,
        name=text_or_none(file.get("name")),
        mime_type=text_or_none(file.get("mimetype")),
        size=size if isinstance(size, int) and not isinstance(size, bool) else None,
        duration=duration / 1000 if isinstance(duration, int | float) and not isinstance(duration, bool) else None,
    )


def _unescape(text: str) -> str:
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


class Parsing:
    """The SlackAdapter's reading of events_api and block_actions bodies (a part of SlackAdapter)."""

    channel: str
    account: str
    bot_username: str | None
    bot_user_id: str | None
    bot_id: str | None
    team_id: str | None
    _dm_channels: dict[str, str]
    _mention: re.Pattern[str] | None

    def _inbound(self, body: dict[str, Any]) -> InboundMessage | None:
        """The message in an events_api body, or None for events that are not someone saying something."""
        event = body["event"]
        subtype = event.get("subtype")
        if subtype not in _SAID:
            log.debug("slack %s: ignored message subtype %s", self.account, subtype)
            return None
        bot_id = event.get("bot_id")
        user = event.get("user") or bot_id
        if (self.bot_user_id and user == self.bot_user_id) or (bot_id and bot_id == self.bot_id):
            return None  # our own message
        channel, ts = event["channel"], event["ts"]
        if not (isinstance(user, str) and user and isinstance(channel, str) and channel and isinstance(ts, str)):
            raise ValueError("an event without user, channel or ts")
        channel_type = event.get("channel_type") or ("im" if channel.startswith("D") else None)
        if channel_type == "im":
            peer = Peer("direct", user)
            self._dm_channels[user] = channel
        elif channel_type == "mpim":
            peer = Peer("group", channel)
        else:
            peer = Peer("channel", channel)
        text = event.get("text") or ""
        if not isinstance(text, str):
            raise ValueError("text is not a string")
        mentioned = event.get("type") == "app_mention" or bool(self._mention and self._mention.search(text))
        if self._mention is not None:
            # A leading mention is how people address the bot; `@bot /new` must still read as a command.
            text = self._mention.sub(f"@{self.bot_username}" if self.bot_username else "", text)
            if self.bot_username:
                text = re.sub(rf"^\s*@{re.escape(self.bot_username)}\b[\s:,]*", "", text)
        thread_ts = event.get("thread_ts")
        thread_ts = thread_ts if isinstance(thread_ts, str) and thread_ts else None
        profile = event.get("user_profile") if isinstance(event.get("user_profile"), dict) else {}
        name = profile.get("display_name") or profile.get("real_name") or event.get("username")
        attachments = [item for item in map(_attachment, event.get("files") or []) if item is not None]
        return InboundMessage(
            channel=self.channel,
            account=self.account,
            peer=peer,
            team=body.get("team_id") or event.get("team") or self.team_id,
            sender_id=user,
            sender_name=name if isinstance(name, str) and name else None,
            sender_is_bot=bool(bot_id) or subtype == "bot_message",
            text=_unescape(text.strip()),
            message_id=ts,
            reply_to=thread_ts if thread_ts and thread_ts != ts else None,
            reply_to_bot=bool(self.bot_user_id) and event.get("parent_user_id") == self.bot_user_id,
            thread_id=thread_ts,
            was_mentioned=mentioned,
            attachments=attachments,
        )

    def _actions(self, body: dict[str, Any]) -> list[ActionEvent]:
        if body.get("type") != "block_actions":
            return []
        user = body["user"]["id"]
        container = body.get("container") or {}
        message = body.get("message") or {}
        channel = (body.get("channel") or {}).get("id") or container.get("channel_id")
        ts = container.get("message_ts") or message.get("ts")
        if not (isinstance(channel, str) and isinstance(ts, str) and isinstance(user, str)):
            raise ValueError("a click without channel, message or user")
        peer = Peer("direct", user) if channel.startswith("D") else Peer("channel", channel)
        if peer.kind == "direct":
            self._dm_channels[user] = channel
        thread = container.get("thread_ts") or message.get("thread_ts")
        name = body["user"].get("username") or body["user"].get("name")
        return [
            ActionEvent(
                channel=self.channel,
                account=self.account,
                peer=peer,
                sender_id=user,
                sender_name=name,
                message_id=ts,
                value=action["value"],
                thread_id=thread if isinstance(thread, str) and thread else None,
                click_id=action.get("action_ts") if isinstance(action.get("action_ts"), str) else None,
            )
            for action in body.get("actions") or []
            if isinstance(action, dict) and action.get("type") == "button" and isinstance(action.get("value"), str)
        ]
