"""WebChat's pages: an agent's chat (its messages as the bot sent them, Markdown rendered safely), sending a message
with files, tapping a button, the stream of what changes (Server-Sent Events) and downloading what the bot sent.
Everything a person says goes through the WebChat account (channels.web) into the journal like any message."""

from __future__ import annotations

import asyncio
import json
import logging
import urllib.parse
from typing import TYPE_CHECKING, Any

from aiohttp import web
from aiohttp.web_request import FileField

from bot.gateway.web.pages import Site, see_other
from channels.web import ChatEvent, PageMessage, Upload, WebChannel
from routing.errors import ChannelError

if TYPE_CHECKING:
    from bot.gateway.web.auth import Login

__all__ = ["ChatPages"]

log = logging.getLogger(__name__)

KEEPALIVE_SECONDS = 15.0  # a comment line on an idle stream, so proxies keep it open


class ChatPages:
    """The chat routes of `server`."""

    def __init__(self, server: Site) -> None:
        self.server = server

    def routes(self, router: web.UrlDispatcher) -> None:
        router.add_get("/chat/{agent}", self.page)
        router.add_post("/chat/{agent}/send", self.send)
        router.add_post("/chat/{agent}/click", self.click)
        router.add_get("/chat/{agent}/events", self.events)
        router.add_get("/chat/{agent}/files/{file}", self.file)

    def _chat(self, request: web.Request) -> tuple[WebChannel, Login]:
        chat = self.server.parts.chats().get(request.match_info["agent"])
        if chat is None:
            raise web.HTTPNotFound(text="No such agent.")
        return chat, request["login"]

    async def page(self, request: web.Request) -> web.StreamResponse:
        chat, login = self._chat(request)
        return self.server.page(
            request, "chat.html", title=f"Chat with {chat.account}", agent=chat.account,
            messages=chat.shown(login.name), notice=request.query.get("notice"),
        )  # fmt: skip

    async def send(self, request: web.Request) -> web.StreamResponse:
        """A message (text and files) from the page; files above the account's media limit are refused whole."""
        chat, login = self._chat(request)
        text, files = await _message_form(request, chat.settings.media.max_bytes, chat.settings.media.max_files)
        if text.strip() or files:
            try:
                await chat.say(login.name, text.strip(), name=login.name, files=tuple(files))
            except ChannelError:  # starting or stopping: nothing was journaled
                raise web.HTTPServiceUnavailable(text="The bot is starting or stopping: send it again.") from None
        return _done(request, chat.account)

    async def click(self, request: web.Request) -> web.StreamResponse:
        chat, login = self._chat(request)
        form = await request.post()
        message_id, value = form.get("message_id"), form.get("value")
        if not isinstance(message_id, str) or not isinstance(value, str):
            raise web.HTTPBadRequest(text="A click names a message and a button.")
        try:
            notice = await chat.click(login.name, message_id, value, name=login.name)
        except ChannelError as error:
            notice = str(error)
        return _done(request, chat.account, notice)

    async def events(self, request: web.Request) -> web.StreamResponse:
        """The person's chat as Server-Sent Events (`chat`: {kind, id, html}) until the page goes: every message it
        holds (nothing said between the page's rendering and this stream is missed), then what changes."""
        chat, login = self._chat(request)
        csrf = request["csrf"]
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"})
        await response.prepare(request)
        queue = chat.watch(login.name)
        try:
            await response.write(b": connected\n\n")
            while True:
                try:
                    async with asyncio.timeout(KEEPALIVE_SECONDS):
                        event = await queue.get()
                except TimeoutError:
                    await response.write(b": still here\n\n")
                    continue
                data = json.dumps({"kind": event.kind, "id": event.message.id, "html": self._html(event, chat, csrf)})
                await response.write(f"event: chat\ndata: {data}\n\n".encode())
        except ConnectionResetError:  # the page went
            pass
        finally:
            chat.unwatch(login.name, queue)
        return response

    async def file(self, request: web.Request) -> web.StreamResponse:
        chat, login = self._chat(request)
        found = chat.download_file(login.name, request.match_info["file"])
        if found is None:
            raise web.HTTPNotFound(text="No such file.")
        path, name = found
        quoted = urllib.parse.quote(name)
        headers = {"Content-Disposition": f"attachment; filename*=UTF-8''{quoted}"}
        return web.FileResponse(path, headers=headers)

    def _html(self, event: ChatEvent, chat: WebChannel, csrf: str) -> str:
        if event.kind == "gone":
            return ""
        return message_html(self.server, event.message, chat.account, csrf)


def message_html(server: Site, shown: PageMessage, agent: str, csrf: str) -> str:
    """One message as the chat page shows it (the `message` macro of _message.html)."""
    macro: Any = server.templates().get_template("_message.html").module
    return str(macro.message(shown, agent, csrf))


def _done(request: web.Request, agent: str, notice: str | None = None) -> web.StreamResponse:
    """The answer to a form: for the page's script, the notice as JSON; without a script, back to the chat page."""
    if request.headers.get("X-CSRF-Token") is not None:
        return web.json_response({"notice": notice})
    query = f"?{urllib.parse.urlencode({'notice': notice})}" if notice else ""
    return see_other(f"/chat/{agent}{query}")


async def _message_form(request: web.Request, max_bytes: int, max_files: int) -> tuple[str, list[Upload]]:
    """The text and files of a posted message (the whole body is held to MAX_BODY by the server)."""
    form = await request.post()
    text = form.get("text")
    files: list[Upload] = []
    for field in form.getall("files", []):
        if not isinstance(field, FileField) or not field.filename:
            continue
        data = field.file.read(max_bytes + 1)
        if len(data) > max_bytes:
            raise web.HTTPRequestEntityTooLarge(max_size=max_bytes, actual_size=len(data))
        files.append(Upload(field.filename, field.content_type, data))
    if len(files) > max_files:
        raise web.HTTPRequestEntityTooLarge(max_size=max_files, actual_size=len(files))
    return (text if isinstance(text, str) else ""), files
