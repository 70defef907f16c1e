"""`bot run`: start the gateway on every configured channel and serve until SIGINT or SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import sys
from collections.abc import Iterator, Sequence
from typing import TextIO

from bot.app import App
from bot.config.web import WEB_CHANNEL
from bot.gateway.channel_start import ChannelStarter
from bot.gateway.process import Gateway
from channels.base import ChannelAdapter
from channels.console import ConsoleAdapter

log = logging.getLogger(__name__)

# Objects a generation-0 collection may wait for (Python's default is 700). A turn holds its conversation's whole
# history, parsed, while it runs: several hundred objects per turn, more as conversations grow. With 700, young
# collections keep catching those short-lived objects alive and moving them to the oldest generation, and that
# triggers full collections of the whole heap ever more often (measured on bench/soak.py: 4 full collections per
# 3,000 messages at 10 turns per conversation, 22 at 100 turns, from 0.05 to 0.5 ms of CPU per message). With
# 10,000 they die young, as they should; the cost is at most that many objects waiting a little longer.
YOUNG_COLLECTION_THRESHOLD = 10_000


def serves_console(adapters: Sequence[ChannelAdapter], stdin: TextIO | None) -> bool:
    """Whether `bot run` serves the console: nothing else to serve, and a person at a terminal on stdin."""
    if adapters or stdin is None:
        return False
    try:
        return stdin.isatty()
    except ValueError:  # closed
        return False


async def serve(app: App) -> int:
    """Run until a stop signal; exit status 0 after a clean stop, 1 when there is nothing to serve (or every account
    failed to start on a refused token)."""
    adapters, skipped = app.adapters()
    for line in skipped:
        print(line, file=sys.stderr)
    # Agents without a usable model were reported by `bot run`'s validation (bot.config.settings.validate_config).
    platforms = [adapter for adapter in adapters if adapter.channel != WEB_CHANNEL]
    if serves_console(platforms, sys.stdin):
        what = "No channel could start" if skipped else "No channel is configured"
        print(
            f"{what}: serving the console here. Type a message; /exit or Ctrl-D stops (the bot's log shows warnings "
            "only, to keep it off the conversation). (`bot init` adds a Telegram, Discord or Slack account to "
            "bindings.yaml.)",
            file=sys.stderr,
        )
        root = logging.getLogger()
        if root.getEffectiveLevel() < logging.WARNING and root.getEffectiveLevel() != logging.DEBUG:
            root.setLevel(logging.WARNING)  # `-v` keeps every line
        adapters = [*adapters, ConsoleAdapter()]
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
    return await _serve(app, adapters, stopping)


async def _serve(app: App, adapters: list[ChannelAdapter], stopping: asyncio.Event) -> int:
    async with app.running(adapters) as gateway:
        if gateway.starter.all_refused():  # no account started and none will by waiting: say why and end
            for error in gateway.starter.failures.values():
                print(error, file=sys.stderr)
            print("No channel could start: every token was refused.", file=sys.stderr)
            return 1
        console = any(isinstance(adapter, ConsoleAdapter) for adapter in adapters)
        print(f"{serving_line(gateway.starter)}{'' if console else ' Ctrl-C stops.'}", file=sys.stderr)
        if gateway.web is not None:
            print(web_line(gateway.web.url or "", gateway.web.link(), sys.stderr), file=sys.stderr)
        if not app.config.owners:
            print(NO_OWNER, file=sys.stderr)
        if gateway.watch is not None:  # SIGHUP: read bindings.yaml again now
            with contextlib.suppress(NotImplementedError, AttributeError):
                asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, gateway.watch.request)
        watcher = asyncio.create_task(_stop_when_input_ends(gateway, adapters, stopping))
        with long_running_collector():  # once serving: the first poll does not wait for the collection it makes
            await stopping.wait()
        watcher.cancel()
        print("Stopping: letting running answers finish…", file=sys.stderr)
    return 0


def serving_line(starter: ChannelStarter) -> str:
    """What `bot run` says once every account was tried: the ones it serves, and the ones it is still trying, each
    with its one-line error (never one that failed called served)."""
    served = ", ".join(f"{channel}/{account}" for channel, account in starter.serving)
    trying = "; ".join(str(error) for error in starter.failures.values())
    if not trying:
        return f"Serving {served}."
    if served:
        return f"Serving {served}; still trying {trying}."
    return f"No channel started yet; still trying {trying}; retrying with backoff."


NO_OWNER = (
    "No owner yet: nobody on a platform may approve commands or use the owner-only tools. Send /whoami to the bot, "
    "then run `bot owners add <channel>:<id>` with the id it gives."
)


def web_line(url: str, link: str, out: TextIO) -> str:
    """Where the web pages are: with the login link at a terminal (a person is there to open it), else without its
    secret (the output of a service goes to its logs; `bot web url` prints the link)."""
    try:
        terminal = out.isatty()
    except ValueError:
        terminal = False
    if terminal:
        return f"Web: open {link} to log in (the link is a secret: whoever has it is logged in)."
    return f"Web: {url} (`bot web url` prints the login link)."


@contextlib.contextmanager
def long_running_collector() -> Iterator[None]:
    """The garbage collector set for a process that serves for days: what start-up built (modules, schemas, the
    config, the running gateway and its adapters) is frozen out of every collection, and young collections wait for
    YOUNG_COLLECTION_THRESHOLD objects. Both are undone at the end."""
    thresholds = gc.get_threshold()
    gc.collect()  # frozen garbage would never be freed
    gc.freeze()
    gc.set_threshold(YOUNG_COLLECTION_THRESHOLD, *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()


async def _stop_when_input_ends(gateway: Gateway, adapters: list[ChannelAdapter], stopping: asyncio.Event) -> None:
    """When the only channels are consoles (beside the web pages, which a person at the console started with it) and
    their input has ended, stop once every answer is delivered."""
    consoles = [adapter for adapter in adapters if isinstance(adapter, ConsoleAdapter)]
    if not consoles or len(consoles) != len([adapter for adapter in adapters if adapter.channel != WEB_CHANNEL]):
        return
    for console in consoles:
        await console.finished.wait()
    while not await gateway.idle():
        await asyncio.sleep(0.05)
    stopping.set()
