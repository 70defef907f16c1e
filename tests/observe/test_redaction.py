"""Secrets never reach the logs: every record of every logger, at every level, from the process's first line."""

from __future__ import annotations

import io
import logging
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest
from configs import config_dict, telegram
from fakes.llm import FakeLLM, Reply
from fakes.telegram import FakeTelegram
from helpers import bot_run, eventually, settled

from bot.config.checks import secrets_of
from bot.config.errors import ConfigError
from bot.config.loading import parse_config
from bot.observe.redaction import REDACTED, Redactor, configure_logging

TOKEN = "123456:AAE-the-bot-token_x"
KEY = "sk-model-key-0123456789"
Configure = Callable[[Mapping[str, str]], tuple[Redactor, io.StringIO]]


@pytest.fixture
def logs_to() -> Iterator[Configure]:
    """configure_logging into a buffer; the root logger is put back as it was afterwards."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level

    def configure(environ: Mapping[str, str]) -> tuple[Redactor, io.StringIO]:
        stream = io.StringIO()
        return configure_logging(logging.DEBUG, stream, environ), stream

    yield configure
    root.handlers[:] = handlers
    root.setLevel(level)


def test_a_secret_from_the_environment_is_redacted_in_every_part_of_every_record(logs_to: Configure) -> None:
    _, stream = logs_to({"TELEGRAM_BOT_TOKEN": TOKEN, "HOME": "/home/someone"})
    deep = logging.getLogger("telegram.ext.ExtBot.some.deep.sdk.logger")  # no filter of its own anywhere above it
    deep.debug("Set Bot API URL: http://127.0.0.1/bot%s", TOKEN)
    deep.info(f"url http://127.0.0.1/bot{TOKEN}/getMe")
    try:
        raise RuntimeError(f"Unauthorized for /bot{TOKEN}/getUpdates")
    except RuntimeError:
        deep.exception("the call failed")
    deep.warning("home is %s", "/home/someone", stack_info=True)
    written = stream.getvalue()
    assert TOKEN not in written
    assert written.count(REDACTED) == 3  # the argument, the message, the exception text
    assert "Set Bot API URL: http://127.0.0.1/bot<redacted>" in written and "RuntimeError: Unauthorized" in written
    assert "home is /home/someone" in written  # an ordinary variable is not a secret


def test_the_configs_credentials_are_added_once_it_is_loaded(logs_to: Configure) -> None:
    redactor, stream = logs_to({})
    config = parse_config(
        "providers: {fake: {kind: openai, base_url: 'http://127.0.0.1:1/v1', api_keys: '${KEYS}'}}\n"
        "channels: {slack: {accounts: {main: {bot_token: xoxb-literal-in-file, app_token: '${APP}'}}}}\n",
        environ={"KEYS": f"{KEY},sk-second-key-abcdef", "APP": "xapp-from-the-environment"},
    )
    redactor.add(secrets_of(config))
    for secret in (KEY, "sk-second-key-abcdef", "xoxb-literal-in-file", "xapp-from-the-environment"):
        logging.getLogger("slack_sdk.web").debug("sending with %s", secret)
    assert stream.getvalue().count(REDACTED) == 4
    assert "xoxb" not in stream.getvalue() and "sk-" not in stream.getvalue()


def test_a_secret_inside_a_longer_one_does_not_leave_a_tail(logs_to: Configure) -> None:
    _, stream = logs_to({"A_TOKEN": "abcdef", "B_TOKEN": "abcdef-and-more"})
    logging.getLogger("x").info("abcdef-and-more / abcdef")
    assert stream.getvalue().rstrip().endswith(f"{REDACTED} / {REDACTED}")


def test_short_values_are_not_taken_for_secrets() -> None:
    redactor = Redactor(["abc", ""])
    assert redactor.redact("abc is a word") == "abc is a word"


async def test_bot_run_verbose_logs_neither_the_token_nor_the_model_key(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg = fake_telegram
    # The second reply is a 401 whose body repeats the key the bot sent, as a real provider's does.
    fake_llm.script("Hello.", Reply.error(401))
    account = telegram(tg, token="${SB_TELEGRAM}", dm_policy="open")
    config = config_dict(tmp_path, fake_llm, {"providers": {"fake": {"api_key": "${SB_MODEL}"}}}, account)
    config["owners"] = ["telegram:1"]  # someone else: the DM is not told how to become the owner (bot.intake.ownerless)
    env = {"SB_TELEGRAM": tg.token, "SB_MODEL": KEY}  # names that do not look secret: the config says they are
    async with bot_run(config, tmp_path, "channel telegram account main started", "-v", env=env):
        await tg.private_message("hi")
        await tg.wait_texts(tg.user_id, lambda texts: texts == ["Hello."])
        await tg.private_message("again")
        await eventually(lambda: len(fake_llm.requests) == 2, "the rejected request")
        await eventually(lambda: settled(tmp_path / "state"), "the second message finished")
    log = (tmp_path / "bot.log").read_text()
    assert " DEBUG " in log  # every logger at DEBUG
    assert tg.token not in log and KEY not in log
    assert f"Set Bot API URL: {tg.url}/bot{REDACTED}" in log
    assert all(KEY not in text for text in tg.sent[tg.user_id])


@pytest.mark.parametrize(
    "text",
    [
        'defaults: {model: "${V}"}',  # a validator quotes the value
        'bindings: [{agent: "${V}", match: {channel: telegram}}]',  # a cross-check quotes it, lowercased
        'agents: [{id: main, model: "prefix-${V}"}]',  # a value with the variable inside it
        'defaults: {model: "fake/m"}\nproviders: {fake: {kind: "${V}", base_url: "http://127.0.0.1:1"}}',
    ],
)
def test_a_config_error_never_repeats_a_value_from_the_environment(text: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config(text, environ={"V": "Sk-Secret-Value-123"})
    rendered = str(raised.value)
    assert "secret-value" not in rendered.lower()
    assert "bindings.yaml:" in rendered  # still says where
