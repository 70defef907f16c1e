"""Streaming replies: the answer appears while the model writes it, as one message edited in place (sent and
edited through the outbox, like everything the bot says)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from agent.events import AssistantEvent, RunEvent
from channels.base import Capabilities, ChatTarget, OutboundMessage

if TYPE_CHECKING:
    from bot.delivery.outbox import Delivery

log = logging.getLogger(__name__)


class StreamingReply:
    """Shows the answer once it has taken longer than one interval, then edits it at most once per interval
    (never with the same text); `finish` puts the complete first chunk in place and returns the rest for the
    outbox. A quick answer is never streamed: it goes out whole.

    `message_id`: a message an earlier, interrupted run streamed into; this answer is written there instead of
    in a new message. `reply_to`: the message the first preview quotes (a person's message in a group). `key`:
    the first preview's outbox key (the turn's), so that a turn run again after a crash finds the preview it sent
    instead of sending another. `on_shown(message_id)` is awaited once, when the first preview has been sent.
    `clock` and `sleep` pace the edits (tests pass a clock they move by hand).
    """

    def __init__(
        self,
        delivery: Delivery,
        target: ChatTarget,
        capabilities: Capabilities,
        *,
        thread_id: str | None = None,
        message_id: str | None = None,
        reply_to: str | None = None,
        key: str | None = None,
        on_shown: Callable[[str], Awaitable[None]] | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.delivery = delivery
        self.target = target
        self.capabilities = capabilities
        self.thread_id = thread_id
        self.limit = capabilities.max_text_length
        self.interval = capabilities.edit_interval_seconds
        self.message_id = message_id
        self.reply_to = reply_to
        self.key = key
        self._on_shown = on_shown
        self._clock, self._sleep = clock, sleep
        self._text = ""
        self._shown = ""
        self._last = float("-inf")
        self._changed = asyncio.Event()
        self._showing = asyncio.Lock()  # held by the editor while it sends or edits a preview
        self._worker: asyncio.Task[None] | None = None
        self._broken = False

    async def on_event(self, event: RunEvent) -> None:
        """An Emit for the run: collects text deltas and wakes the editor."""
        if not isinstance(event, AssistantEvent) or self._broken:
            return
        self._text += event.delta
        self._changed.set()
        if self._worker is None:
            # The first preview waits one interval: a quick answer goes out whole, as one message.
            self._last = self._clock()
            self._worker = asyncio.create_task(self._edit_loop(), name="streaming-reply")

    async def _edit_loop(self) -> None:
        while True:
            await self._changed.wait()
            await self._pace()
            self._changed.clear()
            async with self._showing:
                await self._show(self._preview())

    async def _pace(self) -> None:
        """Until one interval has passed since the last preview was shown."""
        await self._sleep(max(0.0, self._last + self.interval - self._clock()))

    def _preview(self) -> str:
        return self._text.strip()[: self.limit]

    async def _show(self, text: str) -> None:
        if not text or text == self._shown or self._broken:
            return
        message = OutboundMessage(text=text, thread_id=self.thread_id)
        first = self.message_id is None
        try:
            if self.message_id is None:
                quoting = message.model_copy(update={"reply_to": self.reply_to})
                # A preview still queued behind the chat's earlier messages when the wait ends is stale: taken back,
                # never sent later beside the whole answer.
                self.message_id = await self.delivery.send(self.target, quoting, key=self.key, withdraw_late=True)
                if self.message_id is None:  # taken back, or a platform without message ids: stop streaming
                    self._broken = True
            else:
                await self.delivery.edit(self.target, self.message_id, message)
        except Exception as error:  # the final answer still goes out through the outbox
            log.warning("streaming preview to %s stopped: %s", self.target.channel, error)
            self._broken = True
        self._shown = text
        self._last = self._clock()
        if first and self.message_id is not None and self._on_shown is not None:
            try:
                await self._on_shown(self.message_id)
            except Exception as error:  # it still streams; only a restart could not finish it in place
                log.warning("could not record the streamed message in %s: %s", self.target.channel, error)

    async def _stop(self) -> None:
        if self._worker is not None:
            # Not in the middle of a send or edit: one cut short may still reach the chat, unrecorded (a send
            # whose message id is lost would leave the preview beside the whole answer).
            try:
                async with self._showing:
                    pass
            finally:
                self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker
            self._worker = None

    async def finish(self, text: str) -> list[str]:
        """Put the answer's first chunk into the streamed message; the chunks still to send, in order. With no
        answer at all, the streamed message is taken back."""
        await self._stop()
        chunks = self.delivery.split(self.target.channel, self.target.account, text)
        if not chunks:
            await self.retract()
            return chunks
        if self.message_id is None or self._broken:
            return chunks
        if chunks[0] != self._shown:
            await self._pace()  # the final edit keeps the pace too
            await self._show(chunks[0])
            if self._broken:
                return chunks
        return chunks[1:]

    async def retract(self) -> None:
        """The answer went out another way (the message tool): stop, and take the preview back where possible."""
        await self._stop()
        if self.message_id is not None and self.capabilities.delete:
            try:
                await self.delivery.delete(self.target, self.message_id)
            except Exception as error:
                log.warning("could not remove the streamed preview in %s: %s", self.target.channel, error)
        self.message_id = None

    async def abandon(self) -> None:
        """The turn failed: stop editing (what was shown stays)."""
        await self._stop()

    @property
    def shown(self) -> bool:
        return self.message_id is not None
