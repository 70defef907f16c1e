"""The account settings of the built-in chat platforms, apart from their adapters so that a config is checked
without importing any platform SDK."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from channels.base import AccountSettings

# The least silence, beyond a long poll's own `poll_timeout`, that counts as a stall of Telegram polling.
STALL_MARGIN = 2.0


def _refuse(model: str, key: str, value: object, message: str) -> ValidationError:
    """A validation error at `key` of the model (so a config check names that key and its line), not at the model."""
    error = PydanticCustomError("value_error", "{error}", {"error": message})
    return ValidationError.from_exception_data(model, [InitErrorDetails(type=error, loc=(key,), input=value)])


class TelegramAccount(AccountSettings):
    """`channels.telegram.accounts.<id>`: the bot token, and how updates arrive (long polling unless told otherwise)."""

    token: str = Field(min_length=1, repr=False)
    mode: Literal["polling", "webhook"] = "polling"
    poll_timeout: int = Field(default=30, ge=0, le=50)  # seconds one getUpdates is held open by Telegram
    webhook_url: str | None = None  # the public HTTPS address Telegram posts to
    webhook_secret: str | None = Field(default=None, repr=False)  # X-Telegram-Bot-Api-Secret-Token
    webhook_listen: str = "127.0.0.1"
    webhook_port: int = Field(default=8443, ge=0, le=65535)
    rate_limit: bool = True  # keep within Telegram's 30 messages/s and 20/min per group (off only to measure)

    @model_validator(mode="after")
    def _webhook_complete(self) -> TelegramAccount:
        if self.mode == "webhook" and not (self.webhook_url and self.webhook_secret):
            raise ValueError("mode webhook needs webhook_url and webhook_secret")
        return self

    @model_validator(mode="after")
    def _stall_longer_than_a_poll(self) -> TelegramAccount:
        # Refused, not raised in silence or only warned about: a long poll with nothing to say is healthy for all of
        # poll_timeout, so a shorter stall_seconds would tear down every quiet connection; what the file says must be
        # what the bot does. (A webhook does not poll: there it is only the silence before Telegram is asked.)
        least = self.poll_timeout + STALL_MARGIN
        if self.mode == "polling" and self.stall_seconds < least:
            raise _refuse(
                type(self).__name__,
                "stall_seconds",
                self.stall_seconds,
                f"must be at least {least:g} (poll_timeout {self.poll_timeout} + {STALL_MARGIN:g}) when polling: "
                "a long poll with nothing to deliver lasts poll_timeout seconds and is no stall; raise stall_seconds "
                "or lower poll_timeout",
            )
        return self


class DiscordAccount(AccountSettings):
    """`channels.discord.accounts.<id>`: the bot token, and where the servers are (the real Discord unless set).

    `api_base_url` is the server root (`/api/v10` is appended); `gateway_url` the full WebSocket URL."""

    token: str
    gateway_url: str | None = None
    ready_timeout: float = Field(default=30.0, gt=0)  # how long start() waits for READY
    # After READY, discord.py waits this long for each guild's GUILD_CREATE before it calls itself ready.
    guild_ready_timeout: float = Field(default=2.0, gt=0)
    # A reconnect storm: more than `storm_reconnects` new gateway connections within `storm_minutes` puts the account
    # in `degraded` and spaces further attempts with exponential backoff and jitter.
    storm_reconnects: int = Field(default=5, ge=1)
    storm_minutes: float = Field(default=10.0, gt=0)
    # Gateway shards (Discord's `shard_count`): each one a connection of its own, and, with several `bot run`
    # processes on one database, a listener one process holds at a time (channels/discord/adapter.py `ingress_keys`).
    shard_count: int = Field(default=1, ge=1)


class SlackAccount(AccountSettings):
    """`channels.slack.accounts.<id>`: a bot token, and Socket Mode (an app token) or HTTP Events (a signing secret)."""

    bot_token: SecretStr  # xoxb-...
    mode: Literal["socket", "http"] = "socket"
    app_token: SecretStr | None = None  # xapp-..., for Socket Mode
    signing_secret: SecretStr | None = None  # for HTTP mode: every request's signature is checked with it
    # HTTP mode's listener. Slack only posts to https, so a TLS proxy sits in front: loopback by default.
    http_host: str = "127.0.0.1"
    http_port: int = Field(default=3000, ge=0, le=65535)
    http_path: str = "/slack/events"
    ping_interval: float = Field(default=10, gt=0)  # Socket Mode keep-alive

    @model_validator(mode="after")
    def _credentials_for_mode(self) -> SlackAccount:
        if self.mode == "socket" and not (self.app_token and self.app_token.get_secret_value()):
            raise ValueError("Socket Mode needs app_token (an xapp-... app-level token with connections:write)")
        if self.mode == "http" and not (self.signing_secret and self.signing_secret.get_secret_value()):
            raise ValueError("HTTP mode needs signing_secret (Basic Information > App Credentials)")
        if not self.http_path.startswith("/"):
            raise ValueError("http_path must start with /")
        return self
