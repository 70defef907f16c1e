"""The one config builder the tests share: a bot's config as a dict (what a test writes as bindings.yaml for a real
`bot run`) or parsed into a Config, built from a base every test needs and the parts a test names."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bot.config import Config, parse_config

if TYPE_CHECKING:
    from fakes.bridge import FakeBridge
    from fakes.discord import FakeDiscord
    from fakes.llm import FakeLLM
    from fakes.slack import FakeSlack
    from fakes.telegram import FakeTelegram


def merged(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """`base` with `extra` laid over it: mappings merge key by key, anything else (lists included) replaces."""
    out = dict(base)
    for key, value in extra.items():
        inner = out.get(key)
        out[key] = merged(inner, value) if isinstance(value, dict) and isinstance(inner, dict) else value
    return out


def config_dict(tmp_path: Path, llm: FakeLLM | str, *parts: dict[str, Any], **sections: Any) -> dict[str, Any]:
    """A bot's config: the model `fake/m` on `llm` (a FakeLLM, or a base URL), workspaces under `tmp_path/ws`, then
    each of `parts` (e.g. `telegram(tg)`) and the `sections` (e.g. `owners=[...]`) merged over it, in that order."""
    url = llm if isinstance(llm, str) else llm.openai_base_url
    config: dict[str, Any] = {
        "defaults": {"model": "fake/m", "workspace_root": str(tmp_path / "ws")},
        "providers": {"fake": {"kind": "openai", "base_url": url}},
        # Off unless a test serves it (`web={"listen": "127.0.0.1:0", ...}`): many bots run at once, and a web login
        # would be one more owner.
        "web": {"listen": "off"},
    }
    for part in (*parts, sections):
        config = merged(config, part)
    return config


def config_of(tmp_path: Path, llm: FakeLLM | str, *parts: dict[str, Any], **sections: Any) -> Config:
    """`config_dict(...)` parsed, as the loader would: what a test that builds the gateway in-process passes it."""
    return parse_config(json.dumps(config_dict(tmp_path, llm, *parts, **sections)))


def channel(name: str, settings: dict[str, Any], *, account: str = "main") -> dict[str, Any]:
    """The `channels` section of one account (named `account`) on channel `name`."""
    return {"channels": {name: {"accounts": {account: settings}}}}


def telegram(tg: FakeTelegram, *, account: str = "main", **settings: Any) -> dict[str, Any]:
    """A Telegram account on the fake server, long-polling for a second at most."""
    return channel(
        "telegram", {"token": tg.token, "api_base_url": tg.url, "poll_timeout": 1, **settings}, account=account
    )


def discord(dc: FakeDiscord, *, account: str = "main", **settings: Any) -> dict[str, Any]:
    """A Discord account on the fake server. A short guild_ready_timeout only makes start quick: the fake sends its
    guild before anything needs it."""
    return channel("discord", {"token": dc.token, **dc.urls, "guild_ready_timeout": 0.05, **settings}, account=account)


def slack(fake: FakeSlack, *, account: str = "main", **settings: Any) -> dict[str, Any]:
    """A Slack account (Socket Mode) on the fake server."""
    keys = {"bot_token": fake.bot_token, "app_token": fake.app_token, "api_base_url": fake.url}
    return channel("slack", {**keys, **settings}, account=account)


def loopback(bridge: FakeBridge, *, account: str = "default", **settings: Any) -> dict[str, Any]:
    """An account on the loopback plugin channel, polling the fake bridge."""
    return channel("loopback", {"url": bridge.url, "poll_timeout": 0.5, **settings}, account=account)
