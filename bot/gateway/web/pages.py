"""What the web side's pages share: the parts of the gateway they read and change, the site they are served by (its
templates, who is an owner), and the answer to a form."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from aiohttp import web

if TYPE_CHECKING:
    import jinja2

    from agent.transcripts import Transcripts
    from bot.approvals.gate import Approvals
    from bot.gateway.web.auth import Login
    from bot.runs.decisions import Decisions
    from bot.scheduled.cron_book import CronBook
    from bot.store import Store
    from channels.base import InboundMessage
    from channels.health import HealthSnapshot
    from channels.http_api import ApiChannel
    from channels.web import WebChannel

__all__ = ["Site", "WebParts", "see_other"]


@dataclass
class WebParts:
    """What the pages read and change: the run decisions (the config of the moment, its owners), the store, the
    WebChat accounts (one per agent), approvals, the job book, the transcripts, the channels' health, the config
    file's validation as it stands on disk (a list of problems, empty when valid); for the API and webhooks, the API
    accounts, how a journaled turn starts and which channel accounts are served."""

    decisions: Decisions
    store: Store
    chats: Callable[[], Mapping[str, WebChannel]]
    approvals: Approvals
    jobs: CronBook
    transcripts: Transcripts
    health: Callable[[], list[HealthSnapshot]]
    validate: Callable[[], Awaitable[list[str]]]
    apis: Callable[[], Mapping[str, ApiChannel]]  # the API accounts, one per agent
    accept: Callable[[int, float, InboundMessage], Awaitable[None]]  # a journaled turn the bot starts (a webhook's)
    running: Callable[[str, str], bool]  # whether a channel account is served


class Site(Protocol):
    """The server as its pages see it (bot.gateway.web.server.WebServer)."""

    parts: WebParts

    def owner(self, login: Login) -> bool: ...

    def page(
        self, request: web.Request, template: str, *, title: str, status: int = 200, **context: Any
    ) -> web.Response: ...

    def templates(self) -> jinja2.Environment: ...


def see_other(location: str) -> web.Response:
    """A redirect after a form (303: the browser follows it with a GET)."""
    return web.Response(status=303, headers={"Location": location})
