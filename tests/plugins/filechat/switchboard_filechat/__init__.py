"""A Switchboard plugin from outside its source: the `filechat` channel (one message per line of a file in, each
answer a JSON line appended to another file) and the `shout` tool."""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel

from channels.base import (
    AccountSettings,
    Capabilities,
    ChannelAdapter,
    ChannelPlugin,
    ChannelSetup,
    ChatTarget,
    InboundMessage,
    OnAction,
    OnMessage,
    OutboundMessage,
)
from routing import Peer
from tools.base import Tool, ToolContext, ToolResult, json_result
from tools.registry import ToolSetup


class FileChatAccount(AccountSettings):
    """`channels.filechat.accounts.<id>`: the file to read messages from, and the file answers go to."""

    dm_policy: Literal["pairing", "allowlist", "open", "disabled"] = "open"
    streaming: Literal["off", "partial"] = "off"
    inbox: str
    outbox: str
    sender: str = "reader"


class FileChatAdapter:
    """Delivers each line of `inbox` as a direct message from `sender`, once, at start."""

    channel = "filechat"
    capabilities = Capabilities()
    bot_username: str | None = None

    def __init__(self, account: str, settings: FileChatAccount) -> None:
        self.account = account
        self._settings = settings
        self._ids = itertools.count(1)

    @property
    def settings(self) -> AccountSettings:
        return self._settings

    async def start(self, on_message: OnMessage, on_action: OnAction) -> None:
        lines = Path(self._settings.inbox).read_text().splitlines()
        for number, text in enumerate(lines, 1):
            sender = self._settings.sender
            await on_message(
                InboundMessage(
                    channel=self.channel, account=self.account, peer=Peer("direct", sender),
                    sender_id=sender, sender_name=sender, text=text, message_id=str(number),
                )
            )  # fmt: skip

    async def stop(self) -> None:
        return None

    async def send(self, target: ChatTarget, message: OutboundMessage) -> str | None:
        line = json.dumps({"chat": target.peer.id, "text": message.text})
        await asyncio.to_thread(_append, Path(self._settings.outbox), line)
        return str(next(self._ids))

    async def edit(self, target: ChatTarget, message_id: str, message: OutboundMessage) -> None:
        raise NotImplementedError("filechat cannot edit")

    async def delete(self, target: ChatTarget, message_id: str) -> None:
        raise NotImplementedError("filechat cannot delete")

    async def react(self, target: ChatTarget, message_id: str, emoji: str) -> None:
        raise NotImplementedError("filechat cannot react")

    async def typing(self, target: ChatTarget) -> None:
        return None


def _append(path: Path, line: str) -> None:
    with path.open("a") as file:
        file.write(line + "\n")


def _adapter(account: str, settings: Any, setup: ChannelSetup) -> ChannelAdapter:
    return FileChatAdapter(account, settings)


channel = ChannelPlugin(FileChatAccount, _adapter)


class ShoutArguments(BaseModel):
    """What to shout."""

    text: str


class Shout(Tool):
    name: ClassVar[str] = "shout"
    label: ClassVar[str] = "Shout"
    description: ClassVar[str] = "Repeat a text in capitals."
    parameters: ClassVar[type[BaseModel]] = ShoutArguments

    async def execute(self, call_id: str, args: ShoutArguments, ctx: ToolContext) -> ToolResult:
        return json_result({"shouted": args.text.upper()})


def tools(setup: ToolSetup) -> list[Tool]:
    return [Shout()]
