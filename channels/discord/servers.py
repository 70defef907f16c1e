"""Points one client's discord.py at the configured servers: REST calls, gateway connections, interaction callbacks."""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import Iterator
from typing import Any

import aiohttp
import yarl
from discord.gateway import DiscordWebSocket
from discord.http import HTTPClient, Route
from discord.webhook.async_ import AsyncWebhookAdapter

from channels.health import ChannelHealth

API_PATH = "/api/v10"


# --- pointing the SDK at configured servers, per client --------------------------------------------------------
#
# discord.py reads its REST root from the class attribute `Route.BASE` and its gateway from
# `DiscordWebSocket.DEFAULT_GATEWAY`. Setting those would move every client in the process, so instead each
# adapter's HTTPClient rewrites the URLs it is about to use, and interaction callbacks (which go through the
# webhook adapter, not the HTTPClient) use a rewriting webhook adapter installed in the client's task context.


def _rewrite(url: str, api_base: str | None) -> str:
    if api_base is not None and url.startswith(Route.BASE):
        return api_base + url[len(Route.BASE) :]
    return url


def _local_route(route: Route, api_base: str | None) -> Route:
    url = _rewrite(route.url, api_base)
    if url == route.url:
        return route
    local = copy.copy(route)  # the bucket key (method + path) stays as it was; only where it goes changes
    local.url = url
    return local


class RoutedHTTPClient(HTTPClient):
    """discord.py's HTTPClient on the configured servers; every REST call and gateway connection is noted in
    `health`."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        api_base: str | None,
        gateway: str | None,
        *,
        health: ChannelHealth | None = None,
    ) -> None:
        super().__init__(loop)
        self._api_base = api_base
        self._gateway = yarl.URL(gateway) if gateway else None
        self._health = health

    async def request(self, route: Route, **kwargs: Any) -> Any:
        with _noted(self._health, f"{route.method} {route.path}"):
            return await super().request(_local_route(route, self._api_base), **kwargs)

    async def ws_connect(self, url: str, *, compress: int = 0) -> aiohttp.ClientWebSocketResponse:
        target = yarl.URL(url)
        if self._gateway is not None and target.host == DiscordWebSocket.DEFAULT_GATEWAY.host:
            # The default gateway (first connect, or after an invalidated session): ours instead, same query.
            target = self._gateway.with_query(target.query)
        try:
            return await super().ws_connect(str(target), compress=compress)
        except Exception as error:
            if self._health is not None:
                self._health.failed(f"gateway connection: {type(error).__name__}: {error}")
            raise


class RoutedWebhookAdapter(AsyncWebhookAdapter):
    def __init__(self, api_base: str | None, health: ChannelHealth | None = None) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self._api_base = api_base
        self._health = health

    async def request(self, route: Route, session: aiohttp.ClientSession, **kwargs: Any) -> Any:
        with _noted(self._health, f"{route.method} {route.path}"):
            return await super().request(_local_route(route, self._api_base), session, **kwargs)


@contextlib.contextmanager
def _noted(health: ChannelHealth | None, call: str) -> Iterator[None]:
    """A REST call's outcome in `health`: reached when it succeeds, its error remembered when it fails."""
    try:
        yield
    except Exception as error:
        if health is not None:
            health.failed(f"{call}: {type(error).__name__}: {error}")
        raise
    if health is not None:
        health.reached()
