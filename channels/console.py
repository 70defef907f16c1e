"""The console channel: one person at a terminal, as a channel account `bot run` can serve like any other."""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import getpass
import io
import itertools
import logging
import os
import stat
import sys
import time
from collections.abc import AsyncIterator
from typing import TextIO

from channels.base import (
    CONSOLE,
    AccountSettings,
    ChatTarget,
    InboundMessage,
    OnAction,
    OnMessage,
    OutboundMessage,
    TextOnly,
)
from routing import Peer

log = logging.getLogger(__name__)

EXIT_WORDS = frozenset({"/exit", "/quit"})  # typed alone on a line, they end the console's input as Ctrl-D does


def console_user() -> str:
    """The name of the person at the terminal (their login), or `local`."""
    with contextlib.suppress(Exception):
        return getpass.getuser() or "local"
    return "local"


class ConsoleAdapter(TextOnly):
    """Reads one message per line from `source`; replies are printed to `out`. End of input (or `/exit`, `/quit`)
    stops reading."""

    channel = "console"
    capabilities = CONSOLE
    settings = AccountSettings(dm_policy="open")  # the person at the terminal runs the bot
    bot_username: str | None = None

    def __init__(
        self, account: str = "default", *, source: TextIO | None = None, out: TextIO | None = None,
        user: str | None = None,
    ) -> None:  # fmt: skip
        self.account = account
        self.source = source or sys.stdin
        self.out = out or sys.stdout
        self.user = user or console_user()
        self.finished = asyncio.Event()  # set at end of input
        self._task: asyncio.Task[None] | None = None
        self._ids = itertools.count(1)
        self._session = time.time_ns()  # message ids stay unique across runs, so the journal never drops one

    async def start(self, on_message: OnMessage, on_action: OnAction) -> None:
        self._task = asyncio.create_task(self._read(on_message), name="console")

    async def _read(self, on_message: OnMessage) -> None:
        try:
            async for line in _lines(self.source):
                text = line.rstrip("\n")
                if not text.strip():
                    continue
                if text.strip().lower() in EXIT_WORDS:  # the person leaves: as the end of input
                    break
                message = InboundMessage(
                    channel=self.channel,
                    account=self.account,
                    peer=Peer("direct", self.user),
                    sender_id=self.user,
                    sender_name=self.user,
                    text=text,
                    message_id=f"{self._session}-{next(self._ids)}",
                )
                await on_message(message)
        finally:
            self.finished.set()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def _print(self, text: str) -> None:
        self.out.write(text + "\n")
        self.out.flush()

    async def send(self, target: ChatTarget, message: OutboundMessage) -> str | None:
        number = str(next(self._ids))
        self._print(message.text)
        for row in message.buttons:
            self._print("  " + "  ".join(f"[{button.label}]" for button in row))
        return number

    async def edit(self, target: ChatTarget, message_id: str, message: OutboundMessage) -> None:
        self._print(f"(edited {message_id}) {message.text}")

    async def delete(self, target: ChatTarget, message_id: str) -> None:
        self._print(f"(deleted {message_id})")

    async def react(self, target: ChatTarget, message_id: str, emoji: str) -> None:
        self._print(f"({emoji} on {message_id})")

    async def typing(self, target: ChatTarget) -> None:
        return None


async def _lines(source: TextIO) -> AsyncIterator[str]:
    """The lines of `source` as they come. A terminal or a pipe is read when the loop sees it readable, so a stop
    while nobody types ends at once: a read blocked in a thread would hold the process until the next line. Any
    other source (a file, a StringIO) is read line by line in a thread."""
    try:
        descriptor = source.fileno()
        readable = stat.S_ISFIFO(os.fstat(descriptor).st_mode) or os.isatty(descriptor)
    except (OSError, ValueError, io.UnsupportedOperation):
        readable = False
    if not readable:
        while line := await asyncio.to_thread(source.readline):
            yield line
        return
    loop = asyncio.get_running_loop()
    chunks: asyncio.Queue[bytes] = asyncio.Queue()

    def read() -> None:  # called as the loop sees the input readable, so that the read never blocks the loop
        try:
            chunk = os.read(descriptor, 65536)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""  # an input that fails is an input that ended
        chunks.put_nowait(chunk)
        if not chunk:  # at the end the input stays readable: nothing more to look at
            loop.remove_reader(descriptor)

    decoder = codecs.getincrementaldecoder(source.encoding or "utf-8")(errors="replace")
    pending = ""
    loop.add_reader(descriptor, read)
    try:
        while True:
            chunk = await chunks.get()
            pending += decoder.decode(chunk, final=not chunk)
            *lines, pending = pending.split("\n")
            for line in lines:
                yield line + "\n"
            if not chunk:  # the end of input: what is left, unterminated, is a line too
                if pending:
                    yield pending
                return
    finally:
        loop.remove_reader(descriptor)
