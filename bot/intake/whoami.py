"""`/whoami`: the sender's id exactly as `owners:` takes it, whether they are an owner, and how to make them one."""

from __future__ import annotations

from bot.config.owners_file import owner_key
from bot.intake.access import AccessVerdict
from channels.base import AccountSettings, InboundMessage

__all__ = ["asks_whoami_in_dm", "stranger_whoami", "whoami"]


def whoami(message: InboundMessage, owners: frozenset[str]) -> str:
    """The answer for someone the bot talks to: their id, whether it is in `owners:`, and the command that adds it."""
    who = owner_key(message.channel, message.sender_id)
    if who in owners:
        return f"Your id: {who}\nYou are an owner of this bot."
    return (
        f"Your id: {who}\nYou are not an owner of this bot. To make you one, whoever runs it adds `- {who}` under "
        f"`owners:` in its bindings.yaml, or runs:\nbot owners add {who}"
    )


def asks_whoami_in_dm(message: InboundMessage, command: str | None) -> bool:
    """A direct message that is `/whoami` (`command`: the name of the command it starts with): answered even to a
    sender access control turns away (see stranger_whoami), so it must not start a pairing request either."""
    return command == "whoami" and message.peer.kind == "direct"


def stranger_whoami(message: InboundMessage, settings: AccountSettings, verdict: AccessVerdict) -> AccessVerdict:
    """The verdict for a `/whoami` in a DM from a sender access control turned away: the answer is their id and
    nothing else (no agent, no typing, no pairing code), so that the owner can add them. Bots get nothing, and neither
    does anyone where the account takes no direct messages (`dm_policy: disabled`)."""
    if message.sender_is_bot or settings.dm_policy == "disabled":
        return verdict
    return AccessVerdict(False, "stranger asked /whoami", f"Your id: {owner_key(message.channel, message.sender_id)}")
