"""Inbound hand-over: Socket Mode envelopes and HTTP requests through Bolt to the gateway, acked once it has them."""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from channels.base import NOTICE_BUDGET_SECONDS, ChatTarget, OnAction, OnMessage, within
from channels.health import ChannelHealth
from channels.slack.parsing import Parsing
from channels.slack.sending import Sending
from channels.slack.socket_mode import SocketMode

if TYPE_CHECKING:  # the SDK is imported only when a Slack account starts
    from aiohttp import web
    from slack_bolt.app.async_app import AsyncApp
    from slack_bolt.context.ack.async_ack import AsyncAck
    from slack_bolt.request.async_request import AsyncBoltRequest
    from slack_bolt.response import BoltResponse

log = logging.getLogger("channels.slack")  # one logger for the channel, whichever module logs

ACK_BUDGET_SECONDS = 2.5  # Slack wants an ack within 3 s; a slower hand-over finishes after the ack


@dataclass
class _HandOver:
    """What became of one request: Bolt's response, and whether the gateway failed to take its message."""

    response: BoltResponse | None = None
    failed: bool = False


_HAND_OVER: contextvars.ContextVar[_HandOver | None] = contextvars.ContextVar("slack_hand_over", default=None)


class Seen:
    """The last few thousand keys, to drop the second delivery of one message (`message` + `app_mention`)."""

    def __init__(self, size: int = 4096) -> None:
        self._keys: OrderedDict[str, None] = OrderedDict()
        self._size = size

    def add(self, key: str) -> bool:
        """True if the key is new."""
        if key in self._keys:
            self._keys.move_to_end(key)
            return False
        self._keys[key] = None
        while len(self._keys) > self._size:
            self._keys.popitem(last=False)
        return True

    def discard(self, key: str) -> None:
        self._keys.pop(key, None)


class Inbound(Parsing, Sending):
    """The SlackAdapter's inbound side: frames and requests to Bolt, Bolt's listeners to the gateway, then the ack
    (a part of SlackAdapter)."""

    app: AsyncApp | None
    health: ChannelHealth
    _socket: SocketMode | None
    _seen: Seen
    _on_message: OnMessage | None
    _on_action: OnAction | None
    _late: set[asyncio.Task[None]]

    # --- inbound: transport ---------------------------------------------------------------------------------------

    async def _envelope(self, message: dict[str, Any]) -> None:
        """One Socket Mode frame: dispatch it through Bolt, then ack it. A frame Bolt cannot read is acked anyway
        (Slack would only send it again); one whose hand-over failed is not, so that Slack redelivers it."""
        from slack_bolt.adapter.socket_mode.internals import build_headers
        from slack_bolt.request.async_request import AsyncBoltRequest
        from slack_sdk.socket_mode.request import SocketModeRequest

        envelope_id = message.get("envelope_id")
        if not isinstance(envelope_id, str) or not envelope_id:
            if message.get("type") not in ("hello", None):
                log.debug("slack %s: socket frame of type %r without an envelope", self.account, message.get("type"))
            return
        payload = message.get("payload")
        if isinstance(payload, dict) and message.get("type") in ("events_api", "interactive", "slash_commands"):
            request = SocketModeRequest(type=str(message["type"]), envelope_id=envelope_id, payload=payload)
            bolt = AsyncBoltRequest(mode="socket_mode", body=payload, headers=build_headers(request))
            if not await self._dispatch(bolt, f"envelope {envelope_id}"):
                log.warning("slack %s: envelope %s not acked; Slack will redeliver it", self.account, envelope_id)
                return
        else:
            kind = message.get("type")
            log.warning("slack %s: skipped malformed envelope %s (type %r)", self.account, envelope_id, kind)
        await self._ack(envelope_id)

    async def _ack(self, envelope_id: str) -> None:
        """Ack on the current connection; if there is none, Slack sends the envelope again on the next one."""
        import aiohttp

        try:
            if self._socket is None:
                raise ConnectionError("Socket Mode is stopped")
            await self._socket.send(json.dumps({"envelope_id": envelope_id}))
        except (ConnectionError, aiohttp.ClientError) as error:
            log.warning(
                "slack %s: envelope %s not acked (%s); Slack will redeliver it", self.account, envelope_id, error
            )

    async def _http_request(self, request: web.Request) -> web.Response:
        from aiohttp import web
        from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request

        self.health.heard()
        bolt = await to_bolt_request(request)
        outcome = _HandOver()
        if not await self._dispatch(bolt, "an HTTP request", outcome):
            return web.Response(status=500)  # Slack retries; the journal drops what was recorded after all
        if outcome.response is None or outcome.response.status >= 500:
            return web.Response(status=200)  # unreadable: acknowledged so that Slack does not send it again
        return await to_aiohttp_response(outcome.response)

    async def _dispatch(self, bolt: AsyncBoltRequest, what: str, outcome: _HandOver | None = None) -> bool:
        """Run one request through Bolt. False only when the gateway could not take what it carried (so it must not
        be acknowledged); a request Bolt or this adapter cannot read is logged and counts as handled."""
        assert self.app is not None
        outcome = outcome or _HandOver()
        token = _HAND_OVER.set(outcome)
        try:
            outcome.response = await self.app.async_dispatch(bolt)
        except Exception as error:
            log.warning("slack %s: skipped unreadable %s: %r", self.account, what, error)
            return True
        finally:
            _HAND_OVER.reset(token)
        if outcome.failed:
            return False
        if outcome.response.status >= 500:
            log.warning("slack %s: skipped %s that could not be handled", self.account, what)
        return True

    async def _error(self, error: Exception, body: dict[str, Any]) -> None:
        log.warning("slack %s: an event could not be handled: %r", self.account, error)

    # --- inbound: events ------------------------------------------------------------------------------------------

    async def _other_event(self, body: dict[str, Any]) -> None:
        event = body.get("event")
        log.debug("slack %s: ignored event %r", self.account, event.get("type") if isinstance(event, dict) else None)

    async def _event(self, body: dict[str, Any]) -> None:
        try:
            message = self._inbound(body)
        except (ValidationError, TypeError, ValueError, KeyError, AttributeError) as error:
            log.warning("slack %s: skipped a malformed event: %r", self.account, error)
            return
        if message is None:
            return
        key = f"{message.peer.kind}:{message.peer.id}:{message.message_id}"
        if not self._seen.add(key):
            log.debug("slack %s: second delivery of %s dropped", self.account, message.message_id)
            return
        assert self._on_message is not None
        try:
            what = f"slack {self.account}: handing over message {message.message_id}"
            await within(self._on_message(message), ACK_BUDGET_SECONDS, what, self._late)
        except BaseException:
            self._seen.discard(key)  # not recorded: the redelivery must get through
            outcome = _HAND_OVER.get()
            if outcome is not None:
                outcome.failed = True
            raise

    async def _action(self, ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        try:
            events = self._actions(body)
        except (ValidationError, TypeError, ValueError, KeyError, AttributeError) as error:
            log.warning("slack %s: skipped a malformed button click: %r", self.account, error)
            return
        assert self._on_action is not None
        for event in events:
            try:
                what = f"slack {self.account}: a click on {event.message_id}"
                notice = await within(self._on_action(event), NOTICE_BUDGET_SECONDS, what, self._late)
                if notice:  # only the clicker sees it
                    channel = await self._channel(
                        ChatTarget(channel=self.channel, account=self.account, peer=event.peer)
                    )
                    await self._api().chat_postEphemeral(channel=channel, user=event.sender_id, text=notice)
            except Exception:
                log.exception("slack %s: a click on %s could not be handled", self.account, event.message_id)
