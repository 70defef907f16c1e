"""`bindings.yaml` read, `${VAR}` and `.env` applied, checked and turned into a `Config`, or every problem with its
file, line and key."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path

import yaml
from pydantic import (
    ValidationError,
)

from bot.config.checks import (
    cross_checks,
    mcp_secrets,
    owner_channels,
    readiness,
    secret_paths,
    unmatched_names,
    unreachable_bindings,
    workspace_conflicts,
)
from bot.config.env import Substitution, load_env_file, substitute_env, with_env_file
from bot.config.errors import ConfigError, ConfigIssue, Loc, format_path, issues_from_validation
from bot.config.http_api import API_CHANNEL
from bot.config.plugin_checks import check_channels, check_providers
from bot.config.settings import DEFAULT_CONFIG, Config
from bot.config.web import WEB_CHANNEL
from bot.observe.redaction import Redactor
from bot.plugins import Plugins
from tools.mcp.settings import secret_entries
from tools.yaml_tree import parse_yaml


def parse_config(
    text: str, file: str = DEFAULT_CONFIG, environ: Mapping[str, str] | None = None, plugins: Plugins | None = None
) -> Config:
    """Validate config text; raises ConfigError listing every problem with its line and key path. Channel accounts
    and providers are checked by their plugins (`plugins`, else the installed ones)."""
    config, issues = _parse(text, file, environ, plugins)
    if config is None:
        raise ConfigError(file, issues)
    return config


def _parse(
    text: str, file: str, environ: Mapping[str, str] | None, plugins: Plugins | None
) -> tuple[Config | None, list[ConfigIssue]]:
    """The config and no issues, or None and every issue found (each with its line and key path)."""
    tree = parse_yaml(text)
    issues = [ConfigIssue(p.line, format_path(p.path), p.message) for p in tree.problems]
    issues = [_yaml_syntax(text) or issue if issue.message.startswith("invalid YAML") else issue for issue in issues]
    if tree.data is None and not issues:
        tree.data = {}
    if not isinstance(tree.data, dict):
        if not issues:
            issues.append(
                ConfigIssue(tree.line_of(()), "", "the config must be a mapping of sections (agents, bindings, ...)")
            )
        return None, issues
    env = substitute_env(tree.data, os.environ if environ is None else environ)
    unset_credentials: dict[tuple[str, str], list[str]] = {}
    unset_paths: dict[Loc, list[str]] = {}
    unset_mcp: dict[str, list[str]] = {}
    for path, names in list(env.missing.items()):
        if path[:2] == ("mcp", "servers") and len(path) == 5 and path[3] in ("env", "headers"):
            # Like a channel's token: that server does not start, and the rest of the bot does.
            unset_mcp.setdefault(str(path[2]), []).extend(names)
            del env.missing[path]
            continue
        if path[:1] == ("channels",) and len(path) >= 2:
            unset_paths[path] = list(names)
            # A channel account without its token is skipped when the bot starts, so one missing
            # variable does not stop every other channel.
            account = str(path[3]) if len(path) >= 4 and path[2] == "accounts" else "*"
            unset_credentials.setdefault((str(path[1]), account), []).extend(names)
            del env.missing[path]
            continue
        unset = ", ".join(f"${{{name}}}" for name in names)
        message = f"environment variable {unset} is not set (give it a value, or a default: ${{{names[0]}:-value}})"
        issues.append(ConfigIssue(tree.line_of(path), format_path(path), message))
    plugins = plugins or Plugins()
    issues += check_channels(env.data.get("channels"), plugins, tree.line_of, set(unset_paths))
    providers, found = check_providers(env.data.get("providers"), plugins, tree.line_of)
    issues += found
    if providers is not None:
        env.data["providers"] = providers
    config: Config | None = None
    try:
        config = Config.model_validate(env.data)
    except ValidationError as error:
        found = issues_from_validation(error, Config, tree.line_of)
        # A value that lost its variable fails validation too; the variable is the real problem.
        missing = {format_path(path) for path in env.missing}
        issues += [issue for issue in found if issue.path not in missing]
    issues += [ConfigIssue(tree.line_of(loc), format_path(loc), text) for loc, text in cross_checks(env.data, config)]
    if issues or config is None:
        return None, _without_env_values(issues, env)
    config._unset_credentials = unset_credentials
    config._unset_paths = unset_paths
    config._unset_mcp = unset_mcp
    config._mcp_secrets = mcp_secrets(env)
    config._written = env.data
    config._raw = tree.data
    config._line_of = tree.line_of
    config._warnings = _without_env_values(
        [
            ConfigIssue(tree.line_of(path), format_path(path), "a secret written into the file; use ${VAR} instead")
            for path in secret_paths(tree.data) + [("mcp", *loc) for loc, _ in secret_entries(tree.data.get("mcp"))]
            if path not in env.from_env
        ]
        + [ConfigIssue(tree.line_of(loc), format_path(loc), text) for loc, text in unreachable_bindings(config)],
        env,
    )
    return config, []


# What PyYAML's complaints usually mean, for someone who has never read the YAML spec.
_YAML_HINTS: tuple[tuple[str, str], ...] = (
    ("mapping values are not allowed", "a value holding ': ' needs quotes, or this line is indented too far"),
    ("could not find expected ':'", "a key needs ':' after it, or a line above is indented differently"),
    ("did not find expected key", "the lines of one mapping or list must start in the same column"),
    ("expected <block end>", "the lines of one mapping or list must start in the same column"),
    ("did not find expected '-' indicator", "the items of one list must start in the same column"),
    ("found unexpected end of stream", "a quote or bracket is not closed"),
    ("found '<stream end>'", "a bracket or quote is not closed"),
    ("while scanning a quoted scalar", "a quote is not closed"),
    ("found undefined alias", "an *alias names an &anchor that is not defined above it"),
)


def _yaml_syntax(text: str) -> ConfigIssue | None:
    """A YAML syntax error with its line, column and a hint at the usual cause (None if the text parses)."""
    try:
        yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        problem = str(error.problem or error.context or "not valid YAML")
        if mark is None:
            return ConfigIssue(1, "", f"invalid YAML: {problem}")
        lines = text.splitlines()
        line_text = lines[mark.line] if mark.line < len(lines) else ""
        indent = line_text[: len(line_text) - len(line_text.lstrip(" \t"))]
        if "\t" in indent or line_text[mark.column : mark.column + 1] == "\t":
            hint = "YAML does not allow tabs for indentation; use spaces"
        else:
            wording = f"{error.context or ''} {problem}"
            hint = next((advice for words, advice in _YAML_HINTS if words in wording), "")
        message = f"invalid YAML: {problem}" + (f" ({hint})" if hint else "")
        return ConfigIssue(mark.line + 1, "", message, column=mark.column + 1)
    except yaml.YAMLError as error:
        return ConfigIssue(1, "", f"invalid YAML: {error}")
    return None


def _without_env_values(issues: list[ConfigIssue], env: Substitution) -> list[ConfigIssue]:
    """The issues, with any value the environment supplied replaced: a message must not repeat a secret."""
    redactor = Redactor(env.values)
    return [dataclasses.replace(issue, message=redactor.redact(issue.message)) for issue in issues]


def load_config(
    path: str | Path = DEFAULT_CONFIG, environ: Mapping[str, str] | None = None, plugins: Plugins | None = None
) -> Config:
    """Read and validate a config file; relative paths in it are taken from the file's folder."""
    file = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(file, [ConfigIssue(None, "", "file not found")]) from None
    except UnicodeDecodeError as error:
        raise ConfigError(file, [ConfigIssue(None, "", f"not UTF-8 text ({error.reason})")]) from None
    except OSError as error:
        raise ConfigError(file, [ConfigIssue(None, "", f"cannot read: {error.strerror}")]) from None
    config = parse_config(text, file, environ, plugins)
    config._file = Path(path).resolve()
    config._base_dir = config._file.parent
    return config


ValidationResult = tuple["Config | None", list[ConfigIssue], list[ConfigIssue]]


def validate_config(
    path: str | Path = DEFAULT_CONFIG,
    environ: Mapping[str, str] | None = None,
    plugins: Plugins | None = None,
    state_dir: Path | None = None,
    *,
    env_file: bool = True,
) -> ValidationResult:
    """The one validation `bot config check`, `bot run`, `bot chat` and a reload share: `(config, errors, warnings)`,
    each issue with its file, line, key path and message (with "did you mean" for a typo).

    `config` is None when an error is fatal (the bot refuses the file); errors that are not fatal (`fatal` False: a
    channel account whose token variable is unset, which is skipped; a model provider without its key) come with the
    config, since the bot can start without them. `.env` beside the file fills in variables the environment lacks:
    with `environ` None it is loaded into this process's environment (see `bot.config.env.load_env_file`), else
    `environ` is read over it; with `env_file` False it is not read at all (a live reload: `.env` applies from the
    next start). With `state_dir`, a workspace holding it or the config file is an error too."""
    file = str(path)
    if not env_file:
        environment: Mapping[str, str] = os.environ if environ is None else environ
    elif environ is None:
        load_env_file(path)
        environment = os.environ
    else:
        environment = with_env_file(path, environ)
    try:
        config = load_config(path, environment, plugins)
    except ConfigError as error:
        return None, _in_file(error.issues, file), []
    plugins = plugins or Plugins()
    errors = readiness(config, environment)
    errors += owner_channels(config, [*plugins.channel_names(), WEB_CHANNEL, API_CHANNEL])
    if state_dir is not None:
        errors += workspace_conflicts(config, state_dir)
    warnings = config.warnings + unmatched_names(config, plugins)
    errors, warnings = _in_file(errors, file), _in_file(warnings, file)
    return (None if any(issue.fatal for issue in errors) else config), errors, warnings


def _in_file(issues: list[ConfigIssue], file: str) -> list[ConfigIssue]:
    """The issues in file order, each naming `file`."""
    placed = [dataclasses.replace(issue, file=file) for issue in issues]
    return sorted(placed, key=lambda issue: (issue.line or 0, issue.path))
