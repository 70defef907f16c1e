"""python-telegram-bot's HTTP transport on aiohttp: the same Bot API calls at a fraction of httpx's CPU per call, file
uploads streamed from disk, and file downloads streamed in chunks."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import re
from collections.abc import AsyncGenerator, Callable
from typing import IO, Any

import aiohttp
from telegram.error import NetworkError, TimedOut
from telegram.request import BaseRequest, RequestData

_TOKEN_IN_URL = re.compile(r"/bot[^/\s]+/")
DOWNLOAD_CHUNK = 64 * 1024  # bytes per chunk a download yields
CLOSE_SECONDS = 5.0  # how long `reset` waits for the old session to close before it opens the new one anyway

# A timeout as PTB passes it: seconds, None (no limit), or BaseRequest.DEFAULT_NONE ("not given: use your own").
# PTB spells that type ODVInput[float], but only in its private telegram._utils; `object` stands in for it.
Timeout = object


def given_or(timeout: Timeout, default: float | None) -> float | None:
    """`timeout` if the caller gave one, else `default`: the test PTB documents is `is BaseRequest.DEFAULT_NONE`;
    anything else that is not a number is "not given" too, as PTB's own HTTPXRequest reads its DefaultValues."""
    if timeout is BaseRequest.DEFAULT_NONE:
        return default
    if timeout is None:
        return None
    if isinstance(timeout, int | float):
        return float(timeout)
    return default


class AiohttpRequest(BaseRequest):
    """A BaseRequest over one aiohttp session with at most `pool_size` connections.

    Measured with 20 calls in flight, httpx spends about 1.8 ms of CPU per call and aiohttp about 0.16 ms
    (bench/telegram.py shows what that is worth per message). Errors never carry the token-bearing URL, neither in
    their text nor in a chained cause. A file handle given to PTB with `InputFile(..., read_file_handle=False)` is
    streamed from disk in 64 KiB pieces, from its start on every attempt (a rate-limited call is sent again).
    `on_success` hears of each call the server answered with a 2xx, `on_failure` of each that never got an answer
    (the error's text, without the token): the account's health.
    """

    def __init__(
        self,
        *,
        pool_size: int = 16,
        read_timeout: float | None = 5.0,
        write_timeout: float | None = 5.0,
        connect_timeout: float | None = 5.0,
        pool_timeout: float | None = 1.0,
        on_success: Callable[[], None] | None = None,
        on_failure: Callable[[str], None] | None = None,
    ) -> None:
        self._pool_size = pool_size
        self._on_success = on_success
        self._on_failure = on_failure
        self._read_timeout = read_timeout
        self._write_timeout = write_timeout
        self._connect_timeout = connect_timeout
        self._pool_timeout = pool_timeout
        self._session: aiohttp.ClientSession | None = None

    @property
    def read_timeout(self) -> float | None:
        return self._read_timeout

    async def initialize(self) -> None:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=self._pool_size)
            self._session = aiohttp.ClientSession(connector=connector, headers={"User-Agent": self.USER_AGENT})

    async def shutdown(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

    async def reset(self) -> None:
        """Throw the session and its connection pool away (a request still waiting on them ends) and open a new
        one: the way out of a connection that hangs without an error."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(CLOSE_SECONDS):
                await self.shutdown()
        self._session = None
        await self.initialize()

    async def do_request(
        self,
        url: str,
        method: str,
        request_data: RequestData | None = None,
        read_timeout: Timeout = BaseRequest.DEFAULT_NONE,
        write_timeout: Timeout = BaseRequest.DEFAULT_NONE,
        connect_timeout: Timeout = BaseRequest.DEFAULT_NONE,
        pool_timeout: Timeout = BaseRequest.DEFAULT_NONE,
    ) -> tuple[int, bytes]:
        session = self._live_session()
        read = given_or(read_timeout, self._read_timeout)
        write = given_or(write_timeout, self._write_timeout)
        connect = given_or(connect_timeout, self._connect_timeout)
        pool = given_or(pool_timeout, self._pool_timeout)
        timeout = aiohttp.ClientTimeout(
            # aiohttp has no write timeout of its own: the time to send counts against the read timeout
            sock_read=None if read is None else read + (write or 0),
            sock_connect=connect,
            connect=None if connect is None or pool is None else connect + pool,
        )
        with contextlib.ExitStack() as handles:
            try:
                async with session.request(
                    method, url, data=_body(request_data, handles), timeout=timeout, allow_redirects=False
                ) as response:
                    status, body = response.status, await response.read()
            except TimeoutError as error:
                raise self._failed(TimedOut(_without_token(f"{type(error).__name__}: {error}"))) from None
            except aiohttp.ClientError as error:
                raise self._failed(NetworkError(_without_token(f"aiohttp.{type(error).__name__}: {error}"))) from None
        if 200 <= status < 300 and self._on_success is not None:
            self._on_success()
        return status, body

    def _failed(self, error: NetworkError) -> NetworkError:
        if self._on_failure is not None:
            self._on_failure(error.message)
        return error

    async def stream(self, url: str, chunk_size: int = DOWNLOAD_CHUNK) -> AsyncGenerator[bytes, None]:
        """GET `url` and yield its body in chunks of at most `chunk_size` bytes, never the whole body at once;
        NetworkError (TimedOut when it stalls) without the token when the answer is not 200 or the connection fails."""
        session = self._live_session()
        timeout = aiohttp.ClientTimeout(sock_read=self._read_timeout, sock_connect=self._connect_timeout)
        try:
            async with session.get(url, timeout=timeout, allow_redirects=False) as response:
                if response.status != 200:
                    raise NetworkError(f"the file server answered HTTP {response.status} {response.reason or ''}")
                async for chunk in response.content.iter_chunked(chunk_size):
                    yield chunk
        except TimeoutError as error:
            raise TimedOut(_without_token(f"{type(error).__name__}: {error}")) from None
        except aiohttp.ClientError as error:
            raise NetworkError(_without_token(f"aiohttp.{type(error).__name__}: {error}")) from None

    def _live_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            raise RuntimeError("This AiohttpRequest is not initialized!")
        return self._session


def _body(request_data: RequestData | None, handles: contextlib.ExitStack) -> aiohttp.FormData | dict[str, str] | None:
    """Parameters as a form; with files, a multipart form (what the Bot API accepts either way). File handles are
    sent through handles of their own, closed with `handles`."""
    if request_data is None:
        return None
    if not request_data.contains_files:
        return request_data.json_parameters
    form = aiohttp.FormData(request_data.json_parameters)
    for name, upload in request_data.multipart_data.items():
        if isinstance(upload, tuple):
            filename, content, *rest = upload
            form.add_field(
                name, _from_start(content, handles), filename=filename, content_type=rest[0] if rest else None
            )
        else:
            form.add_field(name, upload)
    return form


def _from_start(content: Any, handles: contextlib.ExitStack) -> Any:
    """Bytes as they are; a file handle as a new handle on the same open file, rewound to its start. aiohttp closes
    a handle it sent, and a retried call sends the same file again: the caller's handle stays open (opening the
    path anew could meet another file put there since). The two share one position: one request at a time."""
    if not isinstance(content, io.IOBase):
        return content
    try:
        descriptor = content.fileno()
    except (OSError, io.UnsupportedOperation):  # an in-memory stream: rewind it
        content.seek(0)
        return content
    handle: IO[bytes] = handles.enter_context(os.fdopen(os.dup(descriptor), "rb"))
    handle.seek(0)
    return handle


def _without_token(text: str) -> str:
    """`text` with the token of any Bot API URL (`/bot<token>/`, `/file/bot<token>/`) in it replaced."""
    return _TOKEN_IN_URL.sub("/bot<token>/", text)
