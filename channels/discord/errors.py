"""Why a Discord account did not start: DiscordStartError, a failed login or first connection told straight."""

from __future__ import annotations

import aiohttp
import discord

from channels.accounts import DiscordAccount
from channels.start_errors import StartError, StartErrorKind, mask, why_unreachable


class DiscordStartError(StartError, RuntimeError):
    """The account could not connect: bad token, unreachable server, or no READY in time."""

    def __init__(self, reason: str, *, account: str = "default", kind: StartErrorKind = "failed") -> None:
        super().__init__("discord", account, kind, reason)


def start_failure(
    failure: BaseException, *, account: str, settings: DiscordAccount, api_base: str | None
) -> DiscordStartError:
    """A failed login told straight: a refused token (401), a wrong api_base_url (404), no answer at all."""
    api = settings.api_base_url or "https://discord.com"
    if isinstance(failure, discord.LoginFailure):  # discord.py's word for a 401 from GET /users/@me
        fix = (
            "reset it in the Discord developer portal (Bot, Reset Token) and set it as "
            f"channels.discord.accounts.{account}.token"
        )
        return DiscordStartError(f"the token was refused (401): {fix}", account=account, kind="refused")
    if isinstance(failure, discord.HTTPException) and failure.status == 404:
        reason = f"api_base_url {api} answered 404 to GET /users/@me: check api_base_url"
        return DiscordStartError(reason, account=account, kind="not_found")
    why = why_unreachable(failure)
    if isinstance(failure, discord.HTTPException | aiohttp.ClientConnectionError | OSError) and why is not None:
        return DiscordStartError(f"cannot reach {api} ({why})", account=account, kind="unreachable")
    # The very first gateway connection failed: name both servers, either may be wrong.
    where = f"{api_base or 'Discord'} / {settings.gateway_url or 'the default gateway'}"
    reason = mask(f"could not connect to {where}: {type(failure).__name__}: {failure}", [settings.token])
    return DiscordStartError(reason, account=account)
