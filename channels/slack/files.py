"""Files on Slack's side: where the bot token may go for a file, and streaming a file's bytes to and from Slack."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from channels.base import Attachment
from channels.slack.web_api import api_url
from routing.errors import ChannelError

if TYPE_CHECKING:  # the SDK is imported only when a Slack account starts
    import aiohttp

SLACK_FILE_HOST = ("https", "files.slack.com", 443)  # where url_private points; the only host besides the API's
CHUNK_BYTES = 64 * 1024
MAX_REDIRECTS = 5
REDIRECTS = {301, 302, 303, 307, 308}
_PORTS = {"http": 80, "https": 443}


def origin(url: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an http(s) URL; None for anything else."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in _PORTS or not parts.hostname:
        return None
    return parts.scheme, parts.hostname.lower(), port or _PORTS[parts.scheme]


def file_origins(api_base_url: str | None) -> frozenset[tuple[str, str, int]]:
    """The origins the bot token may be sent to for a file: Slack's file host (files.slack.com), `files.` + the API
    host (files.slack-gov.com for slack-gov.com), and the API host itself (where a proxy or a test fake serves
    files): all servers that already get the token or are Slack's own."""
    api = origin(api_url(api_base_url))
    if api is None:
        return frozenset({SLACK_FILE_HOST})
    return frozenset({SLACK_FILE_HOST, api, (api[0], f"files.{api[1]}", api[2])})


async def file_chunks(path: str) -> AsyncIterator[bytes]:
    """A file on disk, CHUNK_BYTES at a time."""
    import aiofiles

    async with aiofiles.open(path, "rb") as file:
        while chunk := await file.read(CHUNK_BYTES):
            yield chunk


def transfer_timeout() -> aiohttp.ClientTimeout:
    """No limit on a whole transfer (a large file takes its time), but on connecting and on each read."""
    import aiohttp

    return aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=120)


def refuse_download(response: aiohttp.ClientResponse, attachment: Attachment, what: str) -> None:
    """ChannelError (the response released) for an HTTP error, a redirect without a Location, or a web page instead
    of the file: Slack answers with its sign-in page when the token may not read files."""
    problem = None
    if response.status >= 300:
        problem = f"HTTP {response.status}"
    elif response.content_type == "text/html" and attachment.mime_type != "text/html":
        problem = "Slack answered with its sign-in page: the bot token needs the files:read scope"
    if problem is not None:
        response.release()
        raise ChannelError(f"{what} could not be downloaded: {problem}")
