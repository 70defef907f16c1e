"""First run: `bot init` writes a bindings.yaml that `bot config check` accepts, never with a secret in it, whichever
platforms are chosen (the others commented, valid once uncommented); it writes the secrets it is given into .env
(0600, never shown), checks a token with the platform (the fake Telegram) and writes the file even when the check
fails, takes an OpenAI-compatible endpoint and a platform API root, and ends with the next commands; `make run`
without a config says how to write one; `bot run` with no channel and a terminal on stdin serves the console."""

from __future__ import annotations

import asyncio
import contextlib
import io
import itertools
import os
import pty
import re
import shlex
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from dotenv import dotenv_values
from fakes.llm import FakeLLM
from fakes.telegram import FakeTelegram
from helpers import WAIT

from bot.cli.init import PLATFORMS, PROVIDERS, render_config
from bot.cli.init_env import write_env
from bot.cli.run import serves_console
from bot.config.loading import load_config, validate_config
from channels.console import ConsoleAdapter

ROOT = Path(__file__).resolve().parents[2]
BOT = Path(sys.executable).parent / "bot"  # what the next commands name
TOKEN_VARIABLES = ("TELEGRAM_BOT_TOKEN", "DISCORD_BOT_TOKEN", "SLACK_BOT_TOKEN", "SLACK_APP_TOKEN")


async def bot(*args: str, cwd: Path, env: dict[str, str] | None = None, stdin: bytes = b"") -> tuple[int, str, str]:
    """`bot <args>` in `cwd` (stdin a pipe, not a terminal), without the caller's tokens and keys: exit status,
    stdout, stderr."""
    environ = {key: value for key, value in os.environ.items() if not key.endswith(("_TOKEN", "_API_KEY"))}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", *args, cwd=cwd, env=environ | (env or {}),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(stdin), WAIT)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("provider", list(PROVIDERS))
async def test_flags_write_a_file_config_check_accepts_with_every_token_a_reference(
    tmp_path: Path, provider: str
) -> None:
    args = ("init", "--telegram", "--discord", "--slack", "--provider", provider, "--owner", "telegram:4242")
    status, out, err = await bot(*args, cwd=tmp_path)
    assert status == 0, err
    text = (tmp_path / "bindings.yaml").read_text()
    key = PROVIDERS[provider].variable
    for variable in TOKEN_VARIABLES:
        assert f'"${{{variable}}}"' in text
        assert f"\n  {variable}=<your " in out  # the line still to put in .env, with a placeholder
    assert f"api_key: ${{{key}:-}}" in text
    assert f"\n  {key}=<your {PROVIDERS[provider].title} API key>" in out
    assert "export " not in out and not (tmp_path / ".env").exists()  # no --write-env: no .env
    assert text.count("\n#") > 5  # commented

    unset = await bot("config", "check", cwd=tmp_path)  # an unset token or key is an error `bot run` works around
    assert unset[0] == 1 and "environment variable ${TELEGRAM_BOT_TOKEN} is not set" in unset[2]
    dummies = {name: "dummy" for name in (*TOKEN_VARIABLES, key)}
    status, out, err = await bot("config", "check", cwd=tmp_path, env=dummies)
    assert (status, err) == (0, ""), err
    assert out == "bindings.yaml: valid (1 agents, 0 bindings)\n"
    config = load_config(tmp_path / "bindings.yaml", environ={})
    assert config.owners == ["telegram:4242"]
    assert config.model_for("main") == PROVIDERS[provider].model
    assert set(config.channels) == set(PLATFORMS)


def uncommented(text: str) -> str:
    """The file with the commented blocks under `channels:` uncommented as an editor does it: the `# ` after each
    line's indent taken away, down to the section's end."""
    lines = text.splitlines()
    start = lines.index("channels:")
    end = lines.index("", start)
    inside = [re.sub(r"^(\s+)# ", r"\1", line) for line in lines[start:end]]
    return "\n".join([*lines[:start], *inside, *lines[end:]]) + "\n"


SUBSETS = [list(chosen) for size in range(len(PLATFORMS) + 1) for chosen in itertools.combinations(PLATFORMS, size)]


@pytest.mark.parametrize("platforms", SUBSETS, ids=["+".join(chosen) or "none" for chosen in SUBSETS])
def test_the_platforms_not_chosen_are_commented_blocks_valid_once_uncommented(
    tmp_path: Path, platforms: list[str]
) -> None:
    environ = {name: f"{name.lower()}-dummy" for name in (*TOKEN_VARIABLES, "OPENROUTER_API_KEY")}
    path = tmp_path / "bindings.yaml"
    text = render_config(platforms, PROVIDERS["openrouter"], None, [])
    path.write_text(text)
    config, errors, warnings = validate_config(path, environ=environ)
    assert config is not None and (errors, warnings) == ([], []), [issue.message for issue in errors + warnings]
    assert list(config.channels) == platforms
    opened = uncommented(text)
    assert opened != text or len(platforms) == len(PLATFORMS)
    path.write_text(opened)
    config, errors, warnings = validate_config(path, environ=environ)
    assert config is not None and (errors, warnings) == ([], []), [issue.message for issue in errors + warnings]
    assert list(config.channels) == list(PLATFORMS)
    for name in PLATFORMS:
        assert list(config.channels[name]["accounts"]) == ["default"]


def test_the_rendered_file_without_platforms_serves_the_console_and_takes_a_chosen_model(tmp_path: Path) -> None:
    path = tmp_path / "bindings.yaml"
    path.write_text(render_config([], PROVIDERS["anthropic"], "anthropic/claude-opus-4", []))
    config = load_config(path, environ={})
    assert config.channels == {}
    assert (config.model_for("main"), config.fallbacks_for("main")) == ("anthropic/claude-opus-4", [])
    assert config.warnings == []


async def test_an_existing_file_is_kept_unless_forced_and_bad_flags_are_refused(tmp_path: Path) -> None:
    (tmp_path / "bindings.yaml").write_text("agents: [{id: mine}]\n")
    status, _, err = await bot("init", "--telegram", cwd=tmp_path)
    assert status == 1 and "bindings.yaml exists; --force overwrites it" in err
    refused = [
        (("--telegram", "--owner", "4242"), "must be <channel>:<user id>"),
        (("--provider", "openai", "--model", "anthropic/x"), "must start with openai/"),
        (("--provider", "openai-compatible", "--model", "m"), "needs --base-url"),
        (("--provider", "openai-compatible", "--base-url", "http://127.0.0.1:9/v1"), "and --model"),
        (("--provider", "openai-compatible", "--base-url", "127.0.0.1:9", "--model", "m"), "http:// or https://"),
        (("--base-url", "http://127.0.0.1:9/v1"), "goes with --provider openai-compatible"),
        (("--telegram", "--discord", "--api-base-url", "http://127.0.0.1:9"), "with one platform flag"),
        (("--api-base-url", "http://127.0.0.1:9"), "with one platform flag"),
    ]
    for flags, said in refused:
        status, _, err = await bot("init", *flags, "--force", cwd=tmp_path)
        assert status == 2 and said in err, (flags, err)
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
    text = (tmp_path / "bindings.yaml").read_text()
    assert tg.token not in out + err + text
    assert f'default: {{ token: "${{TELEGRAM_BOT_TOKEN}}", api_base_url: "{tg.url}" }}' in text  # the root is kept
    assert load_config(tmp_path / "bindings.yaml", environ={"TELEGRAM_BOT_TOKEN": "t"}).channels["telegram"] == {
        "accounts": {"default": {"token": "t", "api_base_url": tg.url}}
    }
    assert "TELEGRAM_BOT_TOKEN=<your Telegram bot token>" not in out  # it is set where init runs


async def test_a_refused_token_still_writes_the_file_without_the_token_and_exits_4(
    tmp_path: Path, fake_telegram: FakeTelegram
) -> None:
    wrong = "999999:not-the-right-token"
    args = ("init", "--telegram", "--check-token", "--write-env", "--api-base-url", fake_telegram.url)
    status, out, err = await bot(*args, cwd=tmp_path, stdin=f"{wrong}\nsk-or-key-0123456789\n".encode())
    assert status == 4
    assert "warning: Telegram refused the token: Unauthorized (401); the file is written anyway" in err
    assert err.rstrip().endswith("bot: Telegram refused the token: Unauthorized (401)")
    assert wrong not in out + err
    assert "TELEGRAM_BOT_TOKEN" in (tmp_path / "bindings.yaml").read_text()  # the answers are kept
    assert dotenv_values(tmp_path / ".env") == {"OPENROUTER_API_KEY": "sk-or-key-0123456789"}  # not the refused one
    assert "\n  TELEGRAM_BOT_TOKEN=<your Telegram bot token>\n" in out  # still to set
    assert "sk-or-key-0123456789" not in out + err


async def test_an_unreachable_platform_is_a_warning_and_the_token_is_kept(tmp_path: Path) -> None:
    token = "123456:unchecked-token"
    args = ("init", "--telegram", "--check-token", "--write-env", "--api-base-url", "http://127.0.0.1:1")
    status, out, err = await bot(*args, cwd=tmp_path, stdin=f"{token}\n\n".encode())
    assert status == 0, err
    assert "warning: Telegram could not be asked about the token (ConnectError); not checked" in err
    assert dotenv_values(tmp_path / ".env") == {"TELEGRAM_BOT_TOKEN": token}  # the empty line skipped the key
    assert mode(tmp_path / ".env") == 0o600
    assert token not in out + err
    assert "Wrote TELEGRAM_BOT_TOKEN to .env (mode 0600; the values are not shown)." in out
    assert "\n  OPENROUTER_API_KEY=<your OpenRouter API key>\n" in out


async def test_write_env_keeps_the_other_lines_replaces_the_variable_and_shows_nothing(tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text("# mine\nOTHER=kept\nexport TELEGRAM_BOT_TOKEN=old-token\nTELEGRAM_BOT_TOKEN=older\n")
    env_file.chmod(0o644)
    secrets = {"TELEGRAM_BOT_TOKEN": "111:from-the-environment", "OPENROUTER_API_KEY": "sk-or 'quoted' \\ key"}
    args = ("init", "--telegram", "--write-env")
    status, out, err = await bot(*args, cwd=tmp_path, env=secrets)
    assert status == 0, err
    assert mode(env_file) == 0o600
    assert env_file.read_text().splitlines()[:3] == [
        "# mine",
        "OTHER=kept",
        "TELEGRAM_BOT_TOKEN=111:from-the-environment",
    ]
    assert dotenv_values(env_file) == {"OTHER": "kept", **secrets}
    assert not any(value in out + err for value in secrets.values())
    assert "Still to set" not in out
    status, out, err = await bot("config", "check", cwd=tmp_path)  # read from .env, as every command does
    assert (status, err) == (0, ""), err


def test_write_env_makes_a_new_file_0600_and_refuses_a_line_break(tmp_path: Path) -> None:
    path = tmp_path / "sub" / ".env"
    write_env(path, {"A": "1", "B": "two words"})
    assert mode(path) == 0o600 and dotenv_values(path) == {"A": "1", "B": "two words"}
    with pytest.raises(ValueError, match="line break"):
        write_env(path, {"A": "x\ny"})
    assert dotenv_values(path) == {"A": "1", "B": "two words"}
    assert [entry.name for entry in path.parent.iterdir()] == [".env"]  # no temporary file left


@pytest.mark.parametrize(
    ("base_url", "name", "needs_key"),
    [("http://127.0.0.1:11434/v1", "local", False), ("https://llm.example.com/v1", "custom", True)],
)
async def test_an_openai_compatible_endpoint_is_written_as_an_openai_provider(
    tmp_path: Path, base_url: str, name: str, needs_key: bool
) -> None:
    args = ("init", "--provider", "openai-compatible", "--base-url", base_url, "--model", "llama3.1")
    status, out, err = await bot(*args, cwd=tmp_path)
    assert status == 0, err
    config = load_config(tmp_path / "bindings.yaml", environ={})
    assert config.model_for("main") == f"{name}/llama3.1"
    assert config.providers is not None
    provider = config.providers[name]
    assert (provider.kind, provider.base_url, provider.keys()) == ("openai", base_url, [])
    variable = f"{name.upper()}_API_KEY"
    assert f"api_key: ${{{variable}:-}}" in (tmp_path / "bindings.yaml").read_text()
    check = await bot("config", "check", cwd=tmp_path)
    if needs_key:  # an endpoint elsewhere: its key is asked for, by name
        assert f"\n  {variable}=<your custom API key>\n" in out
        assert check[0] == 1 and f"provider 'custom' has no API key: set {variable}" in check[2]
        assert (await bot("config", "check", cwd=tmp_path, env={variable: "k"}))[0] == 0
    else:  # a server on this machine needs none
        assert "Still to set" not in out
        assert check[:2] == (0, "bindings.yaml: valid (1 agents, 0 bindings)\n"), check[2]


async def test_it_ends_with_the_next_commands_for_where_it_wrote(tmp_path: Path) -> None:
    status, out, _ = await bot("init", "--telegram", cwd=tmp_path)
    assert status == 0
    assert out.splitlines()[-4:] == [
        "Next:",
        f"  {BOT} config check --config bindings.yaml",
        f"  {BOT} doctor --config bindings.yaml",
        f"  {BOT} run --config bindings.yaml",
    ]
    elsewhere = tmp_path / "conf" / "my bot.yaml"
    status, out, _ = await bot("init", "--config", str(elsewhere), cwd=ROOT)  # in the checkout: make runs it
    assert status == 0
    env_line = f"Still to set, in {elsewhere.parent / '.env'} (or the environment the bot runs with):"
    assert env_line in out
    quoted = shlex.quote(str(elsewhere))  # for a shell: the name has a space
    assert quoted.startswith("'")
    assert out.splitlines()[-3:] == [
        "Next:",
        f"  .venv/bin/bot config check --config {quoted}",
        f"  make run CONFIG={quoted}",
    ]


def test_make_run_without_the_config_says_how_to_write_one(tmp_path: Path) -> None:
    missing = tmp_path / "bindings.yaml"
    result = subprocess.run(
        ["make", "--no-print-directory", "-o", ".venv/.installed", "run", f"CONFIG={missing}"],
        cwd=ROOT, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=WAIT,
    )  # fmt: skip
    assert result.returncode != 0
    assert result.stdout == ""
    assert result.stderr.splitlines()[0] == (
        f"{missing} does not exist: write it with .venv/bin/bot init --config {missing} (or run the example: "
        "make run CONFIG=bindings.example.yaml)"
    )
    assert not missing.exists()


class Terminal:
    """`bot init` on a terminal of its own (a pty as stdin, with no controlling terminal, so that hidden input is
    read from it), its output (stdout and stderr, where a hidden prompt goes) read as it comes: each answer is typed
    once its prompt has been shown."""

    def __init__(self, process: asyncio.subprocess.Process, primary: int) -> None:
        self.process = process
        self.primary = primary
        self.out = ""

    async def answer(self, prompt: str, typed: str) -> None:
        assert self.process.stdout is not None
        while prompt not in self.out:
            chunk = await asyncio.wait_for(self.process.stdout.read(4096), WAIT)
            assert chunk, f"bot init ended before asking {prompt!r}:\n{self.out}"
            self.out += chunk.decode()
        self.out = self.out[self.out.index(prompt) + len(prompt) :]
        os.write(self.primary, f"{typed}\n".encode())

    def echoed(self) -> str:
        """What the terminal showed of what was typed."""
        os.set_blocking(self.primary, False)
        shown = b""
        with contextlib.suppress(BlockingIOError, OSError):
            while chunk := os.read(self.primary, 4096):
                shown += chunk
        return shown.decode(errors="replace")


async def test_at_a_terminal_it_asks_an_empty_hidden_answer_skips_and_secrets_go_to_env_unseen(
    tmp_path: Path,
) -> None:
    key = "sk-local-secret-0123456789"
    primary, secondary = pty.openpty()
    environ = {name: value for name, value in os.environ.items() if not name.endswith(("_TOKEN", "_API_KEY"))}
    try:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot", "init", cwd=tmp_path, env=environ, start_new_session=True,
            stdin=secondary, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,  # getpass: stderr
        )  # fmt: skip
    finally:
        os.close(secondary)
    try:
        terminal = Terminal(process, primary)
        await terminal.answer("Chat platforms", "telegram")
        await terminal.answer("Model provider", "openai-compatible")
        await terminal.answer("base URL", "")  # the default: a server on this machine
        await terminal.answer("The model, as that server names it", "llama3.1")
        await terminal.answer("Your Telegram user id", "")  # optional: skipped
        await terminal.answer("Paste the Telegram bot token (not shown; Enter skips)", "")  # skipped, not asked again
        await terminal.answer("Paste the local API key (not shown; Enter skips)", key)
        await terminal.answer("Write LOCAL_API_KEY to .env (mode 0600)?", "")  # the default: yes
        out, _ = await asyncio.wait_for(process.communicate(), WAIT)
        shown = terminal.echoed()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        os.close(primary)
    assert process.returncode == 0, out.decode()
    everything = terminal.out + out.decode() + shown
    assert key not in everything and "llama3.1" in shown  # what is typed shows, except a secret
    assert dotenv_values(tmp_path / ".env") == {"LOCAL_API_KEY": key}
    assert mode(tmp_path / ".env") == 0o600
    assert "Check the tokens" not in everything  # no token given: nothing to check
    assert "\n  TELEGRAM_BOT_TOKEN=<your Telegram bot token>\n" in terminal.out + out.decode()
    config = load_config(tmp_path / "bindings.yaml", environ={"TELEGRAM_BOT_TOKEN": "t"})
    assert config.model_for("main") == "local/llama3.1" and list(config.channels) == ["telegram"]
    assert config.owners == []


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
    path.write_text(render_config([], PROVIDERS["openrouter"], None, []))
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


async def test_make_run_at_a_terminal_without_a_config_asks_bot_init_then_starts(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    config = tmp_path / "bindings.yaml"
    fake_llm.script("Four.")
    primary, secondary = pty.openpty()
    environ = {name: value for name, value in os.environ.items() if not name.endswith(("_TOKEN", "_API_KEY"))}
    make = ("make", "--no-print-directory", "-o", ".venv/.installed", "run", f"CONFIG={config}")
    try:
        process = await asyncio.create_subprocess_exec(
            *make, cwd=ROOT, env=environ, start_new_session=True, stdin=secondary, stdout=secondary, stderr=secondary
        )
    finally:
        os.close(secondary)
    os.set_blocking(primary, False)
    screen = ""

    async def answer(prompt: str, typed: str) -> None:
        """Type `typed` once `prompt` is on the screen (after what was answered before)."""
        nonlocal screen
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT
        while prompt not in screen:
            with contextlib.suppress(BlockingIOError):
                screen += os.read(primary, 4096).decode(errors="replace")
            assert loop.time() < deadline and process.returncode is None, f"no {prompt!r} on the screen:\n{screen}"
            await asyncio.sleep(0.01)
        screen = screen[screen.index(prompt) + len(prompt) :]
        os.write(primary, f"{typed}\n".encode())

    try:
        await answer("Chat platforms", "none")
        await answer("Model provider", "openai-compatible")
        await answer("base URL", fake_llm.openai_base_url)
        await answer("The model, as that server names it", "m")
        await answer("Paste the local API key (not shown; Enter skips)", "")
        await answer("serving the console here", "what is 2+2?")  # the bot started on the file init wrote
        await answer("Four.", "/exit")
        assert await asyncio.wait_for(process.wait(), WAIT) == 0
    finally:
        if process.returncode is None:
            os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
        os.close(primary)
    assert load_config(config, environ={}).model_for("main") == "local/m"
    assert len(fake_llm.requests) == 1
