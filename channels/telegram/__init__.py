"""The Telegram channel on python-telegram-bot: long polling (or a webhook) in, Bot API calls out. Importing it
imports the SDK, which channels/builtins.py does only when a Telegram account starts."""

# The modules, one job each, import one another in one direction (no module imports this package's __init__):
# constants ← client ← limits; client ← state ← parsing ← ingress; state ← files ← sending; all of them ← adapter;
# sdk (python-telegram-bot itself) comes first.
# They all log as `channels.telegram`, so a filter on that logger keeps catching the whole channel.

from __future__ import annotations

from channels.telegram import sdk as _sdk  # noqa: F401  python-telegram-bot, before any module here imports it

# isort: split

from channels.accounts import TelegramAccount
from channels.telegram.adapter import TelegramAdapter
from channels.telegram.client import _Bot as _Bot  # tests/project/test_private_apis.py checks the one private PTB call
from channels.telegram.constants import CAPABILITIES, MAX_WEBHOOK_BODY, TelegramSendError
from channels.telegram.ingress import PollWatchdog
from channels.telegram.limits import TelegramRateLimiter
from channels.telegram.sending import chat_and_thread

__all__ = [
    "CAPABILITIES",
    "MAX_WEBHOOK_BODY",
    "PollWatchdog",
    "TelegramAccount",
    "TelegramAdapter",
    "TelegramRateLimiter",
    "TelegramSendError",
    "chat_and_thread",
]
