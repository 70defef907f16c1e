"""`http_api` and `webhooks`: other programs as senders. An OpenAI-compatible API whose keys are principals like any
person, and webhooks whose signed bodies start a turn that answers in a configured chat. Both are served on the web
listener (`web.listen`)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from bot.config.web import LoginName, distinct, long_secret

__all__ = ["API_CHANNEL", "HOOK_PREFIX", "ApiKey", "HookDelivery", "HttpApiSettings", "Webhook"]

API_CHANNEL = "http"  # the channel of the API: a key is `http:<name>`
HOOK_PREFIX = "hook"  # a webhook's run acts for `hook:<name>`


class ApiKey(BaseModel):
    """One entry of `http_api.keys`: a program that calls the API with `key` (a ${VAR}) as `http:<name>`, a non-owner
    unless `owner` names one of `owners`; `agent`, when set, is the one agent it may call."""

    model_config = ConfigDict(extra="forbid")

    name: LoginName = Field(
        description="The key's name, 1 to 40 of a-z, 0-9, `_` and `-`: a program calling with it is `http:<name>`."
    )
    key: SecretStr = Field(
        description="The secret sent as `Authorization: Bearer <key>`, written as `${VAR}`; at least 16 characters, "
        "and each key's its own."
    )
    agent: str | None = Field(default=None, description="The one agent this key may see and call; none: every agent.")
    owner: str | None = Field(
        default=None,
        description="`<channel>:<user id>` of one of `owners`: the key acts as that owner; none: a non-owner.",
    )

    _long = field_validator("key")(long_secret)

    @property
    def identity(self) -> str:
        return f"{API_CHANNEL}:{self.name}"


class HttpApiSettings(BaseModel):
    """`http_api`: `POST /v1/chat/completions` and `GET /v1/models` for `keys`. A tool call that needs approval is
    asked as usual (the answer says it waits), or with `approvals: refuse` refused at once."""

    model_config = ConfigDict(extra="forbid")

    keys: list[ApiKey] = Field(
        default_factory=list,
        description="The programs that may call the API, each with its own key; none: every request is refused (401).",
    )
    approvals: Literal["ask", "refuse"] = Field(
        default="ask",
        description="A tool call that needs approval: `ask`, asked as usual (the answer says it waits); `refuse`, "
        "refused at once.",
    )
    requests_per_minute: int = Field(
        default=60, gt=0, description="Requests per key per minute; more are answered 429 with Retry-After."
    )
    max_body_bytes: int = Field(
        default=1_000_000, gt=0, description="The largest request body, in bytes; a larger one is answered 413."
    )
    timeout_seconds: float = Field(
        default=600.0, gt=0, description="The longest, in seconds, a request waits for its answer."
    )

    @field_validator("keys")
    @classmethod
    def _distinct(cls, value: list[ApiKey]) -> list[ApiKey]:
        distinct("key", [key.name for key in value], "secret", [key.key for key in value])
        return value


class HookDelivery(BaseModel):
    """Where a webhook's answer goes: a channel account's chat (`to`: `<kind>:<id>`, e.g. `direct:4242`)."""

    model_config = ConfigDict(extra="forbid")

    channel: str = Field(description="The channel of the chat the answer goes to, such as `telegram`.")
    account: str = Field(default="default", description="The channel account that sends the answer.")
    to: str = Field(description="The chat: `<kind>:<id>`, kind `direct`, `group` or `channel` (e.g. `direct:4242`).")

    @field_validator("to")
    @classmethod
    def _peer(cls, value: str) -> str:
        kind, _, chat = value.partition(":")
        if kind not in ("direct", "group", "channel") or not chat:
            raise ValueError("must be <kind>:<id>, kind direct, group or channel (e.g. direct:4242)")
        return value


class Webhook(BaseModel):
    """One entry of `webhooks`: `POST /hooks/<name>` signed with `secret` (HMAC-SHA256 of the body in
    `X-Signature-256: sha256=…`, or `Authorization: Bearer <secret>`) starts a turn of `agent` whose prompt is
    `template` with the body (fenced as untrusted) at `{body}`; its answer goes to `deliver`. It acts for
    `hook:<name>`, a non-owner, unless `owner` names one of `owners`."""

    model_config = ConfigDict(extra="forbid")

    name: LoginName = Field(
        description="The webhook's name, 1 to 40 of a-z, 0-9, `_` and `-`: its address is `POST /hooks/<name>` and "
        "its runs act for `hook:<name>`."
    )
    secret: SecretStr = Field(
        description="The shared secret, written as `${VAR}`, at least 16 characters: a request carries an "
        "HMAC-SHA256 of its body made with it (`X-Signature-256: sha256=…`) or `Authorization: Bearer <secret>`; "
        "without it the request is answered 401 and runs nothing."
    )
    agent: str | None = Field(
        default=None,
        description="The agent whose turn the webhook starts, in its own session `agent:<agent>:hook:<name>`; none: "
        "the default agent.",
    )
    deliver: HookDelivery = Field(description="The chat the turn's answer goes to.")
    template: str = Field(
        default="A webhook ({name}) sent this:\n{body}",
        description="The prompt: `{body}` (required) is replaced by the JSON body, fenced as untrusted content, and "
        "`{name}` by the webhook's name.",
    )
    owner: str | None = Field(
        default=None,
        description="`<channel>:<user id>` of one of `owners`: the turn acts for that owner; none: for `hook:<name>`, "
        "a non-owner.",
    )
    max_body_bytes: int = Field(
        default=256_000, gt=0, description="The largest request body, in bytes; a larger one is answered 413."
    )

    _long = field_validator("secret")(long_secret)

    @field_validator("template")
    @classmethod
    def _has_body(cls, value: str) -> str:
        if "{body}" not in value:
            raise ValueError("must say where the body goes: {body}")
        return value


def distinct_webhooks(value: list[Webhook]) -> list[Webhook]:
    """`webhooks` as written, unless two share a name (one address, `POST /hooks/<name>`) or a secret (a sender of
    one could start the other)."""
    distinct("webhook", [hook.name for hook in value], "secret", [hook.secret for hook in value])
    return value
