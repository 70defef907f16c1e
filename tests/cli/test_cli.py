"""The `bot` command line, run as a real subprocess: route, config check, run and --help."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bot.store.schema import SCHEMA_VERSION

CONFIG = """\
defaults: {model: local/m}
providers: {local: {kind: openai, base_url: "http://127.0.0.1:9/v1"}}
agents:
  - id: main
    default: true
  - id: ops
  - id: support
bindings:
  - agent: ops
    match:
      channel: telegram
      peer: {kind: group, id: -1001234567890}
  - agent: support
    match:
      channel: discord
      guild: "42"
      roles: ["7"]
session:
  identity_links:
    alice: [telegram:111]
web: {listen: off}
"""

BROKEN = """\
agents:
  - id: main
bindings:
  - agent: main
    match:
      channel: telegram
      peer: {kind: person, id: 1}
  - agent: ghost
    match: {channel: slack}
"""


def bot(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("SWITCHBOARD")}
    return subprocess.run(
        [sys.executable, "-m", "bot", *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=60
    )


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "bindings.yaml"
    path.write_text(CONFIG)
    return path


@pytest.fixture
def broken(tmp_path: Path) -> Path:
    path = tmp_path / "broken.yaml"
    path.write_text(BROKEN)
    return path


def test_route_json_prints_exactly_one_object(config: Path) -> None:
    result = bot("route", "--config", str(config), "--channel", "telegram", "--peer", "group:-1001234567890", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {
        "agent": "ops",
        "session_key": "agent:ops:telegram:group:-1001234567890",
        "matched_by": "binding.peer",
    }
    assert result.stdout.count("\n") == 1


def test_route_takes_every_routing_field(config: Path) -> None:
    result = bot(
        "route",
        "--config",
        str(config),
        "--channel",
        "Discord",
        "--account",
        "Default",
        "--peer",
        "channel:900",
        "--parent-peer",
        "channel:800",
        "--guild",
        "42",
        "--roles",
        "1,7",
        "--thread",
        "555",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {
        "agent": "support",
        "session_key": "agent:support:discord:channel:900:thread:555",
        "matched_by": "binding.guild+roles",
    }


def test_route_prints_a_readable_answer(config: Path) -> None:
    result = bot("route", "--config", str(config), "--channel", "telegram", "--peer", "dm:111", "--team", "T1")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "agent:       main",
        "session_key: agent:main:telegram:direct:alice",
        "matched_by:  default",
    ]


def test_config_defaults_to_bindings_yaml_in_the_current_folder(config: Path) -> None:
    result = bot("route", "--channel", "telegram", "--peer", "group:-1001234567890", "--json", cwd=config.parent)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["agent"] == "ops"


def test_a_malformed_peer_is_a_usage_error(config: Path) -> None:
    result = bot("route", "--config", str(config), "--channel", "telegram", "--peer", "person:1")
    assert result.returncode == 2
    assert "peer kind must be one of direct, group, channel" in result.stderr
    result = bot("route", "--config", str(config), "--channel", "telegram", "--peer", "12345")
    assert result.returncode == 2
    assert "peer must be KIND:ID" in result.stderr


def test_config_check_accepts_a_valid_file(config: Path) -> None:
    result = bot("config", "check", "--config", str(config))
    assert result.returncode == 0
    assert result.stdout.strip() == f"{config}: valid (3 agents, 2 bindings)"


def test_config_check_prints_every_error_and_exits_1(broken: Path) -> None:
    result = bot("config", "check", "--config", str(broken))
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"{broken}:7: bindings[0].match.peer.kind: must be one of direct, group, channel",
        f"{broken}:8: bindings[1].agent: no agent 'ghost'; agents are main",
        f"{broken}: 2 errors",
    ]


def test_route_on_an_invalid_config_prints_the_same_errors(broken: Path) -> None:
    check = bot("config", "check", "--config", str(broken))
    result = bot("route", "--config", str(broken), "--channel", "telegram", "--json")
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr == check.stderr


def test_run_validates_the_config_and_says_when_there_is_no_channel(config: Path, broken: Path) -> None:
    result = bot("run", "--config", str(config), "--state-dir", str(config.parent / "state"))
    assert result.returncode == 1
    assert "No channel to serve" in result.stderr
    assert "`bot chat`" in result.stderr
    modelless = config.parent / "modelless.yaml"
    modelless.write_text("agents:\n  - id: main\n")
    refused = bot("run", "--config", str(modelless))
    assert refused.returncode == 1
    assert f"{modelless}:2: agents[0]: agent 'main' has no model" in refused.stderr
    failed = bot("run", "--config", str(broken))
    assert failed.returncode == 1
    assert f"{broken}:7: bindings[0].match.peer.kind" in failed.stderr


def test_run_skips_a_channel_account_whose_token_is_unset(tmp_path: Path) -> None:
    path = tmp_path / "bindings.yaml"
    path.write_text(
        "providers: {local: {kind: openai, base_url: 'http://127.0.0.1:9/v1'}}\ndefaults: {model: local/m}\n"
        "channels:\n  telegram:\n    accounts:\n      main: {token: '${SWITCHBOARD_TEST_UNSET_TOKEN}'}\n"
        "web: {listen: off}\n"
    )
    result = bot("run", "--config", str(path))
    assert result.returncode == 1
    # The line `bot config check` prints, then the skip itself (see tests/config/test_config_check.py).
    assert f"{path}:6: channels.telegram.accounts.main.token: environment variable" in result.stderr
    assert "channels.telegram.accounts.main: skipped, SWITCHBOARD_TEST_UNSET_TOKEN not set" in result.stderr


def test_a_missing_config_file_is_named(tmp_path: Path) -> None:
    result = bot("config", "check", cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.splitlines()[0] == "bindings.yaml: file not found"


def test_the_bot_console_script_is_installed(config: Path) -> None:
    script = Path(sys.executable).parent / "bot"
    result = subprocess.run(
        [str(script), "route", "--config", str(config), "--channel", "telegram", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"agent": "main", "session_key": "agent:main:main", "matched_by": "default"}


def test_help_lists_the_commands() -> None:
    result = bot("--help")
    assert result.returncode == 0
    for command in ("run", "route", "config"):
        assert f"  {command} " in result.stdout


def test_help_imports_no_platform_sdk_and_no_config_machinery() -> None:
    probe = textwrap.dedent(
        """
        import sys
        from bot.cli.main import cli
        try:
            cli(["--help"], prog_name="bot")
        except SystemExit:
            pass
        heavy = {"telegram", "discord", "slack_bolt", "slack_sdk", "pydantic", "yaml", "httpx"}
        print(sorted(name for name in sys.modules if name.split(".")[0] in heavy))
        """
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"


def test_an_error_of_the_tree_ends_the_command_with_one_line_and_its_exit_status(config: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    with contextlib.closing(sqlite3.connect(state / "state.db")) as connection:
        connection.execute("PRAGMA user_version = 999")  # written by a newer Switchboard
    result = bot("pairing", "list", "--config", str(config), "--state-dir", str(state))
    assert result.returncode == 6
    assert result.stderr.strip().splitlines() == [
        f"bot: {state / 'state.db'}: schema version 999 is newer than this Switchboard ({SCHEMA_VERSION})"
    ]


def test_every_error_belongs_to_one_tree_with_its_exit_status() -> None:
    from agent.compaction import CompactionError
    from agent.providers.base import ProviderError
    from bot.cli.chat import ChatFailed
    from bot.cli.main import exit_code
    from bot.config.errors import ConfigError
    from bot.plugins import PluginError
    from bot.runs.assemble import SetupError
    from bot.store import StoreError
    from channels.discord import DiscordStartError
    from channels.telegram import TelegramSendError
    from routing.errors import ChannelError, SwitchboardError, ToolError
    from tools.fs import FsError, PathRefused
    from tools.memory import MemoryToolError
    from tools.provenance import ScopeError
    from tools.web import FetchError, Refused, SearchError

    branches = {
        ChannelError: [DiscordStartError, TelegramSendError],
        ToolError: [FsError, PathRefused, FetchError, Refused, SearchError, ScopeError, MemoryToolError],
        SwitchboardError: [
            ConfigError,
            SetupError,
            PluginError,
            ProviderError,
            CompactionError,
            StoreError,
            ChatFailed,
            ChannelError,
            ToolError,
        ],
    }
    for branch, members in branches.items():
        assert all(issubclass(member, branch) for member in members), branch
    assert exit_code(ConfigError("bindings.yaml", [])) == 1
    assert exit_code(ProviderError("server", "the provider is down")) == 3
    assert exit_code(DiscordStartError("no READY")) == 4
    assert exit_code(PathRefused("outside")) == 5
    assert exit_code(StoreError("closed")) == 6
