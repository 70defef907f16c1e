"""Telegram's limits and this adapter's fixed numbers: the capabilities, sizes, waits, and the send error."""

from __future__ import annotations

from channels.base import Capabilities
from routing.errors import ChannelError

CAPABILITIES = Capabilities(
    buttons=True,
    edit=True,
    delete=True,
    reactions=True,
    threads=True,  # forum topics (create_thread makes one)
    polls=True,
    files=True,
    max_upload_bytes=50 * 1024 * 1024,  # the cloud Bot API's limit for a bot's upload
    max_caption_length=1024,
    max_text_length=4096,
    markup="telegram-html",
    streaming=True,
    edit_interval_seconds=1.0,
)
DEFAULT_ROOT = "https://api.telegram.org"
MAX_CALLBACK_DATA_BYTES = 64
MAX_DELIVERY_ATTEMPTS = 3
MAX_WEBHOOK_BODY = 10_000_000  # bytes of one webhook post; an update is a few kilobytes
WEBHOOK_READ_SECONDS = 30  # a post whose body trickles in slower than this is dropped
ALLOWED_UPDATES = ["message", "channel_post", "callback_query"]
MEDIA_GROUP_WAIT = 1.0  # seconds to let an album's later parts reach the server before its first ones are delivered
MAX_DOWNLOAD_BYTES = 20 * 1024 * 1024  # the cloud Bot API's getFile limit
MAX_PHOTO_BYTES = 10 * 1024 * 1024  # sendPhoto's limit: a larger image goes as a document
MAX_ALBUM = 10  # files in one sendMediaGroup
MAX_TOPIC_NAME = 128  # characters of a forum topic's name
_TOPIC = ":topic:"


class TelegramSendError(ChannelError, ValueError):
    """A message Telegram would refuse, caught before it is sent (e.g. a button value over 64 bytes)."""
