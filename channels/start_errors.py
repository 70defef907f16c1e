"""Why a channel account could not start, as one line naming the account and the likely fix; never its secrets."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Literal

from routing.errors import ChannelError

__all__ = [
    "StartError",
    "StartErrorKind",
    "mask",
    "not_found",
    "refused",
    "start_error",
    "unreachable",
    "why_unreachable",
]

# refused: the platform refused the token (401, invalid_auth); not_found: the URL answered 404 (a wrong api_base_url);
# unreachable: no answer at all (refused connection, unknown host, timeout, TLS); failed: anything else.
StartErrorKind = Literal["refused", "not_found", "unreachable", "failed"]

_TOKEN_IN_URL = re.compile(r"/bot[^/\s]+/")  # a Bot API URL carries the Telegram token in its path
# What a failed connection says, in aiohttp's, asyncio's and the resolver's words, and how to say it.
_CAUSES: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(
            r"Name or service not known|nodename nor servname|name resolution|No address associated|getaddrinfo"
            r"|ClientConnectorDNSError|gaierror",
            re.IGNORECASE,
        ),
        "no such host: the name does not resolve",
    ),
    (re.compile(r"Connect call failed|Connection refused|ConnectionRefused", re.IGNORECASE), "connection refused"),
    (re.compile(r"Timeout|timed out|TimedOut", re.IGNORECASE), "timed out"),
    (re.compile(r"certificate|SSLError|\[SSL|TLS"), "TLS failed"),
    (re.compile(r"Network is unreachable|No route to host", re.IGNORECASE), "network unreachable"),
    (re.compile(r"Connection reset|Server disconnected|ServerDisconnected", re.IGNORECASE), "connection dropped"),
)
_CONNECTION_TYPES = (ConnectionError, TimeoutError, OSError)


class StartError(ChannelError):
    """A channel account could not start. `str()` is the line to show: "telegram/main: the token was refused …";
    `kind` says how the gateway retries it (a refused token only at the long end of the backoff)."""

    def __init__(self, channel: str, account: str, kind: StartErrorKind, reason: str) -> None:
        self.channel = channel
        self.account = account
        self.kind: StartErrorKind = kind
        self.reason = reason
        super().__init__(f"{channel}/{account}: {reason}")


def mask(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with every secret, and the token in any Bot API URL path, replaced by ***."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return _TOKEN_IN_URL.sub("/bot***/", text)


def why_unreachable(error: BaseException | str) -> str | None:
    """A connection failure in a few words ("connection refused", "no such host …", "timed out"); None when `error`
    (or its causes) is not one."""
    seen: set[int] = set()
    current: BaseException | str | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        text = current if isinstance(current, str) else f"{type(current).__name__}: {current}"
        for pattern, words in _CAUSES:
            if pattern.search(text):
                return words
        if isinstance(current, str):
            return None
        if isinstance(current, _CONNECTION_TYPES):
            return f"{type(current).__name__}: {current}" if str(current) else type(current).__name__
        current = current.__cause__ or current.__context__
    return None


def refused(channel: str, account: str, what: str, fix: str) -> StartError:
    """The platform refused the token: `what` it said ("401"), and where a good one comes from."""
    return StartError(channel, account, "refused", f"the token was refused ({what}): {fix}")


def not_found(channel: str, account: str, url: str, call: str) -> StartError:
    """The configured server answered 404 to the first call: the URL is wrong."""
    return StartError(channel, account, "not_found", f"api_base_url {url} answered 404 to {call}: check api_base_url")


def unreachable(channel: str, account: str, url: str, why: str) -> StartError:
    """No answer at all from `url`."""
    return StartError(channel, account, "unreachable", f"cannot reach {url} ({why})")


def start_error(
    channel: str, account: str, error: BaseException, *, url: str | None = None, secrets: Iterable[str] = ()
) -> StartError:
    """Any exception out of an adapter's start as a StartError: a StartError as it is, a connection failure as
    unreachable (at `url` when given), anything else as failed with its text, the secrets masked."""
    if isinstance(error, StartError):
        return error
    why = why_unreachable(error)
    if why is not None:
        return unreachable(channel, account, url or "the server", mask(why, secrets))
    text = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    return StartError(channel, account, "failed", mask(text, secrets)[:300])
