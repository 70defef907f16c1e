"""Telling a person an owner let in that they may talk now: one message through the outbox, whether the owner
approved their pairing code with /pair in a chat, with `bot pairing approve`, or while the bot was stopped."""

from __future__ import annotations

import asyncio
import logging

from bot.delivery.outbox import Delivery
from bot.store import PairingStore
from bot.store.pairing import PairingRecord
from channels.base import InboundMessage
from routing import Peer

__all__ = ["POLL_SECONDS", "WELCOME", "PairingWatch", "welcome", "welcome_key"]

log = logging.getLogger(__name__)

WELCOME = "You're approved: I'm listening now."
POLL_SECONDS = 2.0  # how often a running bot looks for requests approved from elsewhere (`bot pairing approve`)


def welcome_key(record: PairingRecord) -> str:
    """The outbox key of the welcome for one approved request: recorded under it once, whoever records it."""
    return f"paired:{record.channel}:{record.account}:{record.code}"


async def welcome(delivery: Delivery, record: PairingRecord) -> None:
    """Record the welcome for `record`'s sender, in a DM on the account they asked on. Whoever records it again (the
    /pair handler, the running bot's watch, `bot pairing approve`) adds nothing: the outbox keeps one entry per key,
    and a running bot sends it (a stopped one when it starts)."""
    person = InboundMessage(
        channel=record.channel,
        account=record.account,
        peer=Peer("direct", record.sender_id),
        sender_id=record.sender_id,
        message_id=f"pairing-{record.code}",
    )
    await delivery.reply(person, WELCOME, key=welcome_key(record))


class PairingWatch:
    """In a running bot: requests approved elsewhere (`bot pairing approve`, another process of a cluster) get their
    welcome within `poll` seconds. Watched are the requests pending at each look and those intake hands it (`watch`,
    so that one approved before the next look is not missed). A watched request that leaves the pending list while
    its sender is now allowed was approved; one that expired or was revoked leaves it with its sender not allowed,
    and gets nothing."""

    def __init__(self, store: PairingStore, delivery: Delivery, *, poll: float = POLL_SECONDS) -> None:
        self.store = store
        self.delivery = delivery
        self.poll = poll
        self._watched: dict[tuple[str, str, str], PairingRecord] = {}

    def watch(self, record: PairingRecord) -> None:
        """Watch a request intake made (or found) just now: one approved before the next look is not missed."""
        self._watched[(record.channel, record.account, record.code)] = record

    async def _pending(self) -> dict[tuple[str, str, str], PairingRecord]:
        return {(r.channel, r.account, r.code): r for r in await self.store.pending_pairings()}

    async def run(self) -> None:
        """Look every `poll` seconds, until cancelled (the requests pending at the start are watched too)."""
        for record in (await self._pending()).values():
            self.watch(record)
        while True:
            await asyncio.sleep(self.poll)
            try:
                await self.look()
            except Exception:  # the state unreachable for a moment: look again at the next turn
                log.warning("could not look for approved pairing requests", exc_info=True)

    async def look(self) -> None:
        """Welcome the senders of the watched requests approved since; watch the pending ones from now on."""
        now = await self._pending()
        for key, record in list(self._watched.items()):
            if key in now:
                continue
            del self._watched[key]
            if await self._approved(record):
                log.info("%s/%s: %s was let in: telling them", record.channel, record.account, record.sender_id)
                await welcome(self.delivery, record)
        self._watched.update(now)

    async def _approved(self, record: PairingRecord) -> bool:
        if self.delivery.adapter_for(record.channel, record.account) is None:
            return False  # an account this process does not serve: the process that serves it says it
        return await self.store.is_allowed_sender(record.channel, record.account, record.sender_id)
