"""`web`: the Control UI and WebChat that `bot run` serves: where it listens, whether it may face the network, and
who logs in with which secret link, as whom."""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, SecretStr, field_validator

__all__ = [
    "OPERATOR",
    "WEB_CHANNEL",
    "LoginName",
    "WebLogin",
    "WebSettings",
    "distinct",
    "host_port",
    "is_loopback",
    "long_secret",
    "web_url",
]

WEB_CHANNEL = "web"  # the channel name of WebChat: people who log in are `web:<name>`
OPERATOR = "operator"  # the login of the link `bot web url` prints when `web.tokens` names nobody: an owner
DEFAULT_LISTEN = "127.0.0.1:8765"
MIN_TOKEN = 16  # characters: a link's secret is guessed by nobody

_LOGIN_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,39}$")


def host_port(value: str) -> tuple[str, int]:
    """`host:port` (an IPv6 host in brackets: `[::1]:8765`) as the host and port to bind (port 0 takes a free one);
    ValueError names the expected shape. The web and admin listeners both read theirs with it."""
    host, _, port = value.strip().rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError("must be host:port, e.g. 127.0.0.1:8765, or off")
    return host, int(port)


def web_url(host: str, port: int) -> str:
    """Where pages listening on `host` and `port` are reached: `http://host:port` (an IPv6 host in brackets)."""
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def is_loopback(host: str) -> bool:
    """Whether `host` is reachable from this machine only (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _login_name(value: object) -> object:
    if isinstance(value, str) and not _LOGIN_NAME.match(value):
        raise ValueError("must be 1 to 40 of a-z 0-9 _ -, starting with a letter or digit")
    return value


LoginName = Annotated[str, BeforeValidator(_login_name)]  # a web login's, an API key's or a webhook's name


def distinct(what: str, names: list[str], secret: str, secrets: list[SecretStr]) -> None:
    """ValueError unless each `what` (a login, an API key) has a name and a `secret` of its own."""
    if len(set(names)) != len(names):
        raise ValueError(f"each {what} needs a name of its own")
    if len({value.get_secret_value() for value in secrets}) != len(secrets):
        raise ValueError(f"each {what} needs a {secret} of its own")


def long_secret(value: SecretStr) -> SecretStr:
    """A secret someone must present (a login link's, an API key, a webhook's): long enough that nobody guesses it."""
    if len(value.get_secret_value()) < MIN_TOKEN:
        raise ValueError(f"must be at least {MIN_TOKEN} characters (`openssl rand -hex 24` makes one)")
    return value


class WebLogin(BaseModel):
    """One entry of `web.tokens`: a person who logs in as `web:<name>` with the secret `token` (a ${VAR}), as an
    owner when `owner` names one of the config's `owners` (the same person on a platform), else as a non-owner."""

    model_config = ConfigDict(extra="forbid")

    name: LoginName = Field(
        description="The login's name, 1 to 40 of a-z, 0-9, `_` and `-`: the person is `web:<name>` to the bot."
    )
    token: SecretStr = Field(
        description="The secret of the login link, written as `${VAR}`; at least 16 characters (`openssl rand -hex "
        "24` makes one), and each login's its own."
    )
    owner: str | None = Field(
        default=None,
        description="`<channel>:<user id>` of one of `owners`: the login is that owner; none: a non-owner, like any "
        "stranger on a platform.",
    )

    _long = field_validator("token")(long_secret)

    @property
    def identity(self) -> str:
        """Who this login is to the bot: `web:<name>`."""
        return f"{WEB_CHANNEL}:{self.name}"


class WebSettings(BaseModel):
    """`web`: the Control UI and WebChat. `listen` is host:port (`off` turns both off); a host other than loopback
    needs `allow_remote: true` (and TLS in front: a reverse proxy). `tokens` name who logs in; with none, the one
    login is the operator's (an owner), whose link `bot web url` prints."""

    model_config = ConfigDict(extra="forbid")

    listen: str | None = Field(
        default=DEFAULT_LISTEN,
        description="`host:port` the web side listens on (the HTTP API and webhooks too; port 0 takes a free one); "
        "`off`: no web side.",
    )
    allow_remote: bool = Field(
        default=False,
        description="Whether `listen` may be an address other than loopback (then put TLS in front, a reverse "
        "proxy); the session cookie is then marked Secure.",
    )
    tokens: list[WebLogin] = Field(
        default_factory=list,
        description="Who logs in with which secret link, as whom; none: one login, the operator (`web:operator`, an "
        "owner), whose secret is made in the state directory and whose link `bot web url` prints.",
    )

    @field_validator("listen", mode="before")
    @classmethod
    def _listen(cls, value: object) -> object:
        if value is False or (isinstance(value, str) and value.strip().lower() in ("off", "false", "no")):
            return None
        if isinstance(value, str):
            host_port(value)
            return value.strip()
        return value

    @field_validator("tokens")
    @classmethod
    def _distinct(cls, value: list[WebLogin]) -> list[WebLogin]:
        names, secrets = [login.name for login in value], [login.token for login in value]
        distinct("login", names, "token", secrets)
        return value

    @property
    def on(self) -> bool:
        """Whether `bot run` serves the web side."""
        return self.listen is not None

    def owner_logins(self) -> list[str]:
        """The web identities that are owners: each login naming an owner, and the operator when no login is
        named (whoever can read the state directory, which holds its link, has the bot's files anyway)."""
        if not self.on:
            return []
        if not self.tokens:
            return [f"{WEB_CHANNEL}:{OPERATOR}"]
        return [login.identity for login in self.tokens if login.owner is not None]
