"""What a start does with work a long outage left behind: messages unanswered and replies unsent older than
`recovery.max_age` are not run or sent, but logged, and each direct chat they belong to gets one line saying the bot
was offline. A subagent whose task went stale ends as failed, so its parent hears of it."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from bot.delivery.outbox import Delivery
from bot.store import InboundRecord, OutboxEntry, Store
from channels.base import ChatTarget, InboundMessage, OutboundMessage

__all__ = ["OFFLINE", "drop_stale"]

log = logging.getLogger(__name__)

OFFLINE = (
    "Sorry, I was offline for a while and could not answer your last message. Please send it again if you still "
    "need it."
)

# Ends a child of sessions_spawn whose task went stale (bot.scheduled.subagents.Subagents.end_stale).
EndChild = Callable[[InboundRecord, str], Awaitable[None]]


async def drop_stale(
    store: Store,
    delivery: Delivery,
    leftovers: list[InboundRecord],
    *,
    max_age: float,
    now: float,
    end_child: EndChild,
) -> list[InboundRecord]:
    """Drop what is older than `max_age` (seconds before `now`) among the messages left unfinished (`leftovers`) and
    the replies left unsent; returns the leftovers young enough to run again."""
    cutoff = now - max_age
    told: dict[str, dict[str, Any]] = {}  # the direct chats to tell, by target: the target
    fresh: list[InboundRecord] = []
    for record in leftovers:
        if record.received >= cutoff:
            fresh.append(record)
            continue
        why = f"stale: received {_age(now - record.received)} before this start (over recovery.max_age)"
        log.warning("message %s in %s/%s not run: %s", record.message_id, record.channel, record.chat, why)
        message = InboundMessage.model_validate(record.payload)
        scheduled = message.scheduled
        if scheduled is not None and scheduled.kind == "subagent":
            await end_child(record, why)
            continue
        await store.finish_inbound([record.id], "failed", why)
        if scheduled is None and message.peer.kind == "direct":
            target = message.target().model_dump(mode="json")
            told.setdefault(_key(target), target)
    for unsent in await store.unsent_outbox():
        if unsent.created >= cutoff:
            continue
        why = f"stale: recorded {_age(now - unsent.created)} before this start (over recovery.max_age)"
        log.warning("reply %d to %s/%s not sent: %s", unsent.id, unsent.channel, unsent.account, why)
        await store.mark_dead(unsent.id, why)
        if unsent.kind == "send" and unsent.target.get("peer", {}).get("kind") == "direct":
            told.setdefault(_key(unsent.target), unsent.target)
    if told:
        await delivery.close([], replies=[_offline(target) for target in told.values()])
    return fresh


def _key(target: dict[str, Any]) -> str:
    where = ChatTarget.model_validate(target)
    return f"{where.channel}/{where.account}:{where.peer.kind}:{where.peer.id}:{where.thread_id or ''}"


def _offline(target: dict[str, Any]) -> OutboxEntry:
    where = ChatTarget.model_validate(target)
    payload = OutboundMessage(text=OFFLINE, thread_id=where.thread_id).model_dump(mode="json")
    return OutboxEntry(inbound_id=None, channel=where.channel, account=where.account, target=target, payload=payload)


def _age(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.0f} min" if seconds >= 60 else f"{seconds:.0f} s"
