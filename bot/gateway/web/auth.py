"""Who is logged in to the web side: the secret links (`web.tokens`, or the operator's, kept in the state directory),
the session cookie a link is exchanged for, and the CSRF token every state-changing request carries. Cookies and
CSRF tokens are signed with the login's own secret, so any process that knows the secret accepts them, and a
secret taken out of the config ends its logins at once."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from bot.config.owners_file import owner_key
from bot.config.web import OPERATOR, WEB_CHANNEL, WebSettings

__all__ = ["COOKIE", "SESSION_SECONDS", "Login", "Logins", "operator_token"]

COOKIE = "switchboard_session"
SESSION_SECONDS = 7 * 24 * 3600  # a login lasts a week; the link logs in again
TOKEN_FILE = "web-token"  # in the state directory: the operator's secret, made on first use


@dataclass(frozen=True)
class Login:
    """A person who logs in: their login name, who they are to the bot (`identity`: `web:<name>`, an owner when the
    config's owners include it) and the secret their link holds and their cookie is signed with."""

    name: str
    secret: str

    @property
    def identity(self) -> str:
        return owner_key(WEB_CHANNEL, self.name)


def operator_token(state_dir: Path) -> str:
    """The operator's secret: read from the state directory, made there (readable by the bot's user only) when
    missing."""
    path = state_dir / TOKEN_FILE
    try:
        token = path.read_text(encoding="utf-8").strip()
        if len(token) >= 32:
            return token
    except FileNotFoundError:
        pass
    state_dir.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(token + "\n")
    return token


class Logins:
    """The logins `settings` allows (with no `tokens`, the operator's, whose secret `operator_token` keeps) and the
    cookies and CSRF tokens made for them."""

    def __init__(self, settings: WebSettings, state_dir: Path) -> None:
        self._logins = [Login(entry.name, entry.token.get_secret_value()) for entry in settings.tokens]
        if not self._logins:
            self._logins.append(Login(OPERATOR, operator_token(state_dir)))

    def link(self, url: str, name: str | None = None) -> str:
        """The login link of `name` (default: the first login, the operator's when there is no `tokens`) to the pages
        at `url`: its secret in the fragment, which browsers never send to a server or a log. KeyError for no such
        login."""
        for login in self._logins:
            if name is None or login.name == name:
                return f"{url}/#token={login.secret}"
        raise KeyError(name)

    def by_token(self, token: str) -> Login | None:
        """The login whose secret `token` is, compared in constant time; None for any other."""
        found = None
        for login in self._logins:
            if hmac.compare_digest(login.secret.encode(), token.strip().encode()):
                found = login
        return found

    def cookie_for(self, login: Login, now: float | None = None) -> str:
        """The session cookie's value for `login`: its name and expiry, signed with its secret."""
        expires = int((now if now is not None else time.time()) + SESSION_SECONDS)
        body = f"{login.name}|{expires}"
        return f"{_b64(body.encode())}.{_sign(login.secret, 'cookie', body)}"

    def by_cookie(self, value: str | None, now: float | None = None) -> Login | None:
        """The login a cookie stands for; None when it is missing, forged, expired or its login is gone."""
        if not value or "." not in value:
            return None
        encoded, _, signature = value.partition(".")
        try:
            body = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
        except (ValueError, UnicodeDecodeError):
            return None
        name, _, expires = body.partition("|")
        login = next((login for login in self._logins if login.name == name), None)
        if login is None or not expires.isdigit():
            return None
        if not hmac.compare_digest(signature, _sign(login.secret, "cookie", body)):
            return None
        if int(expires) < (now if now is not None else time.time()):
            return None
        return login

    @staticmethod
    def csrf_for(login: Login, cookie: str) -> str:
        """The CSRF token of a session: tied to its cookie, so it is worth nothing with another."""
        return _sign(login.secret, "csrf", cookie)


def _sign(secret: str, purpose: str, body: str) -> str:
    return hmac.new(secret.encode(), f"{purpose}|{body}".encode(), hashlib.sha256).hexdigest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")
