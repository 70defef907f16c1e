"""Webhooks in: `POST /hooks/<name>` signed with the webhook's secret (HMAC-SHA256 of the body, as GitHub sends it, or
a bearer secret) starts a turn of its agent whose prompt holds the body fenced as untrusted content, acting for
`hook:<name>` (a non-owner unless the config names an owner), journaled once per delivery id, answered in the
configured chat through the outbox. The answer is 202 as soon as the body is journaled."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
from typing import TYPE_CHECKING

from aiohttp import web

from bot.config.http_api import HOOK_PREFIX, Webhook
from bot.config.settings import user_ref
from channels.base import InboundMessage, Scheduled
from routing import Peer
from tools.untrusted import wrap_untrusted

if TYPE_CHECKING:
    from bot.gateway.web.pages import Site

__all__ = ["HookRoutes"]

log = logging.getLogger(__name__)

DELIVERY_HEADERS = ("X-GitHub-Delivery", "Idempotency-Key")


class HookRoutes:
    """The webhook route of `site`."""

    def __init__(self, site: Site) -> None:
        self.parts = site.parts

    def routes(self, router: web.UrlDispatcher) -> None:
        router.add_post("/hooks/{name}", self.receive)

    async def receive(self, request: web.Request) -> web.StreamResponse:
        config = self.parts.decisions.config
        name = request.match_info["name"]
        hook = next((hook for hook in config.webhooks if hook.name == name), None)
        if hook is None:
            return web.json_response({"error": "no such webhook"}, status=404)
        if (request.content_length or 0) > hook.max_body_bytes:
            return web.json_response({"error": f"the body is larger than {hook.max_body_bytes} bytes"}, status=413)
        body = await request.content.read(hook.max_body_bytes + 1)
        if len(body) > hook.max_body_bytes:
            return web.json_response({"error": f"the body is larger than {hook.max_body_bytes} bytes"}, status=413)
        if not _signed(hook, request, body):
            log.warning("webhook %s: a request with a wrong or missing signature was refused; nothing runs", name)
            return web.json_response({"error": "bad signature"}, status=401)
        try:
            data = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            return web.json_response({"error": "the body is not JSON"}, status=400)
        deliver = hook.deliver
        if not self.parts.running(deliver.channel, deliver.account):
            return web.json_response({"error": f"{deliver.channel}/{deliver.account} is not running"}, status=503)
        delivery = next((request.headers[header] for header in DELIVERY_HEADERS if request.headers.get(header)), None)
        message = _message(hook, data, config.owners, delivery, self.parts.decisions.router.default_agent)
        record = await self.parts.store.record_inbound(
            message.channel, message.account, f"{message.peer.kind}:{message.peer.id}", message.message_id,
            message.model_dump(mode="json"),
        )  # fmt: skip
        if record is None:
            log.info("webhook %s: delivery %s came before: not run again", name, delivery)
            return web.json_response({"status": "duplicate"}, status=200)
        await self.parts.accept(record.id, record.received, message)
        return web.json_response({"status": "accepted"}, status=202)


def _signed(hook: Webhook, request: web.Request, body: bytes) -> bool:
    """Whether the request carries the webhook's secret: an HMAC-SHA256 of the body (`X-Signature-256` or GitHub's
    `X-Hub-Signature-256`: `sha256=<hex>`) or `Authorization: Bearer <secret>`, compared in constant time."""
    secret = hook.secret.get_secret_value().encode()
    signature = request.headers.get("X-Signature-256") or request.headers.get("X-Hub-Signature-256")
    if signature is not None:
        expected = "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()
        return hmac.compare_digest(expected.encode(), signature.strip().encode())
    bearer = request.headers.get("Authorization", "")
    return bearer.startswith("Bearer ") and hmac.compare_digest(secret, bearer.removeprefix("Bearer ").strip().encode())


def _message(
    hook: Webhook, data: object, owners: list[str], delivery: str | None, default_agent: str
) -> InboundMessage:
    """The turn a delivery starts: in the configured chat, for the webhook's agent in its own session, its body
    fenced as untrusted inside the template."""
    deliver = hook.deliver
    kind, _, chat = deliver.to.partition(":")
    agent = hook.agent or default_agent
    owner = hook.owner is not None and str(user_ref(hook.owner)) in owners
    who = f"{HOOK_PREFIX}:{hook.name}"
    fenced = wrap_untrusted(json.dumps(data, ensure_ascii=False, indent=1), f"webhook {hook.name}")
    return InboundMessage(
        channel=deliver.channel,
        account=deliver.account,
        peer=Peer(kind, chat),
        sender_id=who,
        sender_name=f"webhook {hook.name}",
        text=hook.template.replace("{name}", hook.name).replace("{body}", fenced),
        message_id=f"{who}:{delivery or secrets.token_hex(8)}",
        scheduled=Scheduled(
            kind="webhook",
            job=hook.name,
            agent=agent,
            session_key=f"agent:{agent}:{HOOK_PREFIX}:{hook.name}",
            owner=owner,
            person=None if owner else who,
        ),
    )
