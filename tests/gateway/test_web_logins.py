"""The web side's logins and its settings: a link's secret for a cookie that nobody can forge, stretch or carry to
another login; a CSRF token worth nothing with another cookie; the operator's secret kept in the state directory
for its user alone; and a config that would face the network, or name an owner who is none, refused with its line."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from configs import config_of

from bot.config.errors import ConfigError
from bot.config.web import WebSettings
from bot.gateway.web.auth import SESSION_SECONDS, Logins, operator_token
from bot.gateway.web.render import markdown_html

ANN = "ann-secret-0123456789abcdef"
BOB = "bob-secret-0123456789abcdef"


def logins(tmp_path: Path) -> Logins:
    settings = WebSettings.model_validate({"tokens": [{"name": "ann", "token": ANN}, {"name": "bob", "token": BOB}]})
    return Logins(settings, tmp_path)


def test_a_cookie_is_the_logins_own_and_expires(tmp_path: Path) -> None:
    book = logins(tmp_path)
    ann = book.by_token(ANN)
    assert ann is not None and ann.identity == "web:ann"
    assert book.by_token("ann-secret-0123456789abcdeX") is None
    cookie = book.cookie_for(ann, now=1000.0)
    assert book.by_cookie(cookie, now=1000.0 + SESSION_SECONDS - 1) == ann
    assert book.by_cookie(cookie, now=1000.0 + SESSION_SECONDS + 1) is None  # expired
    body, _, signature = cookie.partition(".")
    bob = book.by_token(BOB)
    assert bob is not None
    forged = book.cookie_for(bob, now=1000.0).partition(".")[0] + "." + signature  # Bob's name, Ann's signature
    assert book.by_cookie(forged, now=1000.0) is None
    assert book.by_cookie(body + ".0" + signature[1:], now=1000.0) is None
    assert book.by_cookie("garbage", now=1000.0) is None and book.by_cookie(None) is None
    assert book.csrf_for(ann, cookie) != book.csrf_for(ann, book.cookie_for(ann, now=2000.0))


def test_the_operators_secret_is_made_once_for_the_bots_user_alone(tmp_path: Path) -> None:
    token = operator_token(tmp_path)
    assert len(token) >= 32 and operator_token(tmp_path) == token
    assert stat.S_IMODE((tmp_path / "web-token").stat().st_mode) == 0o600
    book = Logins(WebSettings(), tmp_path)
    operator = book.by_token(token)
    assert operator is not None and operator.identity == "web:operator"


def test_the_operator_is_an_owner_only_while_no_login_is_named(tmp_path: Path) -> None:
    assert config_of(tmp_path, "http://127.0.0.1:9/v1", web={"listen": "127.0.0.1:8765"}).owner_keys() == [
        "web:operator"
    ]
    named = {"listen": "127.0.0.1:8765", "tokens": [{"name": "ann", "token": ANN, "owner": "telegram:1"}]}
    config = config_of(tmp_path, "http://127.0.0.1:9/v1", web=named, owners=["telegram:1"])
    assert config.owner_keys() == ["telegram:1", "web:ann"]
    assert config_of(tmp_path, "http://127.0.0.1:9/v1").owner_keys() == []  # the tests' default: web off


@pytest.mark.parametrize(
    ("web", "owners", "problem"),
    [
        ({"listen": "0.0.0.0:8765"}, [], "web.listen: 0.0.0.0:8765 is not a loopback address"),
        ({"tokens": [{"name": "ann", "token": ANN, "owner": "telegram:2"}]}, ["telegram:1"], "did you mean"),
        ({"tokens": [{"name": "ann", "token": "short"}]}, [], "web.tokens[0].token: must be at least 16 characters"),
        ({"tokens": [{"name": "ann", "token": ANN}, {"name": "ann", "token": BOB}]}, [], "a name of its own"),
        ({"listen": "8765"}, [], "must be host:port"),
    ],
)
def test_a_web_section_that_would_be_unsafe_or_wrong_is_refused(
    tmp_path: Path, web: dict[str, object], owners: list[str], problem: str
) -> None:
    with pytest.raises(ConfigError) as error:
        config_of(tmp_path, "http://127.0.0.1:9/v1", web=web, owners=owners)
    assert problem in str(error.value)
    assert ANN not in str(error.value) and "short" not in str(error.value)  # a secret, even a bad one, is not shown


LISTENING = {"listen": "127.0.0.1:8765"}


@pytest.mark.parametrize(
    ("second", "problem"),
    [
        ({"name": "deploy", "secret": BOB}, "a name of its own"),
        ({"name": "alerts", "secret": ANN}, "a secret of its own"),
    ],
)
def test_two_webhooks_with_one_name_or_one_secret_are_refused(
    tmp_path: Path, second: dict[str, str], problem: str
) -> None:
    first = {"name": "deploy", "secret": ANN, "deliver": {"channel": "memory", "to": "direct:1"}}
    with pytest.raises(ConfigError) as error:
        config_of(tmp_path, "http://127.0.0.1:9/v1", web=LISTENING, webhooks=[first, first | second])
    assert f"webhooks: each webhook needs {problem}" in str(error.value)
    assert ANN not in str(error.value) and BOB not in str(error.value)
    assert config_of(tmp_path, "http://127.0.0.1:9/v1", web=LISTENING, webhooks=[first]).webhooks[0].name == "deploy"


def test_remote_listening_is_allowed_when_asked_for(tmp_path: Path) -> None:
    config = config_of(tmp_path, "http://127.0.0.1:9/v1", web={"listen": "0.0.0.0:8765", "allow_remote": True})
    assert config.web.listen == "0.0.0.0:8765"


def test_markdown_keeps_no_tag_no_image_and_no_script_link() -> None:
    html = str(markdown_html("<script>x</script> ![t](http://evil.example/t.png) [a](javascript:alert(1)) **b**"))
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "<img" not in html and 'href="javascript' not in html
    assert "<strong>b</strong>" in html
