"""Start-up failures told straight, and a channel that cannot start retried: a refused token, a wrong URL and an
unreachable server each get their own line (never the token, no traceback without -v), a failed account is tried
again with backoff while the others serve, and a Telegram that comes up late is served once it is there."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from pathlib import Path
from typing import Any, cast

import pytest
from configs import channel, config_dict
from fakes.discord import FakeDiscord
from fakes.llm import FakeLLM, refusing_port
from fakes.slack import FakeSlack
from fakes.telegram import FakeTelegram
from helpers import FakeClock, bot_run, eventually, settled, status_file_shows

from bot.cli.run import serving_line
from bot.gateway.channel_start import MAX_DELAY, ChannelStarter, retry_delay
from channels.accounts import DiscordAccount, SlackAccount, TelegramAccount
from channels.base import Capabilities, ChannelAdapter, InboundMessage
from channels.discord import DiscordAdapter
from channels.health import ChannelHealth
from channels.slack import SlackAdapter
from channels.start_errors import StartError, mask, start_error, why_unreachable
from channels.telegram import TelegramAdapter

OWNER = 4242
WRONG_TOKEN = "123456:not-the-token-of-this-bot"
DEGRADED = "channel telegram account main is degraded"
RECOVERED = "channel telegram account main recovered (was degraded)"


# --- the backoff, on a fake clock ------------------------------------------------------------------------------------


class FlakyAdapter:
    """An adapter whose start fails with `errors`, one per try, then succeeds."""

    channel = "flaky"
    capabilities = Capabilities()

    def __init__(self, errors: list[BaseException], account: str = "main") -> None:
        self.account = account
        self.errors = errors
        self.tries = 0
        self.health = ChannelHealth("flaky", account, secrets=["s3cret"])

    async def start(self, on_message: Any, on_action: Any) -> None:
        self.tries += 1
        if self.errors:
            raise self.errors.pop(0)
        self.health.set("connected")

    async def stop(self) -> None:
        self.health.set("stopped")


def as_adapter(adapter: FlakyAdapter) -> ChannelAdapter:
    return cast(ChannelAdapter, adapter)  # the part of the protocol a start needs


async def _nothing(message: InboundMessage) -> None:
    return None


async def _no_answer(event: Any) -> str | None:
    return None


def starter(clock: FakeClock, draw: float = 0.0, started: list[str] | None = None) -> ChannelStarter:
    return ChannelStarter(
        _nothing, _no_answer, sleep=clock.sleep, draw=lambda: draw,
        started=lambda adapter: (started if started is not None else []).append(adapter.account),
    )  # fmt: skip


def test_the_delay_doubles_from_one_second_to_five_minutes_shortened_by_jitter() -> None:
    assert [retry_delay(n, "unreachable", lambda: 0.0) for n in range(1, 12)] == [
        1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300,
    ]  # fmt: skip
    assert retry_delay(3, "not_found", lambda: 1.0) == pytest.approx(4 * 0.8)  # jitter: up to a fifth shorter
    assert retry_delay(1, "refused", lambda: 0.0) == MAX_DELAY  # a refused token: never in a hot loop


async def test_an_account_that_cannot_start_is_retried_with_backoff_until_it_starts() -> None:
    clock, started = FakeClock(), list[str]()
    adapter = FlakyAdapter([ConnectionRefusedError(111, "Connection refused")] * 4)
    board = starter(clock, started=started)
    assert adapter.health.snapshot().state == "starting"  # the first try
    await board.start(as_adapter(adapter))
    assert adapter.health.snapshot().state == "degraded"
    assert adapter.health.snapshot().last_error == "cannot reach the server (connection refused)"
    assert str(board.failures[("flaky", "main")]) == "flaky/main: cannot reach the server (connection refused)"
    assert board.serving == [] and started == []
    await eventually(lambda: board.serving == [("flaky", "main")], "the account to start at last")
    assert clock.slept == [1, 2, 4, 8] and adapter.tries == 5
    assert adapter.health.state == "connected" and board.failures == {} and started == ["main"]
    await board.stop()


async def test_a_refused_token_waits_the_longest_every_time() -> None:
    clock = FakeClock()
    refused = StartError("flaky", "main", "refused", "the token was refused (401): get a new one")
    adapter = FlakyAdapter([refused, refused])
    board = starter(clock)
    await board.start(as_adapter(adapter))
    assert board.all_refused()  # `bot run` ends: waiting changes nothing
    await eventually(lambda: board.serving == [("flaky", "main")], "the refused account to start at last")
    assert clock.slept == [MAX_DELAY, MAX_DELAY]
    await board.stop()


async def test_one_unreachable_account_keeps_the_bot_trying_and_is_named_beside_the_served_ones() -> None:
    clock = FakeClock()
    board = starter(clock)
    await board.start(as_adapter(FlakyAdapter([StartError("flaky", "main", "refused", "the token was refused (401)")])))
    await board.start(
        as_adapter(FlakyAdapter([ConnectionRefusedError(111, "Connection refused")] * 10**6, account="other"))
    )
    assert not board.all_refused()  # an unreachable server may come up: keep trying
    await eventually(lambda: ("flaky", "main") in board.serving, "the refused account to start at last")
    assert (
        serving_line(board)
        == "Serving flaky/main; still trying flaky/other: cannot reach the server (connection refused)."
    )
    await board.stop()  # ends the other's retries
    assert not [task for task in asyncio.all_tasks() if task.get_name().startswith("start flaky/")]


async def test_an_adapter_replaced_meanwhile_is_not_retried() -> None:
    clock, current = FakeClock(), {"yes": True}
    adapter = FlakyAdapter([ConnectionRefusedError(111, "Connection refused")] * 100)
    board = ChannelStarter(_nothing, _no_answer, sleep=clock.sleep, current=lambda _: current["yes"])
    await board.start(as_adapter(adapter))
    current["yes"] = False
    await eventually(lambda: ("flaky", "main") not in board.failures, "the retries to give up the replaced adapter")
    assert board.serving == []
    await board.stop()


def test_errors_name_the_cause_and_never_the_secrets() -> None:
    assert why_unreachable("aiohttp.ClientConnectorError: Cannot connect to host 127.0.0.1:1 ssl:default "
                           "[Connect call failed ('127.0.0.1', 1)]") == "connection refused"  # fmt: skip
    dns = "aiohttp.ClientConnectorDNSError: Cannot connect to host bot-api.invalid:443 ssl:default [Name or service "
    assert why_unreachable(dns + "not known]") == "no such host: the name does not resolve"
    assert why_unreachable("TimeoutError: ") == "timed out"
    assert why_unreachable("Unauthorized") is None
    assert mask("GET http://127.0.0.1:9/bot123:abc/getMe with s3cret", ["s3cret"]) == (
        "GET http://127.0.0.1:9/bot***/getMe with ***"
    )
    error = start_error("flaky", "main", RuntimeError("boom with s3cret"), secrets=["s3cret"])
    assert (error.kind, str(error)) == ("failed", "flaky/main: RuntimeError: boom with ***")


# --- the Telegram adapter's own words --------------------------------------------------------------------------------


async def telegram_start_error(token: str, api_base_url: str) -> StartError:
    adapter = TelegramAdapter("main", TelegramAccount(token=token, api_base_url=api_base_url, poll_timeout=1))
    try:
        with pytest.raises(StartError) as raised:
            await adapter.start(_nothing, _no_answer)
    finally:
        await adapter.stop()
    assert token not in str(raised.value)
    return raised.value


async def test_telegram_tells_a_refused_token_from_a_wrong_url_and_an_unreachable_server(
    fake_telegram: FakeTelegram,
) -> None:
    tg = fake_telegram
    refused = await telegram_start_error(WRONG_TOKEN, tg.url)
    assert (refused.kind, str(refused)) == (
        "refused",
        "telegram/main: the token was refused (401): get a new one from @BotFather and set it as "
        "channels.telegram.accounts.main.token",
    )
    malformed = await telegram_start_error("not-a-token", tg.url + "/nope")
    assert malformed.kind == "refused" and "(404: it is not of the form 123456789:AA…)" in str(malformed)
    wrong = await telegram_start_error(tg.token, tg.url + "/nope")
    assert (wrong.kind, str(wrong)) == (
        "not_found", f"telegram/main: api_base_url {tg.url}/nope answered 404 to getMe: check api_base_url"
    )  # fmt: skip
    with refusing_port() as port:
        gone = await telegram_start_error(tg.token, f"http://127.0.0.1:{port}")
    assert (gone.kind, str(gone)) == (
        "unreachable",
        f"telegram/main: cannot reach http://127.0.0.1:{port} (connection refused)",
    )


# --- through a real `bot run` ----------------------------------------------------------------------------------------


def config(tmp_path: Path, fake_llm: FakeLLM, accounts: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Telegram `accounts` (name: settings) that need not point at the fake: a wrong token, a URL that refuses."""
    parts = [channel("telegram", {"poll_timeout": 1} | settings, account=name) for name, settings in accounts.items()]
    return config_dict(
        tmp_path, fake_llm, *parts, agents=[{"id": "main", "default": True}], owners=[f"telegram:{OWNER}"]
    )


async def run_until_exit(tmp_path: Path, settings: dict[str, Any], *args: str) -> tuple[int, str]:
    """`bot run` on `settings` that is expected to end by itself: its exit status and its stdout and stderr."""
    path = tmp_path / "bindings.yaml"
    path.write_text(json.dumps(settings))
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "run", *args, "--config", str(path),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        out, err = await asyncio.wait_for(process.communicate(), 60)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode is not None
    return process.returncode, out.decode(errors="replace") + err.decode(errors="replace")


async def test_bot_run_with_a_refused_token_says_so_in_one_line_and_exits(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    settings = config(tmp_path, fake_llm, {"main": {"token": WRONG_TOKEN, "api_base_url": fake_telegram.url}})
    status, output = await run_until_exit(tmp_path, settings)
    assert status == 1, output
    assert (
        "telegram/main: the token was refused (401): get a new one from @BotFather and set it as "
        "channels.telegram.accounts.main.token\nNo channel could start: every token was refused."
    ) in output
    assert "Serving" not in output and "Traceback" not in output
    assert WRONG_TOKEN not in output and WRONG_TOKEN.split(":")[1] not in output

    status, verbose = await run_until_exit(tmp_path, settings, "-v")  # the traceback, for whoever asks for it
    assert status == 1 and "Traceback" in verbose, verbose
    assert WRONG_TOKEN.split(":")[1] not in verbose


async def test_bot_run_with_a_wrong_url_says_so_and_keeps_trying(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg = fake_telegram
    settings = config(tmp_path, fake_llm, {"main": {"token": tg.token, "api_base_url": tg.url + "/nope"}})
    line = f"telegram/main: api_base_url {tg.url}/nope answered 404 to getMe: check api_base_url"
    async with bot_run(settings, tmp_path, f"No channel started yet; still trying {line}"):
        await eventually(lambda: DEGRADED in _log(tmp_path), "the degraded account in the log")
    output = _log(tmp_path)
    assert f"{DEGRADED}: api_base_url {tg.url}/nope answered 404 to getMe: check api_base_url" in output
    assert "Serving telegram" not in output and "Traceback" not in output and tg.token not in output


async def test_bot_run_serves_the_accounts_it_can_and_says_which_it_is_still_trying(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg = fake_telegram
    fake_llm.script("Hello.")
    with refusing_port() as port:
        accounts = {
            "main": {"token": tg.token, "api_base_url": tg.url},
            "spare": {"token": "654321:another-token", "api_base_url": f"http://127.0.0.1:{port}"},
        }
        line = (
            f"Serving telegram/main; still trying telegram/spare: cannot reach http://127.0.0.1:{port} "
            "(connection refused)."
        )
        async with bot_run(config(tmp_path, fake_llm, accounts), tmp_path, line):
            await tg.private_message("hi", user_id=OWNER, name="Owner")
            assert await tg.wait_sent(OWNER, 1) == ["Hello."]
            await eventually(lambda: _in_status_file(tmp_path, "spare", "degraded"), "spare degraded")
            assert await _shows(tmp_path, "spare", "degraded")  # and `bot status` says so
    output = _log(tmp_path)
    assert "Traceback" not in output and "another-token" not in output


async def test_bot_run_polls_a_telegram_that_comes_up_after_it_and_answers_a_dm(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    fake_llm.script("Late hello.")
    stack = contextlib.ExitStack()
    port = stack.enter_context(refusing_port())  # refuses until the fake takes the port
    url = f"http://127.0.0.1:{port}"
    settings = config(tmp_path, fake_llm, {"main": {"token": "123456:TEST-token", "api_base_url": url}})
    line = f"No channel started yet; still trying telegram/main: cannot reach {url} (connection refused)"
    try:
        # the fake (in `fakes`) outlives the bot: the bot's last getUpdates at its stop lands
        async with contextlib.AsyncExitStack() as fakes, bot_run(settings, tmp_path, line):
            await eventually(lambda: _in_status_file(tmp_path, "main", "degraded"), "it degraded")
            assert await _shows(tmp_path, "main", "degraded")  # and `bot status` says so
            stack.close()  # Telegram comes up after the bot has tried and failed (`bot status` saw it degraded)
            tg = await fakes.enter_async_context(FakeTelegram(port=port))
            await eventually(lambda: RECOVERED in _log(tmp_path), "the account to recover")
            await tg.private_message("hi", user_id=OWNER, name="Owner")
            assert await tg.wait_sent(OWNER, 1) == ["Late hello."]
            await eventually(lambda: _in_status_file(tmp_path, "main", "connected"), "it connected")
            assert await _shows(tmp_path, "main", "connected")  # and `bot status` says so
            await eventually(lambda: settled(tmp_path / "state"), "the bot to have nothing left to do")
    finally:
        stack.close()
    process_log = _log(tmp_path)
    degraded = f"{DEGRADED}: cannot reach {url} (connection refused)"
    assert process_log.count(degraded) == 1 and process_log.count(RECOVERED) == 1  # one line each way
    assert process_log.index(degraded) < process_log.index("channel telegram account main started (after")
    assert "Traceback" not in process_log and "getUpdates failed" not in process_log


def _in_status_file(folder: Path, account: str, state: str) -> bool:
    return status_file_shows(folder / "state", "telegram", account, state)


def _log(folder: Path) -> str:
    return (folder / "bot.log").read_text(errors="replace")


async def _shows(folder: Path, account: str, state: str) -> bool:
    """Whether `bot status --json` beside the running bot shows telegram/`account` in `state`."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "status", "--json", "--config", str(folder / "bindings.yaml"),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    out, _ = await process.communicate()
    with contextlib.suppress(ValueError):
        for channel in json.loads(out).get("channels", []):
            if (channel["channel"], channel["account"]) == ("telegram", account):
                return bool(channel["state"] == state)
    return False


# --- Discord and Slack say the same things in their own words -------------------------------------------------------


async def discord_start_error(**settings: Any) -> StartError:
    adapter = DiscordAdapter("main", DiscordAccount.model_validate({"guild_ready_timeout": 0.05} | settings))
    with pytest.raises(StartError) as raised:
        await adapter.start(_nothing, _no_answer)
    await adapter.stop()
    assert settings["token"] not in str(raised.value)
    return raised.value


async def test_discord_tells_a_refused_token_from_a_wrong_url_and_an_unreachable_server(
    fake_discord: FakeDiscord,
) -> None:
    dc = fake_discord
    refused = await discord_start_error(**(dc.urls | {"token": "wrong-token"}))
    assert refused.kind == "refused"
    assert str(refused).startswith("discord/main: the token was refused (401): reset it in the Discord developer")
    api = dc.urls["api_base_url"]
    wrong = await discord_start_error(**(dc.urls | {"token": dc.token, "api_base_url": api + "/nope"}))
    assert (wrong.kind, str(wrong)) == (
        "not_found", f"discord/main: api_base_url {api}/nope answered 404 to GET /users/@me: check api_base_url"
    )  # fmt: skip
    with refusing_port() as port:
        nowhere = f"http://127.0.0.1:{port}"
        gone = await discord_start_error(**(dc.urls | {"token": dc.token, "api_base_url": nowhere}))
    assert (gone.kind, str(gone)) == ("unreachable", f"discord/main: cannot reach {nowhere} (connection refused)")


async def slack_start_error(**settings: Any) -> StartError:
    adapter = SlackAdapter("main", SlackAccount.model_validate(settings))
    with pytest.raises(StartError) as raised:
        await adapter.start(_nothing, _no_answer)
    await adapter.stop()
    assert settings["bot_token"] not in str(raised.value) and settings["app_token"] not in str(raised.value)
    return raised.value


async def test_slack_tells_a_refused_token_from_a_wrong_url_and_an_unreachable_server(fake_slack: FakeSlack) -> None:
    tokens = {"bot_token": fake_slack.bot_token, "app_token": fake_slack.app_token}
    refused = await slack_start_error(**(tokens | {"bot_token": "xoxb-wrong", "api_base_url": fake_slack.url}))
    assert (refused.kind, str(refused)) == (
        "refused",
        "slack/main: the token was refused (invalid_auth): copy the Bot User OAuth Token (xoxb-…) into "
        "channels.slack.accounts.main.bot_token",
    )
    wrong = await slack_start_error(**(tokens | {"api_base_url": fake_slack.url + "/nope"}))
    assert (wrong.kind, str(wrong)) == (
        "not_found", f"slack/main: api_base_url {fake_slack.url}/nope answered 404 to auth.test: check api_base_url"
    )  # fmt: skip
    with refusing_port() as port:
        nowhere = f"http://127.0.0.1:{port}"
        gone = await slack_start_error(**(tokens | {"api_base_url": nowhere}))
    assert (gone.kind, str(gone)) == ("unreachable", f"slack/main: cannot reach {nowhere} (connection refused)")
    app = await slack_start_error(**(tokens | {"app_token": "xapp-wrong", "api_base_url": fake_slack.url}))
    assert app.kind == "refused" and str(app).startswith("slack/main: apps.connections.open refused the app token:")
