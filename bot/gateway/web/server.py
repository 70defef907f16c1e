"""The web side of `bot run` (the Control UI and WebChat) on aiohttp.web: logging in by a secret link, and the guard
every request passes (the session cookie, a CSRF token on every state-changing request, a strict
Content-Security-Policy and no caching of pages)."""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web

from bot.approvals.text import shown_command
from bot.config.web import WEB_CHANNEL, WebSettings, host_port, web_url
from bot.gateway.web.api import ApiRoutes
from bot.gateway.web.auth import COOKIE, SESSION_SECONDS, Login, Logins
from bot.gateway.web.chat import ChatPages
from bot.gateway.web.control import ControlPages
from bot.gateway.web.hooks import HookRoutes
from bot.gateway.web.pages import WebParts, see_other
from bot.gateway.web.render import markdown_html, moment, tokens

if TYPE_CHECKING:
    import jinja2

__all__ = ["WebServer"]

log = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
MAX_BODY = 25 * 1024 * 1024  # a message with its files
# No inline script or style, nothing from another origin: a message that slipped HTML in could run nothing.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
}
OPEN_PATHS = frozenset({"/", "/login"})  # reached before logging in (the rest answer 401 / go to the login page)


class WebServer:
    """Serves the pages on `settings.listen` between `start()` and `stop()`; `url` is where, once started, and
    `link()` the login link (the first login's, the operator's when `web.tokens` names nobody)."""

    def __init__(self, settings: WebSettings, state_dir: Path, parts: WebParts) -> None:
        assert settings.listen is not None
        self.settings = settings
        self.parts = parts
        self.logins = Logins(settings, state_dir)
        self.host, self.port = host_port(settings.listen)
        self.url: str | None = None
        self._runner: web.AppRunner | None = None
        self._templates: jinja2.Environment | None = None

    def link(self) -> str:
        """The login link of the first login (bot.gateway.web.auth.Logins.link)."""
        return self.logins.link(self.url or "")

    async def start(self) -> None:
        """Bind and listen; OSError when the address is taken or not this machine's."""
        app = web.Application(middlewares=[self._guard], client_max_size=MAX_BODY)
        app.router.add_get("/", self._home)
        app.router.add_post("/login", self._login)
        app.router.add_post("/logout", self._logout)
        app.router.add_static("/static", HERE / "static", append_version=False)
        ChatPages(self).routes(app.router)
        ControlPages(self).routes(app.router)
        ApiRoutes(self).routes(app.router)
        HookRoutes(self).routes(app.router)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        try:
            site = web.TCPSite(runner, self.host, self.port)
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        port = runner.addresses[0][1] if runner.addresses else self.port  # the one taken, for port 0
        self.url = web_url(self.host, port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # --- what every page uses --------------------------------------------------------------------------------------

    def owner(self, login: Login) -> bool:
        """Whether `login` is an owner now (the config's owners of the moment)."""
        return self.parts.decisions.owns(WEB_CHANNEL, login.name)

    def agents(self) -> list[str]:
        return [agent.id for agent in self.parts.decisions.config.agents]

    def page(
        self, request: web.Request, template: str, *, title: str, status: int = 200, **context: Any
    ) -> web.Response:
        """`template` rendered for the person logged in (or nobody, on the login page)."""
        login: Login | None = request.get("login")
        owner = login is not None and self.owner(login)
        context.update(title=title, login=login, owner=owner, csrf=request.get("csrf", ""), agents=self.agents())
        html = self.templates().get_template(template).render(path=request.path, **context)
        return web.Response(text=html, content_type="text/html", status=status)

    def templates(self) -> jinja2.Environment:
        if self._templates is None:
            import jinja2  # with the first page, not with the bot

            environment = jinja2.Environment(
                loader=jinja2.FileSystemLoader(HERE / "templates"),
                autoescape=True,
                undefined=jinja2.StrictUndefined,
                trim_blocks=True,
                lstrip_blocks=True,
            )
            # `shown`: a command as every approval surface shows it (invisible and control characters escaped).
            environment.filters.update(
                markdown=markdown_html, moment=moment, tokens=tokens, shown=lambda text: shown_command(text).text
            )
            self._templates = environment
        return self._templates

    # --- the guard ---------------------------------------------------------------------------------------------------

    @web.middleware
    async def _guard(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        """Who is logged in (their cookie), a CSRF token on every request that changes something, and the security
        headers on every answer."""
        try:
            response = await self._checked(request, handler)
        except web.HTTPException as error:  # aiohttp's own (404, 405, a body too large): with the headers too
            _secured(error.headers, request)
            raise
        _secured(response.headers, request)
        return response

    async def _checked(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        cookie = request.cookies.get(COOKIE)
        login = self.logins.by_cookie(cookie)
        if login is not None and cookie is not None:
            request["login"], request["csrf"] = login, self.logins.csrf_for(login, cookie)
        if request.path.startswith(("/static/", "/v1/", "/hooks/")) or request.path in OPEN_PATHS:
            return await handler(request)  # the API and webhooks check their own keys and signatures
        if login is None:
            if request.method == "GET" and "text/html" in request.headers.get("Accept", ""):
                return see_other("/")
            message = "Log in first: open the bot's login link."
            return self.page(request, "error.html", title="Not logged in", status=401, message=message)
        if request.method not in ("GET", "HEAD"):
            sent = request.headers.get("X-CSRF-Token")
            if sent is None and request.content_type in ("application/x-www-form-urlencoded", "multipart/form-data"):
                sent = (await request.post()).get("_csrf")  # type: ignore[assignment]
            if not isinstance(sent, str) or not hmac.compare_digest(sent, request["csrf"]):
                log.warning("web: %s %s without a valid CSRF token refused", request.method, request.path)
                message = "This form has expired: reload the page."
                return self.page(request, "error.html", title="Refused", status=403, message=message)
        return await handler(request)

    # --- logging in --------------------------------------------------------------------------------------------------

    async def _home(self, request: web.Request) -> web.StreamResponse:
        if request.get("login") is None:
            return self.page(request, "login.html", title="Log in")
        return see_other(f"/chat/{self.parts.decisions.config.default_agent}")

    async def _login(self, request: web.Request) -> web.StreamResponse:
        """The link's secret (posted by the login page from the link's fragment, or pasted) for a session cookie."""
        form = await request.post()
        token = form.get("token")
        login = self.logins.by_token(token) if isinstance(token, str) else None
        if login is None:
            log.warning("web: a login with a wrong secret was refused")
            return self.page(request, "login.html", status=401, title="Log in", refused=True)
        response = see_other("/")
        response.set_cookie(
            COOKIE, self.logins.cookie_for(login), max_age=SESSION_SECONDS, httponly=True, samesite="Strict",
            secure=self.settings.allow_remote, path="/",
        )  # fmt: skip
        log.info("web: %s logged in", login.identity)
        return response

    async def _logout(self, request: web.Request) -> web.StreamResponse:
        response = see_other("/")
        response.del_cookie(COOKIE, path="/")
        return response


def _secured(headers: Any, request: web.Request) -> None:
    for name, value in HEADERS.items():
        headers.setdefault(name, value)
    if not request.path.startswith("/static/"):
        headers.setdefault("Cache-Control", "no-store")
