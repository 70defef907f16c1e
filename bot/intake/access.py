"""Who may talk to the bot, checked before anything else runs: DM and group policies, mentions, pairing."""

from __future__ import annotations

from dataclasses import dataclass

from bot.config.owners_file import owner_key
from bot.store import PairingRecord, PairingStore
from channels.base import AccountSettings, InboundMessage

PAIRING_TTL_SECONDS = 3600.0
MAX_PENDING_PAIRINGS = 10  # per account; a new request then replaces the oldest


@dataclass(frozen=True)
class AccessVerdict:
    """Whether a message reaches the bot; why not (for the journal); what, if anything, to answer; and the pairing
    request a stranger's message made."""

    allowed: bool
    reason: str = ""
    reply: str | None = None
    pairing: PairingRecord | None = None  # the request a stranger's message made (or already had)


ALLOWED = AccessVerdict(True)


async def check_access(
    message: InboundMessage,
    settings: AccountSettings,
    store: PairingStore,
    owners: frozenset[str],
    *,
    pair: bool = True,
) -> AccessVerdict:
    """The verdict for one message. Strangers get nothing but, under `pairing`, a one-time code (unless `pair` is
    False: a stranger's `/whoami` is answered with their id alone, and asks for no code)."""
    if message.sender_is_bot:
        return AccessVerdict(False, "ignored: sent by a bot")
    owner = owner_key(message.channel, message.sender_id) in owners
    if message.peer.kind == "direct":
        return await _direct(message, settings, store, owner, pair)
    if settings.group_policy == "disabled":
        return AccessVerdict(False, "ignored: groups are disabled for this account")
    if settings.group_policy == "allowlist" and not owner and message.sender_id not in settings.group_allow_from:
        return AccessVerdict(False, "ignored: sender not in group_allow_from")
    addressed = message.was_mentioned or message.reply_to_bot or (owner and message.text.startswith("/"))
    if settings.require_mention and not addressed:
        return AccessVerdict(False, "ignored: not mentioned")
    return ALLOWED


async def _direct(
    message: InboundMessage, settings: AccountSettings, store: PairingStore, owner: bool, pair: bool
) -> AccessVerdict:
    if owner or settings.dm_policy == "open" or message.sender_id in settings.allow_from:
        return ALLOWED
    if settings.dm_policy == "disabled":
        return AccessVerdict(False, "ignored: direct messages are disabled for this account")
    if await store.is_allowed_sender(message.channel, message.account, message.sender_id):
        return ALLOWED
    if settings.dm_policy == "allowlist":
        return AccessVerdict(False, "ignored: sender not in allow_from")
    if not pair:
        return AccessVerdict(False, "ignored: not paired")
    request = await store.request_pairing(
        message.channel,
        message.account,
        message.sender_id,
        message.sender_name,
        ttl=PAIRING_TTL_SECONDS,
        max_pending=MAX_PENDING_PAIRINGS,
    )
    reply = (
        f"Hi! I don't know you yet. Your pairing code is {request.code} (valid for one hour). Ask the bot's "
        f"owner to approve it: `bot pairing approve {message.channel} {request.code}`, or /pair {request.code} "
        f"in a chat with me. Your id: {owner_key(message.channel, message.sender_id)}"
    )
    return AccessVerdict(False, "pairing requested", reply, request)
