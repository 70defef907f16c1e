"""The effective config as people are shown it (`bot config show`, the web Config page): defaults filled in, each
agent's model, fallbacks and workspace as it gets them, `tools.non_owner` merged with its default (and, when the
caller lists them, the tools a non-owner's run of each agent gets), the channel accounts' settings as their plugins
fill them, and every credential masked."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bot.config.settings import Config

__all__ = ["MASK", "masked", "masked_config"]

MASK = "***"
# Keys whose value is a credential wherever they appear (`max_tokens` is not one: the name must end in the word).
_SECRET_KEY = re.compile(
    r"(^|_)(token|tokens|secret|secrets|password|passwd|api_?key|api_?keys|private_?key|credentials?)$", re.IGNORECASE
)
_ALL_VALUES_SECRET = frozenset({"env", "headers"})  # an MCP server's env and headers, a provider's headers


def _mask_value(value: Any) -> Any:
    """The value with nothing of it kept: `***` for each non-empty item (None and "" stay: they say it is unset)."""
    if value is None or value == "":
        return value
    if isinstance(value, list):
        return [_mask_value(item) for item in value]
    return MASK


def _masked(data: Any, secrets: list[str], path: tuple[str, ...] = ()) -> Any:
    if isinstance(data, dict):
        found: dict[str, Any] = {}
        for key, value in data.items():
            name = str(key)
            entries = isinstance(value, list) and bool(value) and all(isinstance(item, dict) for item in value)
            if entries:  # a list of entries (`web.tokens`): each shown, its own secrets masked by their keys
                found[name] = _masked(value, secrets, (*path, name))
            elif _SECRET_KEY.search(name) or name.lower() in _secret_keys():
                found[name] = _mask_value(value)
            elif name in _ALL_VALUES_SECRET and isinstance(value, dict) and path[:1] in (("mcp",), ("providers",)):
                found[name] = {str(k): _mask_value(v) for k, v in value.items()}
            else:
                found[name] = _masked(value, secrets, (*path, name))
        return found
    if isinstance(data, list | tuple):
        return [_masked(item, secrets, path) for item in data]
    if isinstance(data, str) and secrets:  # a credential inside another value, such as a URL that carries a token
        for secret in secrets:
            data = data.replace(secret, MASK)
    return data


def _secret_keys() -> frozenset[str]:
    from bot.config.checks import SECRET_KEYS

    return SECRET_KEYS


def _known_secrets(config: Config) -> list[str]:
    """Every credential value the config and the environment hold, longest first (a secret inside another is
    masked with it)."""
    from bot.config.checks import secrets_of
    from bot.observe.redaction import MIN_SECRET_LENGTH, secret_values

    found: set[str] = set()
    for secret in [*secrets_of(config), *secret_values(os.environ)]:
        for part in {secret, *secret.split(",")}:
            if len(part.strip()) >= MIN_SECRET_LENGTH:
                found.add(part.strip())
    return sorted(found, key=len, reverse=True)


def _channels(config: Config) -> dict[str, Any]:
    """The channel accounts with their defaults filled in by their plugin (as written where it cannot validate one,
    e.g. an account whose token variable is unset)."""
    from pydantic import ValidationError

    from bot.plugins import PluginError, Plugins

    plugins = Plugins()
    shown: dict[str, Any] = {}
    for name, section in config.channels.items():
        accounts = section.get("accounts") if isinstance(section, dict) else None
        try:
            plugin = plugins.channel(str(name))
        except PluginError:
            plugin = None
        if plugin is None or not isinstance(accounts, dict):
            shown[name] = section
            continue
        filled: dict[str, Any] = {}
        for account, settings in accounts.items():
            try:
                filled[account] = plugin.settings.model_validate(settings or {}).model_dump(mode="json")
            except ValidationError:
                filled[account] = settings
        shown[name] = {**section, "accounts": filled}
    return shown


def _non_owner(config: Config) -> dict[str, list[str]]:
    """`tools.non_owner` as applied: its default deny list with the config's `deny` added (the merge `bot tools
    --not-owner --explain` explains), what `allow` lifts from it, and what `only` limits non-owners to."""
    from tools.policy import defaulted_policies

    policy = dict(defaulted_policies(config.tools))["non_owner"]
    return {
        "deny": list(dict.fromkeys([*policy.default, *policy.deny])),
        "allow": list(policy.allow),
        "only": list(policy.only),
    }


def masked_config(config: Config, non_owner_tools: Mapping[str, Sequence[str]] | None = None) -> dict[str, Any]:
    """The effective config (after `${VAR}` substitution, with every default, each agent's model, fallbacks and
    workspace as it gets them, inherited or its own, and `tools.non_owner` merged with its default deny list) as plain
    data, every credential replaced by `***`: channel tokens and secrets, provider keys and headers, MCP servers' env
    and headers, and any known secret found inside another value. With no `providers:` section, the providers the
    environment gives. `non_owner_tools` (agent id -> tool names), when given, is shown as each agent's
    `non_owner_tools`: what a run started by someone not in `owners` gets."""
    from agent.providers.config import providers_from_env

    data = config.model_dump(mode="json")
    for agent in data["agents"]:  # what each agent gets, inherited from `defaults` or its own
        agent["model"] = config.model_for(agent["id"])
        agent["fallbacks"] = config.fallbacks_for(agent["id"])
        agent["workspace"] = str(config.workspace(agent["id"]))
        if non_owner_tools is not None and agent["id"] in non_owner_tools:
            agent["non_owner_tools"] = list(non_owner_tools[agent["id"]])
    data["tools"] = {**(data.get("tools") or {}), "non_owner": _non_owner(config)}
    data["channels"] = _channels(config)
    if config.providers is None:
        data["providers"] = {
            name: provider.model_dump(mode="json") for name, provider in providers_from_env(os.environ).items()
        }
    shown: dict[str, Any] = _masked(data, _known_secrets(config))
    return shown


def masked(value: Any, config: Config) -> Any:
    """`value` (plain data or text) with every credential `config` and the environment hold masked wherever it
    appears, whole or inside a longer text."""
    return _masked(value, _known_secrets(config))
