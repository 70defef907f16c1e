"""Who a run acts for (`channels.base.Principal`), decided here for every path that starts a turn: a person's message
or button click, and a turn run again after a restart (decided again from its journaled message); a batch and a
steered message (never mixing principals); a cron job or heartbeat (its maker's trust: scheduled.cron_turns);
a subagent and a message between sessions (the lesser of the parent's and the target session's)."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from bot.config.owners_file import owner_key
from channels.base import InboundMessage, Principal

__all__ = ["EARLIER", "SHELL", "job_maker", "lesser", "principal_of", "session_principal"]

SHELL = "cli"  # the maker of a job made with `bot cron add`: someone with the bot's files, so an owner

EARLIER = "earlier"  # among a session's people: turns from before they were kept, whoever they acted for


def principal_of(message: InboundMessage, owners: Collection[str]) -> Principal:
    """Whom the turn `message` starts acts for: its sender, an owner only when the config names them; a turn the
    bot started itself (`scheduled`) acts for whom its maker said, never for an owner by default."""
    person = owner_key(message.channel, message.sender_id)
    scheduled = message.scheduled
    if scheduled is None:
        return Principal(owner=person in owners, person=person)
    return Principal(owner=scheduled.owner, person=scheduled.person or person)


def session_principal(people: Sequence[str]) -> Principal | None:
    """Whom a session's turns have acted for (the `key`s it recorded), as one principal: the owners when only they
    had turns in it, the one person when only they did; None when nobody in particular (several people, or none
    known)."""
    if not people or len(set(people)) != 1 or people[0] == EARLIER:
        return None
    only = people[0]
    return Principal(owner=True) if only == "owners" else Principal(owner=False, person=only)


def lesser(parent: Principal, target: Principal | None) -> Principal:
    """What a turn one run starts in another session acts for: never more than the parent, and never more than
    the people of the session it runs in (their words are in its history). Owners only when both are; the target's
    one person when the parent may speak for them; else the parent's own person, without an owner's powers."""
    if target is not None and target.owner and parent.owner:
        return parent
    if target is not None and not target.owner and target.person and (parent.owner or parent.person == target.person):
        return target
    return Principal(owner=False, person=parent.person)


def job_maker(made_by: str | None, made_by_owner: bool | None, owners: Collection[str]) -> Principal:
    """Whom a scheduled job acts for: who made it, and never more than they are now. The config's jobs and
    `bot cron add`'s (SHELL, or None for no person) act for the owners; a job an owner's run made
    acts for the owners while that person still is one; anyone else's acts for its maker (`made_by_owner` None: a job
    from before makers were kept, judged by whether its maker is an owner now)."""
    if made_by is None or made_by == SHELL:
        return Principal(owner=True)
    channel, _, sender_id = made_by.partition(":")
    person = owner_key(channel, sender_id)
    still = person in owners
    return Principal(owner=still and made_by_owner is not False, person=person)
