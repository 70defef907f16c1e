"""First run: `bot init` writes a bindings.yaml that `bot config check` accepts, never with a token in it, refuses to
overwrite one without --force, and checks a token with the platform (the fake Telegram); `bot run` with no channel
and a terminal on stdin serves the console, and names the variable a missing model key goes in."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import pty
import sys
from pathlib import Path

import pytest
from fakes.llm import FakeLLM
from fakes.telegram import FakeTelegram
from helpers import WAIT

from bot.cli.init import PLATFORMS, PROVIDERS, render_config
from bot.cli.run import serves_console
from bot.config.loading import load_config, validate_config
from channels.console import ConsoleAdapter


async def bot(*args: str, cwd: Path, env: dict[str, str] | None = None, stdin: bytes = b"") -> tuple[int, str, str]:
    """`bot <args>` in `cwd` (stdin a pipe, not a terminal): exit status, stdout, stderr."""
    environ = {key: value for key, value in os.environ.items() if not key.endswith(("_TOKEN", "_API_KEY"))}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", *args, cwd=cwd, env=environ | (env or {}),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(stdin), WAIT)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


@pytest.mark.parametrize("provider", list(PROVIDERS))
async def test_flags_write_a_file_config_check_accepts_with_every_token_a_reference(
    tmp_path: Path, provider: str
) -> None:
    args = ("init", "--telegram", "--discord", "--slack", "--provider", provider, "--owner", "telegram:4242")
    status, out, err = await bot(*args, cwd=tmp_path)
    assert status == 0, err
    text = (tmp_path / "bindings.yaml").read_text()
    for variable in ("TELEGRAM_BOT_TOKEN", "DISCORD_BOT_TOKEN", "SLACK_BOT_TOKEN", "SLACK_APP_TOKEN"):
        assert f'"${{{variable}}}"' in text
        assert f"  export {variable}=<your " in out  # the line to set, with a placeholder
    assert f"api_key: ${{{PROVIDERS[provider].variable}:-}}" in text
    assert f"  export {PROVIDERS[provider].variable}=<your {provider} API key>" in out
    assert text.count("\n#") > 5  # commented

    variables = ("TELEGRAM_BOT_TOKEN", "DISCORD_BOT_TOKEN", "SLACK_BOT_TOKEN", "SLACK_APP_TOKEN")
    unset = await bot("config", "check", cwd=tmp_path)  # an unset token or key is an error `bot run` works around
    assert unset[0] == 1 and "environment variable ${TELEGRAM_BOT_TOKEN} is not set" in unset[2]
    dummies = {name: "dummy" for name in (*variables, PROVIDERS[provider].variable)}
    status, out, err = await bot("config", "check", cwd=tmp_path, env=dummies)
    assert (status, err) == (0, ""), err
    assert out == "bindings.yaml: valid (1 agents, 0 bindings)\n"
    config = load_config(tmp_path / "bindings.yaml", environ={})
    assert config.owners == ["telegram:4242"]
    assert config.model_for("main") == PROVIDERS[provider].model
    assert set(config.channels) == set(PLATFORMS)


def test_the_rendered_file_without_platforms_serves_the_console_and_takes_a_chosen_model(tmp_path: Path) -> None:
    path = tmp_path / "bindings.yaml"
    path.write_text(render_config([], "anthropic", "anthropic/claude-opus-4", []))
    config = load_config(path, environ={})
    assert config.channels == {}
    assert (config.model_for("main"), config.fallbacks_for("main")) == ("anthropic/claude-opus-4", [])
    assert config.warnings == []


async def test_an_existing_file_is_kept_unless_forced_and_bad_flags_are_refused(tmp_path: Path) -> None:
    (tmp_path / "bindings.yaml").write_text("agents: [{id: mine}]\n")
    status, _, err = await bot("init", "--telegram", cwd=tmp_path)
    assert status == 1 and "bindings.yaml exists; --force overwrites it" in err
    assert (tmp_path / "bindings.yaml").read_text() == "agents: [{id: mine}]\n"
    status, _, err = await bot("init", "--telegram", "--owner", "4242", "--force", cwd=tmp_path)
    assert status == 2 and "must be <channel>:<user id>" in err
    status, _, err = await bot("init", "--provider", "openai", "--model", "anthropic/x", "--force", cwd=tmp_path)
    assert status == 2 and "must start with openai/" in err
    assert (tmp_path / "bindings.yaml").read_text() == "agents: [{id: mine}]\n"
    status, _, err = await bot("init", "--telegram", "--force", cwd=tmp_path)
    assert status == 0, err
    assert "TELEGRAM_BOT_TOKEN" in (tmp_path / "bindings.yaml").read_text()


async def test_a_token_is_checked_with_telegram_and_never_echoed(tmp_path: Path, fake_telegram: FakeTelegram) -> None:
    tg = fake_telegram
    checked = ("init", "--telegram", "--check-token", "--api-base-url", tg.url)
    status, out, err = await bot(*checked, cwd=tmp_path, env={"TELEGRAM_BOT_TOKEN": tg.token})
    assert status == 0, err
    assert f"Telegram accepted the token: @{tg.username}" in err
    assert tg.calls("getMe") == [{}]
    assert tg.token not in out + err + (tmp_path / "bindings.yaml").read_text()

    # pasted on stdin (a script), refused: nothing is written, and the token is not shown
    wrong = "999999:not-the-right-token"
    other = tmp_path / "other"
    other.mkdir()
    status, out, err = await bot(*checked, cwd=other, stdin=f"{wrong}\n".encode())
    assert status == 4
    assert "bot: Telegram refused the token: Unauthorized (401)" in err
    assert wrong not in out + err
    assert not (other / "bindings.yaml").exists()

    # the platform cannot be reached: said, and nothing written
    status, _, err = await bot(*checked[:-1], "http://127.0.0.1:1", cwd=other, stdin=f"{wrong}\n".encode())
    assert status == 4 and "Telegram could not be asked about the token (ConnectError)" in err
    assert wrong not in err
    assert not (other / "bindings.yaml").exists()


def test_the_console_is_served_only_when_nothing_else_is_and_a_terminal_is_on_stdin() -> None:
    primary, secondary = pty.openpty()
    try:
        with open(secondary, encoding="utf-8") as terminal, contextlib.closing(io.StringIO()) as piped:
            assert serves_console([], terminal)
            assert not serves_console([ConsoleAdapter(source=piped)], terminal)  # something to serve already
            assert not serves_console([], piped)  # not a terminal: `bot run` exits saying why, as before
            assert not serves_console([], None)
        assert not serves_console([], terminal)  # closed
    finally:
        os.close(primary)


def key_problems(path: Path, environ: dict[str, str]) -> list[str]:
    """What the one validation (bot run's, config check's) says of the models' keys."""
    _, errors, _ = validate_config(path, environ)
    return [issue.message for issue in errors if "API key" in issue.message]


def test_a_remote_provider_without_a_key_names_the_variable(tmp_path: Path) -> None:
    path = tmp_path / "bindings.yaml"
    path.write_text(render_config([], "openrouter", None, []))
    assert key_problems(path, {}) == [
        "provider 'openrouter' has no API key: set OPENROUTER_API_KEY (in the environment or .env beside this "
        "file); agent main cannot answer without it"
    ]
    assert key_problems(path, {"OPENROUTER_API_KEY": "sk-or-test-key"}) == []
    local = "providers: {local: {kind: openai, base_url: 'http://127.0.0.1:11434/v1'}}\n"
    path.write_text(local + "defaults: {model: local/llama3.1}\n")
    assert key_problems(path, {}) == []  # a local server needs no key


async def test_make_run_without_a_channel_at_a_terminal_chats_in_the_console(tmp_path: Path, fake_llm: FakeLLM) -> None:
    config = tmp_path / "bindings.yaml"
    config.write_text(
        "defaults: {model: fake/m, workspace_root: ws}\n"
        f"providers: {{fake: {{kind: openai, base_url: '{fake_llm.openai_base_url}'}}}}\n"
    )
    fake_llm.script("Four.")
    primary, secondary = pty.openpty()
    environ = {key: value for key, value in os.environ.items() if not key.endswith("_API_KEY")}
    try:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot", "run", "--config", str(config), cwd=tmp_path, env=environ,
            stdin=secondary, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
    finally:
        os.close(secondary)
    try:
        os.write(primary, b"what is 2+2?\n/exit\n")  # a line, then /exit: the bot stops once it has answered
        out, err = await asyncio.wait_for(process.communicate(), WAIT)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        os.close(primary)
    assert process.returncode == 0, err.decode()
    assert "No channel is configured: serving the console here." in err.decode()
    assert "No owner yet" in err.decode() and "/whoami" in err.decode() and "bot owners add" in err.decode()
    assert " INFO " not in err.decode() and "Ctrl-C stops" not in err.decode()  # no log in the conversation
    assert out.decode() == "Four.\n"
    assert len(fake_llm.requests) == 1
