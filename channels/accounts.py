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

    token: str = Field(
        min_length=1,
        repr=False,
        description="The bot token from @BotFather, best written as `${TELEGRAM_BOT_TOKEN}` (a token written into "
        "the file draws a warning).",
    )
    mode: Literal["polling", "webhook"] = Field(
        default="polling",
        description="How updates arrive: `polling`, long polling (getUpdates); `webhook`, Telegram posts them to "
        "`webhook_url` (needs `webhook_url` and `webhook_secret`).",
    )
    poll_timeout: int = Field(
        default=30, ge=0, le=50, description="Seconds one getUpdates long poll is held open by Telegram (0 to 50)."
    )
    webhook_url: str | None = Field(
        default=None, description="Webhook mode: the public HTTPS address Telegram posts updates to."
    )
    webhook_secret: str | None = Field(
        default=None,
        repr=False,
        description="Webhook mode: the secret Telegram sends in X-Telegram-Bot-Api-Secret-Token, which admits a "
        "post; written as `${VAR}`.",
    )
    webhook_listen: str = Field(
        default="127.0.0.1",
        description="Webhook mode: the address the bot's webhook listener binds (loopback: a TLS proxy in front "
        "forwards Telegram's posts).",
    )
    webhook_port: int = Field(
        default=8443, ge=0, le=65535, description="Webhook mode: the listener's port (0: a free one)."
    )
    rate_limit: bool = Field(
        default=True,
        description="Keep within Telegram's 30 messages a second and 20 a minute per group, waiting out any 429; "
        "turn off only to measure.",
    )

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

    token: str = Field(
        description="The bot token from the developer portal, best written as `${DISCORD_BOT_TOKEN}` (a token "
        "written into the file draws a warning)."
    )
    gateway_url: str | None = Field(
        default=None,
        description="The full WebSocket URL of the gateway, only for a proxy or a test fake; none: the gateway "
        "Discord names.",
    )
    ready_timeout: float = Field(
        default=30.0,
        gt=0,
        description="Seconds a start waits for the gateway's READY before the account counts as not started.",
    )
    guild_ready_timeout: float = Field(
        default=2.0,
        gt=0,
        description="After READY, seconds discord.py waits for each server's GUILD_CREATE before it calls itself "
        "ready.",
    )
    storm_reconnects: int = Field(
        default=5,
        ge=1,
        description="A reconnect storm: more than this many new gateway connections within `storm_minutes` make "
        "the account `degraded` and space further attempts with backoff and jitter.",
    )
    storm_minutes: float = Field(
        default=10.0, gt=0, description="The window, in minutes, in which `storm_reconnects` is counted."
    )
    # channels/discord/adapter.py `ingress_keys`: a shard's listener, held by one process at a time.
    shard_count: int = Field(
        default=1,
        ge=1,
        description="Gateway shards (Discord's `shard_count`), each a connection of its own; with several `bot run` "
        "processes on one database, each shard is served by one process at a time.",
    )


class SlackAccount(AccountSettings):
    """`channels.slack.accounts.<id>`: a bot token, and Socket Mode (an app token) or HTTP Events (a signing secret)."""

    bot_token: SecretStr = Field(description="The bot token, `xoxb-…`, written as `${SLACK_BOT_TOKEN}`.")
    mode: Literal["socket", "http"] = Field(
        default="socket",
        description="How events arrive: `socket`, Socket Mode (needs `app_token`); `http`, HTTP Events posted to "
        "the bot's listener (needs `signing_secret`).",
    )
    app_token: SecretStr | None = Field(
        default=None,
        description="Socket Mode: an app-level token with connections:write, `xapp-…`, written as `${VAR}`.",
    )
    signing_secret: SecretStr | None = Field(
        default=None,
        description="HTTP mode: the app's signing secret, written as `${VAR}`; every request's signature is checked "
        "with it.",
    )
    http_host: str = Field(
        default="127.0.0.1",
        description="HTTP mode: the address the listener binds; Slack posts only to https, so a TLS proxy sits in "
        "front, hence loopback.",
    )
    http_port: int = Field(default=3000, ge=0, le=65535, description="HTTP mode: the listener's port.")
    http_path: str = Field(
        default="/slack/events", description="HTTP mode: the path Slack posts events to; it starts with `/`."
    )
    ping_interval: float = Field(
        default=10, gt=0, description="Socket Mode: seconds between the keep-alive pings the bot sends."
    )

    @model_validator(mode="after")
    def _credentials_for_mode(self) -> SlackAccount:
        if self.mode == "socket" and not (self.app_token and self.app_token.get_secret_value()):
            raise ValueError("Socket Mode needs app_token (an xapp-... app-level token with connections:write)")
        if self.mode == "http" and not (self.signing_secret and self.signing_secret.get_secret_value()):
            raise ValueError("HTTP mode needs signing_secret (Basic Information > App Credentials)")
        if not self.http_path.startswith("/"):
            raise ValueError("http_path must start with /")
        return self
