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

    name: LoginName
    key: SecretStr
    agent: str | None = None
    owner: str | None = None

    _long = field_validator("key")(long_secret)

    @property
    def identity(self) -> str:
        return f"{API_CHANNEL}:{self.name}"


class HttpApiSettings(BaseModel):
    """`http_api`: `POST /v1/chat/completions` and `GET /v1/models` for `keys`. A tool call that needs approval is
    asked as usual (the answer says it waits), or with `approvals: refuse` refused at once."""

    model_config = ConfigDict(extra="forbid")

    keys: list[ApiKey] = Field(default_factory=list)
    approvals: Literal["ask", "refuse"] = "ask"
    requests_per_minute: int = Field(default=60, gt=0)  # per key; more is answered 429 with Retry-After
    max_body_bytes: int = Field(default=1_000_000, gt=0)
    timeout_seconds: float = Field(default=600.0, gt=0)  # the longest a request waits for its answer

    @field_validator("keys")
    @classmethod
    def _distinct(cls, value: list[ApiKey]) -> list[ApiKey]:
        distinct("key", [key.name for key in value], "secret", [key.key for key in value])
        return value


class HookDelivery(BaseModel):
    """Where a webhook's answer goes: a channel account's chat (`to`: `<kind>:<id>`, e.g. `direct:4242`)."""

    model_config = ConfigDict(extra="forbid")

    channel: str
    account: str = "default"
    to: str

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

    name: LoginName
    secret: SecretStr
    agent: str | None = None
    deliver: HookDelivery
    template: str = "A webhook ({name}) sent this:\n{body}"
    owner: str | None = None
    max_body_bytes: int = Field(default=256_000, gt=0)

    _long = field_validator("secret")(long_secret)

    @field_validator("template")
    @classmethod
    def _has_body(cls, value: str) -> str:
        if "{body}" not in value:
            raise ValueError("must say where the body goes: {body}")
        return value
