"""Turns discord.py's messages and button clicks into InboundMessage and ActionEvent, attachments included."""

from __future__ import annotations

import re

import discord

from channels.base import ActionEvent, Attachment, AttachmentKind, InboundMessage
from routing import Peer


def normalize(
    message: discord.Message,
    me: discord.ClientUser | None,
    *,
    channel_name: str,
    account: str,
    dm_channels: dict[str, int],
) -> InboundMessage | None:
    """The message as an InboundMessage of `account` (a DM's channel id noted in `dm_channels`, by user id)."""
    author = message.author
    channel = message.channel
    parent: Peer | None = None
    thread_id: str | None = None
    if message.guild is None:
        peer = Peer("direct", str(author.id))
        dm_channels[str(author.id)] = channel.id
    else:
        peer = Peer("channel", str(channel.id))
        if isinstance(channel, discord.Thread):
            thread_id = str(channel.id)
            if channel.parent_id is not None:
                parent = Peer("channel", str(channel.parent_id))
    roles: tuple[str, ...] = ()
    if isinstance(author, discord.Member):
        roles = tuple(str(role.id) for role in author.roles if not role.is_default())
    reference = message.reference
    reply_to = str(reference.message_id) if reference is not None and reference.message_id else None
    resolved = reference.resolved if reference is not None else None
    reply_to_bot = me is not None and isinstance(resolved, discord.Message) and resolved.author.id == me.id
    mentioned = me is not None and any(user.id == me.id for user in message.mentions)
    text = message.content
    if me is not None:  # `<@bot> hello` reads as `hello` (and `<@bot> /new` as a command)
        text = re.sub(rf"<@!?{me.id}>", "", text).strip()
    return InboundMessage(
        channel=channel_name,
        account=account,
        peer=peer,
        parent_peer=parent,
        guild=str(message.guild.id) if message.guild is not None else None,
        member_roles=roles,
        sender_id=str(author.id),
        sender_name=author.display_name,
        sender_is_bot=author.bot,
        text=text,
        message_id=str(message.id),
        reply_to=reply_to,
        reply_to_bot=reply_to_bot,
        thread_id=thread_id,
        was_mentioned=mentioned or reply_to_bot,
        attachments=[_attachment(item, message.flags.voice) for item in message.attachments],
    )


def action_event(
    interaction: discord.Interaction[discord.Client],
    value: str,
    *,
    channel_name: str,
    account: str,
    dm_channels: dict[str, int],
) -> ActionEvent | None:
    """A click on a button with `value` as an ActionEvent of `account` (a DM's channel id noted in `dm_channels`);
    None when the click names no message or channel."""
    if interaction.message is None or interaction.channel_id is None:
        return None
    user = interaction.user
    channel = interaction.channel
    thread_id = str(channel.id) if isinstance(channel, discord.Thread) else None
    if interaction.guild_id is None:
        peer = Peer("direct", str(user.id))
        dm_channels[str(user.id)] = interaction.channel_id
    else:
        peer = Peer("channel", str(interaction.channel_id))
    return ActionEvent(
        channel=channel_name,
        account=account,
        peer=peer,
        sender_id=str(user.id),
        sender_name=user.display_name,
        message_id=str(interaction.message.id),
        value=value,
        thread_id=thread_id,
        click_id=str(interaction.id),
    )


def _attachment(item: discord.Attachment, voice: bool) -> Attachment:
    """One attachment as an Attachment: its kind from its content type (audio in a voice message is a voice note),
    its CDN URL as the ref."""
    mime = item.content_type or ""
    kind: AttachmentKind = "document"
    if mime.startswith("image/"):
        kind = "image"
    elif mime.startswith("audio/"):
        kind = "voice" if voice else "audio"
    elif mime.startswith("video/"):
        kind = "video"
    return Attachment(
        kind=kind,
        ref=item.url,
        name=item.filename,
        mime_type=item.content_type,
        size=item.size,
        duration=item.duration,
    )
