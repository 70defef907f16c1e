"""Live reload through a real `bot run` (the fake Telegram, the fake LLM): a binding changed on disk routes the next
message to the new agent with no restart, a broken edit (or one `bot run` would refuse at start: a workspace holding
the config) leaves the old config serving, SIGHUP reloads at once, `.env` waits for the next start, and a channel
account whose settings changed is restarted alone; which sections need a restart."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

from configs import config_dict, telegram
from fakes.llm import FakeLLM
from fakes.telegram import FakeTelegram
from helpers import eventually, launch_bot

from bot.config.loading import parse_config
from bot.gateway.reload import changed_accounts, needs_restart

OWNER = 4242
STARTED = "channel telegram account main started"
RELOADED = "reloaded: it applies from the next message"


def config(tmp_path: Path, fake_llm: FakeLLM, tg: FakeTelegram, dm_agent: str, **account: Any) -> dict[str, Any]:
    """Two agents on their own models (the fake LLM's recorded request says which answered); DMs go to `dm_agent`."""
    return config_dict(
        tmp_path, fake_llm, telegram(tg, **account), defaults={"model": "fake/main-model"},
        agents=[{"id": "main", "default": True}, {"id": "ops", "model": "fake/ops-model"}],
        bindings=[{"agent": dm_agent, "match": {"channel": "telegram", "account": "main",
                                                "peer": {"kind": "direct", "id": "*"}}}],
        owners=[f"telegram:{OWNER}"],
    )  # fmt: skip


async def answered_by(llm: FakeLLM, tg: FakeTelegram, text: str) -> str:
    """The owner says `text`; the model id of the request that answered it."""
    llm.script(f"re: {text}")
    before = len(tg.sent.get(OWNER, []))
    await tg.private_message(text, user_id=OWNER, name="Owner")
    await tg.wait_sent(OWNER, before + 1)
    return str(llm.requests[-1].body["model"])


async def test_a_binding_changed_on_disk_routes_the_next_message_and_a_broken_edit_keeps_the_old_config(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg, path, log = fake_telegram, tmp_path / "bindings.yaml", tmp_path / "bot.log"
    process = await launch_bot(config(tmp_path, fake_llm, tg, "main"), tmp_path, STARTED)
    try:
        assert await answered_by(fake_llm, tg, "first") == "main-model"

        path.write_text(json.dumps(config(tmp_path, fake_llm, tg, "ops")))
        await eventually(lambda: RELOADED in log.read_text(), "the reload")
        assert await answered_by(fake_llm, tg, "second") == "ops-model"  # the same process, the new binding

        path.write_text("bindings: [\n  - agent: main\n")  # broken YAML
        await eventually(lambda: "is not valid; the bot keeps the config it had" in log.read_text(), "the refusal")
        assert await answered_by(fake_llm, tg, "third") == "ops-model"  # the old config still serving
        assert f"{path}:2:3: invalid YAML" in log.read_text()  # the error with its line and column

        path.write_text(json.dumps(config(tmp_path, fake_llm, tg, "main")))
        process.send_signal(signal.SIGHUP)
        await eventually(lambda: log.read_text().count(RELOADED) == 2, "the reload after SIGHUP")
        assert await answered_by(fake_llm, tg, "fourth") == "main-model"
        assert "channel telegram account main stopped" not in log.read_text()  # its settings never changed
        assert process.returncode is None
    finally:
        process.send_signal(signal.SIGTERM)
        await process.wait()


async def test_a_channel_account_whose_settings_changed_is_restarted_alone(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg, path, log = fake_telegram, tmp_path / "bindings.yaml", tmp_path / "bot.log"
    process = await launch_bot(config(tmp_path, fake_llm, tg, "main"), tmp_path, STARTED)
    try:
        assert await answered_by(fake_llm, tg, "before") == "main-model"
        path.write_text(json.dumps(config(tmp_path, fake_llm, tg, "main", streaming="off")))
        await eventually(lambda: "channel telegram account main stopped (its settings changed)" in log.read_text(),
                         "the account to be stopped")  # fmt: skip
        await eventually(lambda: log.read_text().count(STARTED) == 2, "the account to be started again")
        assert await answered_by(fake_llm, tg, "after") == "main-model"
        assert tg.sent[OWNER] == ["re: before", "re: after"]
    finally:
        process.send_signal(signal.SIGTERM)
        assert await process.wait() == 0


def test_which_accounts_restart_and_which_sections_wait_for_the_next_start() -> None:
    def parsed(**changes: Any) -> Any:
        base: dict[str, Any] = {
            "channels": {"telegram": {"accounts": {"main": {"token": "1:a"}, "other": {"token": "2:b"}}}},
        }
        return parse_config(json.dumps(base | changes))

    old = parsed()
    new = parsed(channels={"telegram": {"accounts": {"main": {"token": "1:a", "streaming": "off"},
                                                     "third": {"token": "3:c"}}}})  # fmt: skip
    stop, start = changed_accounts(old, new)
    assert stop == {("telegram", "main"), ("telegram", "other")}
    assert start == {("telegram", "main"), ("telegram", "third")}
    assert needs_restart(old, parsed(admin={"listen": "127.0.0.1:9464"}, owners=["telegram:1"])) == ["admin"]


async def test_a_reload_whose_workspace_holds_the_config_is_refused_and_the_old_config_keeps_serving(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg, path, log = fake_telegram, tmp_path / "bindings.yaml", tmp_path / "bot.log"
    process = await launch_bot(config(tmp_path, fake_llm, tg, "main"), tmp_path, STARTED)
    try:
        assert await answered_by(fake_llm, tg, "before") == "main-model"
        edited = config(tmp_path, fake_llm, tg, "ops")  # would route DMs to ops, whose workspace holds the config
        edited["agents"][1]["workspace"] = str(tmp_path)
        path.write_text(json.dumps(edited))
        await eventually(lambda: "is not valid; the bot keeps the config it had" in log.read_text(), "the refusal")
        assert f"{path}:1: agents[1].workspace: agent 'ops': the workspace {tmp_path} holds the config file" in (
            log.read_text()
        )
        assert await answered_by(fake_llm, tg, "after") == "main-model"  # the old config still serving
        assert RELOADED not in log.read_text()
    finally:
        process.send_signal(signal.SIGTERM)
        assert await process.wait() == 0


async def test_dotenv_edited_while_running_changes_nothing_until_the_next_start(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg, log = fake_telegram, tmp_path / "bot.log"
    settings = config(tmp_path, fake_llm, tg, "main")
    settings["defaults"]["model"] = "fake/${DOTENV_MODEL:-main-model}"
    process = await launch_bot(settings, tmp_path, STARTED)
    try:
        assert await answered_by(fake_llm, tg, "before") == "main-model"
        (tmp_path / ".env").write_text("DOTENV_MODEL=dotenv-model\n")
        process.send_signal(signal.SIGHUP)  # a reload, as an edit of bindings.yaml would make
        await eventually(lambda: RELOADED in log.read_text(), "the reload")
        assert await answered_by(fake_llm, tg, "after the reload") == "main-model"  # .env was not read again
    finally:
        process.send_signal(signal.SIGTERM)
        assert await process.wait() == 0
    process = await launch_bot(settings, tmp_path, STARTED)  # the control: at the next start it applies
    try:
        assert await answered_by(fake_llm, tg, "after the restart") == "dotenv-model"
    finally:
        process.send_signal(signal.SIGTERM)
        assert await process.wait() == 0
