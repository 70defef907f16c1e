"""python-telegram-bot as the adapter uses it: the bot, a status-keeping transport, time periods, a quieter log."""

from __future__ import annotations

import logging
import warnings
from datetime import timedelta
from typing import Any

from telegram.ext import ExtBot

from channels.telegram.constants import ALLOWED_UPDATES
from channels.telegram_request import AiohttpRequest


def _quiet_bad_json(record: logging.LogRecord) -> bool:
    """PTB logs every answer that is not JSON (a wrong api_base_url's 404 page) as an ERROR with a traceback; the
    error it raises says the same, so the record is shown only at DEBUG."""
    if not record.getMessage().startswith("Can not load invalid JSON data"):
        return True
    record.levelno, record.levelname = logging.DEBUG, "DEBUG"
    return logging.getLogger().isEnabledFor(logging.DEBUG)


logging.getLogger("telegram.request.BaseRequest").addFilter(_quiet_bad_json)


def _seconds(owner: object, attribute: str) -> float | None:
    """A PTB time period (a retry_after, a duration) in seconds, whichever type this PTB gives it as."""
    with warnings.catch_warnings():  # PTB 22 warns about int vs timedelta on access; both are handled
        warnings.simplefilter("ignore")
        value = getattr(owner, attribute, None)
    if value is None:
        return None
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


class _StatusRequest(AiohttpRequest):
    """An AiohttpRequest that remembers the HTTP status of its last answer: PTB raises InvalidToken for 401 and 404
    alike, and a start tells a refused token from a wrong URL by it."""

    last_status: int | None = None

    async def do_request(self, *args: Any, **kwargs: Any) -> tuple[int, bytes]:
        status, body = await super().do_request(*args, **kwargs)
        self.last_status = status
        return status, body


class _Bot(ExtBot[None]):
    async def raw_updates(self, offset: int, timeout: int) -> Any:
        """getUpdates without parsing: one malformed update must not hide the others (or block the offset)."""
        # The one private PTB call (`Bot._post`): the public `do_api_request` warns when asked for a method the Bot
        # has, and `get_updates` parses every update. tests/project/test_private_apis.py fails if PTB changes `_post`.
        data = {"offset": offset, "timeout": timeout, "allowed_updates": ALLOWED_UPDATES}
        return await self._post("getUpdates", data, read_timeout=timeout + 10)

    async def send_message_id(self, chat_id: int | str, text: str, **parameters: Any) -> int:
        """sendMessage with the parameters `send_message` takes, answering only the sent message's id: its answer is
        not made into a `Message` (about half the CPU of a send). The same request (None values left out), the same
        rate limiter and the same errors, all through `_post` as `send_message` goes."""
        result = await self._post("sendMessage", {"chat_id": chat_id, "text": text, **parameters})
        return int(result["message_id"])

    async def edit_text(self, chat_id: int | str, message_id: int, text: str, **parameters: Any) -> None:
        """editMessageText with the parameters `edit_message_text` takes, its answer not made into a `Message` (a
        streamed answer's preview is edited many times)."""
        await self._post("editMessageText", {"chat_id": chat_id, "message_id": message_id, "text": text, **parameters})
