"""The loopback channel: a minimal HTTP bridge (long-polled updates in, JSON calls out) for tests,
benchmarks and custom front ends. Updates are acknowledged only after the gateway has recorded them."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Literal

import httpx
from pydantic import Field, ValidationError

from channels.base import (
    AccountSettings,
    ActionEvent,
    Capabilities,
    ChatTarget,
    InboundMessage,
    OnAction,
    OnMessage,
    OutboundMessage,
    TextOnly,
)

log = logging.getLogger(__name__)

CAPABILITIES = Capabilities(
    buttons=True, edit=True, delete=True, reactions=True, max_text_length=4000, markup="markdown"
)


class LoopbackAccount(AccountSettings):
    """`channels.loopback.accounts.<id>`: where the bridge listens. Open to everyone and not streamed, unless set."""

    dm_policy: Literal["pairing", "allowlist", "open", "disabled"] = "open"
    streaming: Literal["off", "partial"] = "off"  # a bridge usually wants whole answers; `partial` streams edits
    url: str
    poll_timeout: float = Field(default=10, gt=0)


class LoopbackAdapter(TextOnly):
    """Polls `GET {url}/updates?offset=N&timeout=S` and calls `POST {url}/<method>` to act in a chat."""

    channel = "loopback"
    capabilities = CAPABILITIES
    bot_username: str | None = None

    def __init__(self, account: str, settings: LoopbackAccount, client: httpx.AsyncClient | None = None) -> None:
        self.account = account
        self.settings = settings
        self._client = client or httpx.AsyncClient(timeout=httpx.Timeout(settings.poll_timeout + 10))
        self._own_client = client is None
        self._task: asyncio.Task[None] | None = None
        self._offset = 0

    async def start(self, on_message: OnMessage, on_action: OnAction) -> None:
        self._task = asyncio.create_task(self._poll(on_message, on_action), name=f"loopback:{self.account}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._own_client:
            await self._client.aclose()

    async def _poll(self, on_message: OnMessage, on_action: OnAction) -> None:
        backoff = 0.5
        while True:
            try:
                response = await self._client.get(
                    f"{self.settings.url}/updates",
                    params={"offset": self._offset, "timeout": self.settings.poll_timeout},
                )
                response.raise_for_status()
                updates = response.json().get("updates", [])
                backoff = 0.5
            except (httpx.HTTPError, ValueError) as error:
                log.warning("loopback %s: polling failed (%s); retrying in %.1fs", self.account, error, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 30)
                continue
            for update in updates:
                await self._dispatch(update, on_message, on_action)

    async def _dispatch(self, update: Any, on_message: OnMessage, on_action: OnAction) -> None:
        """Hand one update to the gateway; a bad one is logged and skipped, never fatal."""
        try:
            update_id = int(update["update_id"])
        except (KeyError, TypeError, ValueError):
            log.warning("loopback %s: skipped an update without a numeric update_id", self.account)
            return
        try:
            if "message" in update:
                payload = {"channel": self.channel, "account": self.account, **update["message"]}
                await on_message(InboundMessage.model_validate(payload))
            elif "action" in update:
                payload = {"channel": self.channel, "account": self.account, **update["action"]}
                await on_action(ActionEvent.model_validate(payload))
            else:
                log.warning("loopback %s: skipped update %d of an unknown type", self.account, update_id)
        except (ValidationError, TypeError) as error:
            log.warning("loopback %s: skipped malformed update %d: %s", self.account, update_id, error)
        # Acknowledged only now: the gateway has recorded it (or it was unusable), so a crash before
        # this point means the bridge delivers it again and the journal drops the duplicate.
        self._offset = max(self._offset, update_id + 1)

    async def _call(self, method: str, body: dict[str, Any]) -> dict[str, Any]:
        response = await self._client.post(f"{self.settings.url}/{method}", json=body)
        response.raise_for_status()
        result = response.json()
        return result if isinstance(result, dict) else {}

    async def send(self, target: ChatTarget, message: OutboundMessage) -> str | None:
        body = {"target": target.model_dump(mode="json"), "message": message.model_dump(mode="json")}
        result = await self._call("send", body)
        return str(result["message_id"]) if result.get("message_id") is not None else None

    async def edit(self, target: ChatTarget, message_id: str, message: OutboundMessage) -> None:
        body = {"target": target.model_dump(mode="json"), "message_id": message_id, "message": message.model_dump()}
        await self._call("edit", body)

    async def delete(self, target: ChatTarget, message_id: str) -> None:
        await self._call("delete", {"target": target.model_dump(mode="json"), "message_id": message_id})

    async def react(self, target: ChatTarget, message_id: str, emoji: str) -> None:
        body = {"target": target.model_dump(mode="json"), "message_id": message_id, "emoji": emoji}
        await self._call("react", body)

    async def typing(self, target: ChatTarget) -> None:
        await self._call("typing", {"target": target.model_dump(mode="json")})
