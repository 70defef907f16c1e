"""`bot run`: start the gateway on every configured channel and serve until SIGINT or SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys

from bot.app import App
from bot.assemble import SetupError, choose_model, model_refs
from bot.config import Config
from bot.gateway import Gateway
from channels.base import ChannelAdapter
from channels.console import ConsoleAdapter

log = logging.getLogger(__name__)


def model_problems(config: Config) -> list[str]:
    """One line per agent whose model cannot be reached, saying what to set."""
    problems = []
    for agent in config.agents:
        try:
            choose_model(config, model_refs(config, agent.id)[0])
        except SetupError as error:
            problems.append(f"agent {agent.id}: {error}")
    return problems


async def serve(app: App, *, grace_seconds: float = 10.0) -> int:
    """Run until a stop signal; exit status 0 after a clean stop, 1 when there is nothing to serve."""
    adapters, skipped = app.adapters()
    for line in skipped:
        print(line, file=sys.stderr)
    for line in model_problems(app.config):
        print(line, file=sys.stderr)
    if not adapters:
        print(
            "No channel to serve. Add an account under channels: in bindings.yaml (with its token in the "
            "environment); `bot chat` talks to an agent in the terminal without any channel.",
            file=sys.stderr,
        )
        return 1
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(signum, stopping.set)
    async with app.running(adapters, grace_seconds=grace_seconds) as gateway:
        names = ", ".join(f"{adapter.channel}/{adapter.account}" for adapter in adapters)
        print(f"Serving {names}. Ctrl-C stops.", file=sys.stderr)
        watcher = asyncio.create_task(_stop_when_input_ends(gateway, adapters, stopping))
        await stopping.wait()
        watcher.cancel()
        print("Stopping: letting running answers finish…", file=sys.stderr)
    return 0


async def _stop_when_input_ends(gateway: Gateway, adapters: list[ChannelAdapter], stopping: asyncio.Event) -> None:
    """When the only channels are consoles and their input has ended, stop once every answer is delivered."""
    if not adapters or not all(isinstance(adapter, ConsoleAdapter) for adapter in adapters):
        return
    for adapter in adapters:
        assert isinstance(adapter, ConsoleAdapter)
        await adapter.finished.wait()
    while not await gateway.idle():
        await asyncio.sleep(0.05)
    stopping.set()
