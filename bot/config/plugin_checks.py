"""What the plugins check in a config: each channel account against its channel's settings model, each provider
against its kind's, with the file's line and key path like every other config error."""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ValidationError

from agent.providers.config import ProviderConfig
from bot.config.errors import ConfigIssue, Loc, format_path, issues_from_validation
from bot.plugins import PluginError, Plugins

__all__ = ["LineOf", "check_channels", "check_providers", "url_problem"]

LineOf = Callable[[Loc], int | None]
_SCHEME_URL = re.compile(r"^[a-z][a-z0-9+.-]*://[^/\s]+", re.IGNORECASE)


def url_problem(value: Any) -> str | None:
    """Why `value` cannot be an endpoint's URL (no scheme, no host), or None when it can: `127.0.0.1:8081` would
    be taken as a path, and the bot would talk to a server nobody meant."""
    if not isinstance(value, str) or not value.strip() or _SCHEME_URL.match(value.strip()):
        return None
    return "must be a URL with its scheme, e.g. http://127.0.0.1:8081 (a local server) or https://api.example.com"


def _url_issues(settings: Any, at: Loc, line_of: LineOf) -> list[ConfigIssue]:
    """Every `*_url` setting of an account that is not a URL (the plugins' models take any text there)."""
    if not isinstance(settings, dict):
        return []
    found = []
    for key, value in settings.items():
        problem = url_problem(value) if str(key).endswith("url") else None
        if problem is not None:
            found.append(_issue(line_of, (*at, key), problem))
    return found


def _issue(line_of: LineOf, loc: Loc, message: str) -> ConfigIssue:
    return ConfigIssue(line_of(loc), format_path(loc), message)


def _validate(model: type[BaseModel], value: Any, at: Loc, line_of: LineOf) -> tuple[Any, list[ConfigIssue]]:
    try:
        return model.model_validate(value), []
    except ValidationError as error:
        return None, issues_from_validation(error, model, line_of, at)


def check_channels(data: Any, plugins: Plugins, line_of: LineOf, unset: set[Loc]) -> list[ConfigIssue]:
    """Every account under `channels.<name>.accounts` validated by its channel's plugin. An account whose
    `${VAR}` is unset (it is skipped when the bot starts) is not blamed for the value it lacks."""
    if not isinstance(data, dict):
        return []  # the Config model reports a `channels:` that is not a mapping
    issues: list[ConfigIssue] = []
    for name, section in data.items():
        here: Loc = ("channels", name)
        try:
            plugin = plugins.channel(str(name))
        except PluginError as error:
            issues.append(_issue(line_of, here, str(error)))
            continue
        if plugin is None:
            names = plugins.channel_names()
            close = difflib.get_close_matches(str(name), names, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            known = ", ".join(names) or "none"
            issues.append(_issue(line_of, here, f"unknown channel{hint} (known: {known}; a plugin package adds more)"))
            continue
        if section is None:
            continue
        if not isinstance(section, dict):
            issues.append(_issue(line_of, here, "must be a mapping with accounts: <id>: {...}"))
            continue
        for key in section:
            if key != "accounts":
                issues.append(_issue(line_of, (*here, key), "unknown key; valid keys are accounts"))
        accounts = section.get("accounts") or {}
        if not isinstance(accounts, dict):
            issues.append(_issue(line_of, (*here, "accounts"), "must be a mapping of account ids to settings"))
            continue
        for account, settings in accounts.items():
            at: Loc = (*here, "accounts", account)
            lacking = {loc for loc in unset if loc[: len(at)] == at}
            _, found = _validate(plugin.settings, settings or {}, at, line_of)
            blamed = {format_path(loc) for loc in lacking} | ({format_path(at)} if lacking else set())
            # An unknown key is a typo whatever its value: `tokne: ${TOKEN}` must not hide behind the variable.
            issues += [issue for issue in found if issue.path not in blamed or issue.message.startswith("unknown key")]
            issues += _url_issues(settings, at, line_of)
    return issues


def check_providers(data: Any, plugins: Plugins, line_of: LineOf) -> tuple[dict[str, Any], list[ConfigIssue]]:
    """The `providers:` section with each entry whose plugin has settings of its own validated by them (the rest
    is left for the Config model), and the issues found: an unknown kind, a key its plugin does not take."""
    if not isinstance(data, dict):
        return data, []
    checked: dict[str, Any] = dict(data)
    issues: list[ConfigIssue] = []
    for name, entry in data.items():
        kind = entry.get("kind") if isinstance(entry, dict) else None
        if not isinstance(kind, str):
            continue  # the Config model reports a missing or malformed kind
        here: Loc = ("providers", name, "kind")
        try:
            plugin = plugins.provider(kind.strip().lower())
        except PluginError as error:
            issues.append(_issue(line_of, here, str(error)))
            continue
        if plugin is None:
            known = ", ".join(plugins.provider_kinds()) or "none"
            issues.append(_issue(line_of, here, f"unknown provider kind {kind!r} (known: {known})"))
            continue
        if plugin.settings is not ProviderConfig:
            settings, found = _validate(plugin.settings, entry, ("providers", name), line_of)
            issues += found
            if settings is None:
                del checked[name]  # reported above; the Config model would report its plugin's keys as unknown
            else:
                checked[name] = settings
    return checked, issues
