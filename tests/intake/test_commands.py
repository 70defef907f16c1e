"""Parsing chat commands: known names, arguments, and commands addressed to another bot."""

from __future__ import annotations

from bot.intake.commands import Command, parse_command


def test_known_commands_are_parsed_with_their_arguments() -> None:
    assert parse_command("/new") == Command("new", "")
    assert parse_command("  /STATUS  ") == Command("status", "")
    assert parse_command("/stop now please") == Command("stop", "now please")


def test_plain_text_and_unknown_commands_are_not_commands() -> None:
    assert parse_command("hello /new") is None
    assert parse_command("/unknown") is None
    assert parse_command("/") is None


def test_a_command_for_another_bot_is_ignored() -> None:
    assert parse_command("/new@switchboard_bot", "Switchboard_Bot") == Command("new", "")
    assert parse_command("/new@other_bot", "switchboard_bot") is None
    assert parse_command("/help@any_bot") == Command("help", "")  # the bot's own name is unknown here
