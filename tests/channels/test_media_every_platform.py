"""A file that comes with a message, on each platform's real adapter (built from the config as `bot run` builds it)
against its fake server: it downloads as exactly its bytes, streamed in chunks, never whole, and fetched once the
platform's way (Telegram: looked up by getFile, then from the file server; Discord: from the CDN, without the bot
token; Slack: from url_private, with it). Each platform's own ways with files (Telegram's kinds and albums, Discord's
CDN hosts, Slack's redirects and sign-in page, every upload path): test_telegram_media.py, test_discord.py,
test_slack_media.py."""

from __future__ import annotations

import contextlib
import random
from pathlib import Path

from platforms import File, Platform

from channels.base import ChannelAdapter, InboundMessage

CHUNK = 64 * 1024  # the most any adapter reads at once


async def collect(adapter: ChannelAdapter, message: InboundMessage) -> list[bytes]:
    """The chunks of the message's one attachment, as the adapter downloads them."""
    [attachment] = message.attachments
    async with contextlib.aclosing(adapter.download(attachment)) as chunks:
        return [chunk async for chunk in chunks]


async def test_a_file_that_came_with_a_message_downloads_as_exactly_its_bytes_in_chunks(
    platform: Platform, tmp_path: Path
) -> None:
    data = random.Random(15).randbytes(5 * 1024 * 1024 + 123)
    async with platform.adapter(tmp_path) as (adapter, inbox):
        [key] = await platform.send_files([File(data, "big.bin", "application/zip")], "take it")
        [message] = await inbox.wait(1)
        assert message.text == "take it"
        chunks = await collect(adapter, message)
    assert b"".join(chunks) == data
    assert len(chunks) > 1 and max(map(len, chunks)) <= CHUNK  # streamed, never whole
    assert platform.fetched() == [key]  # once, the platform's way
