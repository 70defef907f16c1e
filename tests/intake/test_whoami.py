"""`/whoami` and `bot owners add|list`: a sender learns the exact id `owners:` takes (even a stranger, before pairing,
who gets that and nothing else), and the CLI writes it into the config file changing no other line."""

from __future__ import annotations

import asyncio
import difflib
import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from configs import config_dict, config_of, telegram
from fakes.llm import FakeLLM
from fakes.telegram import FakeTelegram
from helpers import bot_run, eventually, read_state

from bot import App, parse_config
from bot.cli.main import cli
from bot.config.loading import load_config
from bot.config.owners_file import add_owner, edit_text, parse_owner
from bot.config.settings import Config
from bot.intake.commands import COMMAND_MENU, COMMANDS, HELP, parse_command
from channels import MemoryChannel
from channels.base import AccountSettings

SHIPPED = Path(__file__).resolve().parent.parent.parent / "bindings.example.yaml"
STARTED = "channel telegram account main started"
# Dummy values for the variables the shipped example refers to.
EXAMPLE_ENV = {
    "OPENROUTER_API_KEY": "k", "TELEGRAM_BOT_TOKEN": "t", "DISCORD_BOT_TOKEN": "d", "SLACK_BOT_TOKEN": "s",
    "SLACK_APP_TOKEN": "a",
}  # fmt: skip


def config(llm: FakeLLM, tmp_path: Path) -> Config:
    return config_of(tmp_path, llm, owners=["memory:ann"])


def journal(state: Path) -> list[tuple[str, str | None]]:
    """(status, reason) of every message the bot took in, in order."""
    return [(row[0], row[1]) for row in read_state(state, "SELECT status, error FROM inbound ORDER BY id")]


# --- /whoami in the gateway -----------------------------------------------------------------------------------------


def test_whoami_is_a_listed_command_in_the_help_and_the_menu() -> None:
    assert "whoami" in COMMANDS and "/whoami" in HELP and "whoami" in dict(COMMAND_MENU)
    assert parse_command("/whoami") is not None


async def test_an_owner_and_an_allowed_sender_learn_their_id_without_the_agent(
    fake_llm: FakeLLM, tmp_path: Path
) -> None:
    chat = MemoryChannel(settings=AccountSettings(dm_policy="pairing", allow_from=["bob"]))
    async with App(config(fake_llm, tmp_path), tmp_path / "state", adapters=[chat]).running():
        await chat.say("/whoami", sender="ann")
        [owner] = await chat.replies()
        await chat.say("/whoami", sender="bob")
        [allowed] = await chat.replies()
    assert owner.text == "Your id: memory:ann\nYou are an owner of this bot."
    assert allowed.text.startswith("Your id: memory:bob\nYou are not an owner of this bot.")
    assert "`- memory:bob` under `owners:`" in allowed.text and allowed.text.endswith("\nbot owners add memory:bob")
    assert fake_llm.requests == [] and chat.typing_in == []


async def test_a_stranger_learns_their_id_and_nothing_else_and_pairing_is_unchanged(
    fake_llm: FakeLLM, tmp_path: Path
) -> None:
    chat = MemoryChannel(settings=AccountSettings(dm_policy="pairing"))
    state = tmp_path / "state"
    async with App(config(fake_llm, tmp_path), state, adapters=[chat]).running() as gateway:
        await chat.say("/whoami", sender="eve")
        [told] = await chat.replies()
        assert told.text == "Your id: memory:eve"
        assert await gateway.store.pending_pairings() == []  # asking for one's id makes no pairing request

        await chat.say("hello", sender="eve")  # the pairing flow as before, its reply naming the id too
        [code] = await chat.replies()
        assert code.text.startswith("Hi! I don't know you yet. Your pairing code is ")
        assert code.text.endswith("Your id: memory:eve")
        [pending] = await gateway.store.pending_pairings()

        await chat.say("/whoami", sender="eve")  # while the code waits: the code is neither used nor replaced
        [again] = await chat.replies()
        assert again.text == "Your id: memory:eve"
        assert await gateway.store.pending_pairings() == [pending]
        assert not await gateway.store.is_allowed_sender("memory", "default", "eve")
        await eventually(lambda: len(journal(state)) == 3 and journal(state)[-1][0] == "done", "the journal rows")
    assert fake_llm.requests == [] and chat.typing_in == []  # no agent, no typing
    assert journal(state) == [
        ("done", "stranger asked /whoami"), ("done", "pairing requested"), ("done", "stranger asked /whoami"),
    ]  # fmt: skip


async def test_no_answer_where_direct_messages_are_disabled_or_the_sender_is_a_bot(
    fake_llm: FakeLLM, tmp_path: Path
) -> None:
    chat = MemoryChannel(settings=AccountSettings(dm_policy="disabled"))
    state = tmp_path / "state"
    async with App(config(fake_llm, tmp_path), state, adapters=[chat]).running():
        await chat.say("/whoami", sender="eve")
        await chat.say("/whoami", sender="robot", sender_is_bot=True)
        await chat.say("/whoami", sender="ann")  # an owner is answered whatever the policy
        [owner] = await chat.replies()
        await eventually(lambda: len(journal(state)) == 3, "three journal rows")
    assert owner.text == "Your id: memory:ann\nYou are an owner of this bot."
    assert [sent.target.peer.id for sent in chat.sent] == ["ann"]
    assert [detail for _, detail in journal(state)][:2] == [
        "ignored: direct messages are disabled for this account", "ignored: sent by a bot",
    ]  # fmt: skip


# --- /whoami through a real `bot run` on the fake Telegram ----------------------------------------------------------


async def test_whoami_on_telegram_before_and_after_the_pairing_code(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg = fake_telegram
    owner, stranger = 4242, 555
    settings = config_dict(tmp_path, fake_llm, telegram(tg, streaming="off"), owners=[f"telegram:{owner}"])
    async with bot_run(settings, tmp_path, STARTED):
        menu = [command["command"] for command in (await tg.wait_calls("setMyCommands", 1))[-1]["commands"]]
        assert "whoami" in menu
        await tg.private_message("/whoami", user_id=owner, name="Owner")
        assert await tg.wait_sent(owner, 1) == ["Your id: telegram:4242\nYou are an owner of this bot."]
        await tg.private_message("/whoami", user_id=stranger, name="Eve")
        assert await tg.wait_sent(stranger, 1) == ["Your id: telegram:555"]
        await tg.private_message("hi", user_id=stranger, name="Eve")
        [_, pairing] = await tg.wait_sent(stranger, 2)
        assert "Your pairing code is " in pairing and pairing.endswith("Your id: telegram:555")
        rows = read_state(tmp_path / "state", "SELECT count(*) FROM pairing WHERE sender_id = ?", str(stranger))
        assert rows == [(1,)]  # one code, made by "hi", not by /whoami
    assert fake_llm.requests == []
    assert all(call["chat_id"] != stranger for call in tg.calls("sendChatAction"))  # no typing for the stranger


async def test_a_stranger_made_an_owner_with_bot_owners_add_is_one_from_the_next_message(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg = fake_telegram
    settings = config_dict(tmp_path, fake_llm, telegram(tg, streaming="off"), owners=["telegram:4242"])
    fake_llm.script("Hello, owner.")
    async with bot_run(settings, tmp_path, STARTED) as path:
        await tg.private_message("/whoami", user_id=555, name="Eve")
        [told] = await tg.wait_sent(555, 1)
        code, _, err = await _bot("owners", "add", told.removeprefix("Your id: "), "--config", str(path))
        assert code == 0, err
        assert json.loads(path.read_text())["owners"] == ["telegram:4242", "telegram:555"]  # JSON stays JSON
        await eventually(lambda: "reloaded: it applies" in (tmp_path / "bot.log").read_text(), "the reload")
        await tg.private_message("/whoami", user_id=555, name="Eve")
        assert (await tg.wait_sent(555, 2))[-1] == "Your id: telegram:555\nYou are an owner of this bot."
        await tg.private_message("hi", user_id=555, name="Eve")
        assert (await tg.wait_sent(555, 3))[-1] == "Hello, owner."


# --- bot owners add | list ------------------------------------------------------------------------------------------


def _env_without_keys() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if not key.endswith(("_API_KEY", "_TOKEN"))}


async def _bot(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """`bot <args>`, a real process, without the caller's keys and tokens; its exit status, stdout and stderr."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=_env_without_keys() | (env or {}),
    )  # fmt: skip
    out, err = await process.communicate()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_bot_owners_add_on_the_shipped_example_adds_one_line_and_is_idempotent(tmp_path: Path) -> None:
    path = tmp_path / "bindings.yaml"
    shutil.copy(SHIPPED, path)
    before = path.read_text()
    code, out, err = await _bot("owners", "add", "Telegram:4242", "--config", str(path))
    assert code == 0, err
    assert out.startswith("Added telegram:4242 to owners in ")
    after = path.read_text()
    changed = [line for line in difflib.ndiff(before.splitlines(), after.splitlines()) if line[:1] in "+-?"]
    assert changed == ["+   - telegram:4242"]  # comments, order and everything else as they were
    lines = after.splitlines()
    above = lines[lines.index("  - telegram:4242") - 1]
    assert above.startswith("  - ") or above == "owners:"  # right below the owners already listed (none shipped)
    assert after.replace("  - telegram:4242\n", "", 1) == before
    assert "telegram:4242" in load_config(path, environ=EXAMPLE_ENV).owners  # it still loads, with the new owner

    code, out, err = await _bot("owners", "add", "telegram:4242", "--config", str(path))
    assert (code, out) == (0, f"telegram:4242 is already an owner ({path}).\n")
    assert path.read_text() == after
    code, out, err = await _bot("owners", "list", "--config", str(path), env=EXAMPLE_ENV)
    assert code == 0, err
    assert out.splitlines()[-1] == "telegram:4242"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "owners:\n- telegram:1  # me\n\n# more below\nagents: []\n",
            "owners:\n- telegram:1  # me\n- slack:U1\n\n# more below\nagents: []\n",
        ),
        ("owners:\r\n    -   telegram:1\r\n", "owners:\r\n    -   telegram:1\r\n    -   slack:U1\r\n"),
        ("owners:\n  - telegram:1", "owners:\n  - telegram:1\n  - slack:U1\n"),
        ("owners: [telegram:1]  # inline\n", 'owners: [telegram:1, "slack:U1"]  # inline\n'),
        ("owners: []\n", 'owners: ["slack:U1"]\n'),
        ('{"owners": ["telegram:1"], "agents": []}\n', '{"owners": ["telegram:1", "slack:U1"], "agents": []}\n'),
        ("owners:\n# nobody yet\nagents: []\n", "owners:\n  - slack:U1\n# nobody yet\nagents: []\n"),
        ("# a config\nagents: []\n", "# a config\nagents: []\n\nowners:\n  - slack:U1\n"),
        ("", "owners:\n  - slack:U1\n"),
    ],
)
def test_the_owner_goes_beside_its_siblings_in_the_files_own_style(text: str, expected: str) -> None:
    assert edit_text(text, "slack:U1") == (expected, "")


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("owners: ${OWNERS}\n", "owners: is '${OWNERS}', not a list"),
        ("owners: [a,\n  b]\n", "a flow list ([...]) over several lines"),
        ("owners: &them\n  - telegram:1\napprovers: *them\n", "anchor or alias"),
        ('{"agents": []}\n', "flow style"),
        ("owners: ~\n", "owners: is empty in a form"),
    ],
)
def test_a_file_it_cannot_edit_is_left_alone_and_the_line_to_add_is_printed(
    tmp_path: Path, text: str, why: str
) -> None:
    path = tmp_path / "bindings.yaml"
    path.write_text(text)
    result = CliRunner().invoke(cli, ["owners", "add", "telegram:4242", "--config", str(path)])
    assert result.exit_code == 1
    assert why in result.stderr and "Nothing changed: " in result.stderr
    assert "  - telegram:4242\n" in result.stderr.split("yourself:\n", 1)[1]
    assert path.read_text() == text
    assert [p.name for p in tmp_path.iterdir()] == ["bindings.yaml"]  # no temporary file left behind


def test_an_owner_already_listed_is_not_added_again_and_the_files_mode_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "bindings.yaml"
    text = "owners:\n  - telegram:1\n"
    path.write_text(text)
    path.chmod(0o640)
    assert add_owner(path, "telegram:1").status == "already"
    assert add_owner(path, "TELEGRAM:1").status == "already"
    edit = add_owner(path, "discord:7")
    assert (edit.status, edit.warnings) == ("added", ())
    assert path.read_text() == text + "  - discord:7\n"
    assert path.stat().st_mode & 0o777 == 0o640  # the file's mode is kept


def test_problems_the_file_already_had_are_warnings_and_new_ones_refuse(tmp_path: Path) -> None:
    path = tmp_path / "bindings.yaml"
    path.write_text("owners:\n  - telegram:1\ntyop: 1\n")
    edit = add_owner(path, "slack:U1")
    assert edit.status == "added" and len(edit.warnings) == 1 and "tyop" in edit.warnings[0]
    assert path.read_text() == "owners:\n  - telegram:1\n  - slack:U1\ntyop: 1\n"


def test_owner_ids_are_checked_and_normalized_like_owners_are_compared() -> None:
    assert parse_owner(" Telegram:4242 ") == "telegram:4242"
    assert parse_owner("slack:U0ABC") == "slack:U0ABC"  # the id exactly as the platform writes it
    for bad in ("4242", "telegram:", ":4242", "tele gram:1", "telegram:a b"):
        with pytest.raises(ValueError, match="is not <channel>:<id>"):
            parse_owner(bad)
    result = CliRunner().invoke(cli, ["owners", "add", "4242", "--config", "nowhere.yaml"])
    assert result.exit_code == 2 and "is not <channel>:<id>" in result.stderr


def test_a_quoted_id_where_a_plain_one_would_not_read_back(tmp_path: Path) -> None:
    path = tmp_path / "bindings.yaml"
    path.write_text("owners:\n  - telegram:1\n")
    assert add_owner(path, "discord:a#b").status == "added"
    assert path.read_text().endswith('  - "discord:a#b"\n')
    assert parse_config(path.read_text()).owners == ["telegram:1", "discord:a#b"]


def test_bot_owners_list(tmp_path: Path) -> None:
    path = tmp_path / "bindings.yaml"
    path.write_text("owners: [Telegram:1, slack:U1]\n")
    result = CliRunner().invoke(cli, ["owners", "list", "--config", str(path)])
    assert (result.exit_code, result.stdout) == (0, "telegram:1\nslack:U1\n")
    path.write_text("agents: []\n")
    result = CliRunner().invoke(cli, ["owners", "list", "--config", str(path)])
    assert result.exit_code == 0 and result.stdout.startswith("No owners:")
