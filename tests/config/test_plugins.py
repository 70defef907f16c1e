"""A plugin package from outside the source (tests/plugins/filechat: a channel and a tool), built and installed like
any package, and used by `bot config check`, `bot tools` and `bot run` through its entry points."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from configs import channel, config_dict
from fakes.llm import FakeLLM, Reply, ToolCallSpec
from helpers import bot_run, eventually

PACKAGE = Path(__file__).parent.parent / "plugins" / "filechat"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The plugin package installed into a folder of its own, which the `bot` processes below get on their path
    (installed into the shared test venv it would show up in every other test's `bot tools`)."""
    work = tmp_path_factory.mktemp("filechat")
    source = shutil.copytree(PACKAGE, work / "source")  # a build writes into the source folder
    target = work / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--no-build-isolation",
         "--target", str(target), str(source)],
        check=True, timeout=300,
    )  # fmt: skip
    return target


def with_plugin(site: Path) -> dict[str, str]:
    path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    return {key: value for key, value in os.environ.items() if not key.endswith("_API_KEY")} | {"PYTHONPATH": path}


def bot(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bot", *args], capture_output=True, text=True, env=env, timeout=60)


def config(tmp_path: Path, account: dict[str, Any], llm_url: str = "http://127.0.0.1:9") -> dict[str, Any]:
    return config_dict(tmp_path, llm_url, channel("filechat", account))


def write(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "bindings.yaml"
    path.write_text(json.dumps(data, indent=1))
    return path


def test_config_check_validates_a_plugin_channels_accounts_with_line_and_key(site: Path, tmp_path: Path) -> None:
    good = write(tmp_path, config(tmp_path, {"inbox": "in.txt", "outbox": "out.jsonl"}))
    assert bot(with_plugin(site), "config", "check", "--config", str(good)).returncode == 0

    bad = write(tmp_path, config(tmp_path, {"inbx": "in.txt", "outbox": "out.jsonl"}))
    result = bot(with_plugin(site), "config", "check", "--config", str(bad))
    assert result.returncode == 1
    line = next(n for n, text in enumerate(bad.read_text().splitlines(), 1) if '"inbx"' in text)
    assert f"{bad}:{line}: channels.filechat.accounts.main.inbx: unknown key; did you mean 'inbox'?" in result.stderr
    assert "channels.filechat.accounts.main: required key is missing" not in result.stderr  # `inbox` is named
    assert "channels.filechat.accounts.main.inbox: required key is missing" in result.stderr


def test_without_the_plugin_the_channel_is_unknown(tmp_path: Path) -> None:
    path = write(tmp_path, config(tmp_path, {"inbox": "in.txt", "outbox": "out.jsonl"}))
    result = bot(with_plugin(tmp_path / "nothing"), "config", "check", "--config", str(path))
    assert result.returncode == 1
    assert "channels.filechat: unknown channel (known: console, discord, loopback, slack, telegram" in result.stderr


def test_bot_tools_lists_a_plugin_tool_after_the_built_in_ones(site: Path, tmp_path: Path) -> None:
    path = write(tmp_path, config(tmp_path, {"inbox": "in.txt", "outbox": "out.jsonl"}))
    result = bot(with_plugin(site), "tools", "--config", str(path))
    assert result.returncode == 0, result.stderr
    kept = [line.split()[0] for line in result.stdout.splitlines()[1:] if line.strip()]
    assert "shout" in kept and "exec" in kept
    assert kept.index("shout") > kept.index("exec")


async def test_bot_run_serves_a_plugin_channel_and_its_tool_answers_the_model(
    site: Path, tmp_path: Path, fake_llm: FakeLLM
) -> None:
    inbox, outbox = tmp_path / "in.txt", tmp_path / "out.jsonl"
    inbox.write_text("please shout hello\n")
    fake_llm.script(
        Reply.tool_calls(ToolCallSpec("shout", {"text": "hello"})),
        Reply.text("Shouted: HELLO"),
    )
    data = config(tmp_path, {"inbox": str(inbox), "outbox": str(outbox)}, fake_llm.openai_base_url)
    data["owners"] = ["filechat:owner"]  # someone: nobody is told how to become the owner (bot.intake.ownerless)
    async with bot_run(data, tmp_path, "channel filechat account main started", env=with_plugin(site)):
        await eventually(lambda: outbox.exists() and outbox.read_text().strip() != "", "the answer in the outbox file")
    assert [json.loads(line) for line in outbox.read_text().splitlines()] == [
        {"chat": "reader", "text": "Shouted: HELLO"}
    ]
    results = [m["content"] for m in fake_llm.requests[1].body["messages"] if m["role"] == "tool"]
    assert [json.loads(content) for content in results] == [{"shouted": "HELLO"}]
