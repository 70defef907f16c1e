"""The admin listener: `GET /healthz` (the channels' states) and `GET /metrics` (Prometheus' text format)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from bot.config.web import host_port
from bot.observe.metrics import Metrics, Readings

__all__ = ["AdminServer"]

log = logging.getLogger(__name__)


class AdminServer:
    """Serves `/healthz` and `/metrics` on `listen` (`host:port`; port 0 takes a free one) between `start()` and
    `stop()`; `read()` gives the gauges' and the channels' readings at each request. `address` is where it listens
    once started."""

    def __init__(self, listen: str, metrics: Metrics, read: Callable[[], Awaitable[Readings]]) -> None:
        self.host, self.port = host_port(listen)
        self.metrics = metrics
        self.read = read
        self.address: tuple[str, int] | None = None
        self._runner: web.AppRunner | None = None

    @property
    def serving(self) -> bool:
        return self._runner is not None

    async def start(self) -> None:
        """Bind and listen; OSError when the address is taken or not this machine's."""
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/metrics", self._metrics)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        try:
            await web.TCPSite(runner, self.host, self.port).start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        host, port = runner.addresses[0][:2]
        self.address = (str(host), int(port))
        shown = f"[{host}]" if ":" in str(host) else host
        log.info("admin listening on %s:%d", shown, port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _healthz(self, request: web.Request) -> web.Response:
        readings = await self.read()
        channels = [
            {"channel": channel, "account": account, "state": state}
            for (channel, account), state in sorted(readings.channels.items())
        ]
        work = {"running_turns": readings.running_turns, "outbox_backlog": readings.outbox_backlog}
        unhealthy = readings.unhealthy()
        if unhealthy:
            bad = [entry for entry in channels if (entry["channel"], entry["account"]) in unhealthy]
            body = {"status": "unhealthy", "unhealthy": bad, "channels": channels, **work}
            return web.json_response(body, status=503)
        return web.json_response({"status": "ok", "channels": channels, **work})

    async def _metrics(self, request: web.Request) -> web.Response:
        body = self.metrics.render(await self.read())
        response = web.Response(body=body)
        response.headers["Content-Type"] = CONTENT_TYPE_LATEST  # with its version and charset, as Prometheus reads it
        return response
