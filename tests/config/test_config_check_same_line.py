"""`bot config check` and `bot run` print the same line, with file, line and key path, for what `run` refuses (and
exits) and for what it works around (and starts without): both as real subprocesses."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from helpers import LOCAL, bot, write

# (what is broken, the config, what `config check` and `run` both print). Line numbers count from 1.
BROKEN: list[tuple[str, str, str]] = [
    (
        "a typo in an account key, even one whose variable is unset",
        LOCAL + "channels:\n  telegram:\n    accounts:\n      main:\n        tokne: ${SB_TEST_TOKEN}\n",
        ":7: channels.telegram.accounts.main.tokne: unknown key; did you mean 'token'?",
    ),
    (
        "a typo in dm_policy",
        LOCAL + "channels:\n  telegram:\n    accounts:\n      main:\n        token: '1:x'\n        dm_polcy: open\n",
        ":8: channels.telegram.accounts.main.dm_polcy: unknown key; did you mean 'dm_policy'?",
    ),
    (
        "a wrong type in an account",
        LOCAL + "channels:\n  telegram:\n    accounts:\n      main: {token: '1:x', require_mention: nope}\n",
        ":6: channels.telegram.accounts.main.require_mention: must be true or false",
    ),
    (
        "a channel name with a typo",
        LOCAL + "channels:\n  telegarm:\n    accounts:\n      main: {token: '1:x'}\n",
        ":4: channels.telegarm: unknown channel; did you mean 'telegram'?",
    ),
    (
        "an agent without a model",
        "agents:\n  - id: main\n",
        ":2: agents[0]: agent 'main' has no model",
    ),
    (
        "a provider that does not exist",
        LOCAL + "agents:\n  - id: main\n    model: lcoal/m\n",
        ":5: agents[0].model: no provider 'lcoal'; did you mean 'local'?",
    ),
    (
        "a provider that does not exist, without a providers section",
        "defaults: {model: opnrouter/anthropic/claude-sonnet-4}\n",
        ":1: defaults.model: no provider 'opnrouter'; did you mean 'openrouter'?",
    ),
    (
        "an account's api_base_url without its scheme",
        LOCAL + "channels:\n  telegram:\n    accounts:\n      main:\n        token: '1:x'\n"
        "        api_base_url: 127.0.0.1:8081\n",
        ":8: channels.telegram.accounts.main.api_base_url: must be a URL with its scheme",
    ),
    (
        "a provider base_url without its scheme",
        "defaults: {model: local/m}\nproviders:\n  local:\n    kind: openai\n    base_url: 127.0.0.1:11434/v1\n",
        ":5: providers.local.base_url: must be an http:// or https:// URL",
    ),
    (
        "a tab in the indentation",
        "agents:\n\t- id: main\n",
        ":2:1: invalid YAML: found character '\\t' that cannot start any token (YAML does not allow tabs for "
        "indentation; use spaces)",
    ),
]


@pytest.mark.parametrize(("what", "text", "expected"), BROKEN, ids=[case[0] for case in BROKEN])
def test_config_check_and_run_refuse_it_with_the_same_line(tmp_path: Path, what: str, text: str, expected: str) -> None:
    path = write(tmp_path, text)
    check = bot("config", "check", "--config", str(path))
    assert check.returncode == 1, (what, check.stdout, check.stderr)
    assert f"{path}{expected}" in check.stderr, (what, check.stderr)
    started = time.monotonic()
    run = bot("run", "--config", str(path), "--state-dir", str(tmp_path / "state"))
    assert run.returncode == 1, (what, run.stderr)
    assert f"{path}{expected}" in run.stderr, (what, run.stderr)
    assert "Traceback" not in run.stderr and "pydantic" not in run.stderr
    assert "Serving" not in run.stderr
    assert time.monotonic() - started < 30
    assert not (tmp_path / "state").exists()  # refused before anything was started


# Errors `bot run` works around: it prints the same line and starts without that part.
SKIPPED: list[tuple[str, str, str]] = [
    (
        "a channel account whose token variable is unset",
        LOCAL + "channels:\n  telegram:\n    accounts:\n      main: {token: '${SB_TEST_TOKEN}'}\n",
        ":6: channels.telegram.accounts.main.token: environment variable ${SB_TEST_TOKEN} is not set: `bot run` "
        "skips channels.telegram.accounts.main",
    ),
    (
        "a remote provider whose key variable is empty",
        "defaults: {model: remote/m}\nproviders:\n  remote:\n    kind: openai\n"
        "    base_url: https://api.example.invalid/v1\n    api_key: ${SB_TEST_REMOTE_KEY:-}\n",
        ":6: providers.remote.api_key: provider 'remote' has no API key: set SB_TEST_REMOTE_KEY",
    ),
    (
        "OpenRouter without OPENROUTER_API_KEY",
        "defaults: {model: openrouter/anthropic/claude-sonnet-4}\n",
        ":1: defaults.model: provider 'openrouter' has no API key: set OPENROUTER_API_KEY",
    ),
]


@pytest.mark.parametrize(("what", "text", "expected"), SKIPPED, ids=[case[0] for case in SKIPPED])
def test_config_check_fails_on_what_run_skips_and_run_prints_the_same_line(
    tmp_path: Path, what: str, text: str, expected: str
) -> None:
    path = write(tmp_path, text + "web: {listen: off}\n")  # without the web pages nothing else is left to serve
    check = bot("config", "check", "--config", str(path))
    assert check.returncode == 1, (what, check.stderr)
    assert f"{path}{expected}" in check.stderr
    run = bot("run", "--config", str(path), "--state-dir", str(tmp_path / "state"))
    assert f"{path}{expected}" in run.stderr, run.stderr
    assert "No channel to serve" in run.stderr  # it went on, and found nothing else to serve
    assert "Traceback" not in run.stderr
