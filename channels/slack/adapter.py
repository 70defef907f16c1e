"""SlackAdapter, the ChannelAdapter of one Slack app: its capabilities, and starting and stopping its transport."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from channels.accounts import SlackAccount
from channels.backoff import REAL_TIME, Timing
from channels.base import Capabilities, OnAction, OnMessage
from channels.health import ChannelHealth
from channels.slack.files import file_origins
from channels.slack.inbound import Inbound, Seen
from channels.slack.sending import MAX_CAPTION, MAX_UPLOAD_BYTES, Sending
from channels.slack.socket_mode import SocketMode
from channels.slack.web_api import DEFAULT_API_BASE_URL, REFUSED, describe, web_client
from channels.start_errors import StartError, mask, not_found, refused, unreachable, why_unreachable

if TYPE_CHECKING:  # the SDK is imported only when a Slack account starts
    from aiohttp import web
    from slack_bolt.app.async_app import AsyncApp
    from slack_sdk.web.async_client import AsyncWebClient

log = logging.getLogger("channels.slack")  # one logger for the channel, whichever module logs

CAPABILITIES = Capabilities(
    buttons=True,
    edit=True,
    delete=True,
    reactions=True,
    threads=True,
    polls=False,  # Slack has no native polls
    files=True,
    max_upload_bytes=MAX_UPLOAD_BYTES,
    max_caption_length=MAX_CAPTION,
    max_text_length=3000,
    markup="slack-mrkdwn",
    streaming=True,
    edit_interval_seconds=1.0,
)


class SlackAdapter(Inbound, Sending):
    """One Slack app in one workspace. Events are handed to the gateway before they are acknowledged."""

    channel = "slack"
    capabilities = CAPABILITIES

    def __init__(
        self,
        account: str,
        settings: SlackAccount,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        timing: Timing = REAL_TIME,
    ) -> None:
        self.account = account
        self.settings = settings
        self._sleep = sleep  # how a rate-limited Web API call waits before its retry
        self._timing = timing  # Socket Mode's reconnect waits and their jitter
        self.bot_username: str | None = None
        self.bot_user_id: str | None = None
        self.bot_id: str | None = None
        self.team_id: str | None = None
        self.http_port: int | None = None  # HTTP mode: the port actually bound (http_port 0 picks one)
        self.client: AsyncWebClient | None = None
        self.app: AsyncApp | None = None
        self._socket: SocketMode | None = None
        self._http: web.AppRunner | None = None
        self._on_message: OnMessage | None = None
        self._on_action: OnAction | None = None
        self._seen = Seen()
        self._dm_channels: dict[str, str] = {}  # user id -> the D... channel of the bot's DM with them
        self._message_channels: OrderedDict[str, str] = OrderedDict()  # ts of a message we sent -> its channel
        self._late: set[asyncio.Task[None]] = set()  # hand-overs still running after their ack
        self._mention: re.Pattern[str] | None = None
        self._file_origins = file_origins(settings.api_base_url)  # where the bot token may go for a file
        secrets = [settings.bot_token, settings.app_token, settings.signing_secret]
        self.health = ChannelHealth(
            self.channel, account, secrets=[secret.get_secret_value() for secret in secrets if secret is not None]
        )

    # --- start and stop -----------------------------------------------------------------------------------------

    async def start(self, on_message: OnMessage, on_action: OnAction) -> None:
        from slack_bolt.app.async_app import AsyncApp

        self._on_message, self._on_action = on_message, on_action
        self.client = web_client(self.settings, self.health, self._sleep)
        try:
            auth = await self.client.auth_test()
        except Exception as error:
            raise self._start_error(error) from error
        self.bot_username = auth.get("user")
        self.bot_user_id = auth.get("user_id")
        self.bot_id = auth.get("bot_id")
        self.team_id = auth.get("team_id")
        self._mention = re.compile(rf"<@{re.escape(self.bot_user_id)}(?:\|[^>]*)?>") if self.bot_user_id else None
        http = self.settings.mode == "http"
        secret = self.settings.signing_secret.get_secret_value() if self.settings.signing_secret else ""
        self.app = AsyncApp(
            client=self.client,
            signing_secret=secret,
            request_verification_enabled=http,
            # Listeners run before the ack: the gateway has recorded the message when Slack hears back.
            process_before_response=True,
            logger=logging.getLogger("channels.slack.bolt"),
        )
        self.app.event("message")(self._event)
        self.app.event("app_mention")(self._event)
        self.app.event(re.compile(".*"))(self._other_event)
        self.app.action(re.compile(".*"))(self._action)
        self.app.error(self._error)
        if http:
            await self._start_http()
        else:
            await self._start_socket()
        log.info("slack %s: connected as %s (%s) in team %s", self.account, self.bot_username, self.mode, self.team_id)

    def _start_error(self, error: Exception) -> StartError:
        """A failed auth.test told straight: a refused bot token, a wrong api_base_url (404), no answer at all."""
        from slack_sdk.errors import SlackApiError

        root = self.settings.api_base_url or DEFAULT_API_BASE_URL
        if isinstance(error, SlackApiError):
            code = error.response.get("error") if isinstance(error.response.data, dict) else None
            if code in REFUSED:
                fix = f"copy the Bot User OAuth Token (xoxb-…) into channels.slack.accounts.{self.account}.bot_token"
                return refused("slack", self.account, str(code), fix)
            if error.response.status_code == 404:
                return not_found("slack", self.account, root, "auth.test")
        why = why_unreachable(error)
        if why is not None:
            return unreachable("slack", self.account, root, why)
        secrets = [self.settings.bot_token.get_secret_value()]
        return StartError("slack", self.account, "failed", mask(f"auth.test: {describe(error)}", secrets))

    @property
    def mode(self) -> str:
        return "Socket Mode" if self.settings.mode == "socket" else "HTTP Events"

    async def _start_socket(self) -> None:
        assert self.client is not None and self.settings.app_token is not None
        self._socket = SocketMode(
            self.account,
            self.client,
            self.settings.app_token.get_secret_value(),
            self.health,
            self._envelope,
            ping_interval=self.settings.ping_interval,
            stall_seconds=self.settings.stall_seconds,
            timing=self._timing,
        )
        await self._socket.start()  # connected (the health says so) once Slack says hello

    async def _start_http(self) -> None:
        from aiohttp import web

        app = web.Application()
        app.router.add_post(self.settings.http_path, self._http_request)
        self._http = web.AppRunner(app, access_log=None, shutdown_timeout=2.0)
        await self._http.setup()
        await web.TCPSite(self._http, self.settings.http_host, self.settings.http_port).start()
        self.http_port = int(self._http.addresses[0][1])
        self.health.set("connected")

    async def stop(self) -> None:
        if self._socket is not None:
            await self._socket.close()
            self._socket = None
        if self._http is not None:
            await self._http.cleanup()
            self._http = None
        for task in list(self._late):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                async with asyncio.timeout(5):
                    await task
        self.health.set("stopped")
