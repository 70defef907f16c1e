"""The attributes the adapter's parts share, declared once for the type checker (TelegramAdapter sets them)."""

from __future__ import annotations

from channels.accounts import TelegramAccount
from channels.base import OnAction, OnMessage
from channels.health import ChannelHealth
from channels.telegram.client import _Bot, _StatusRequest


class AdapterState:
    """The attributes of a TelegramAdapter that more than one of its parts (parsing, ingress, sending, files) uses;
    TelegramAdapter.__init__ gives each its value."""

    channel: str
    account: str
    settings: TelegramAccount
    bot: _Bot
    bot_username: str | None
    bot_id: int | None
    health: ChannelHealth
    _request: _StatusRequest
    _on_message: OnMessage | None
    _on_action: OnAction | None
