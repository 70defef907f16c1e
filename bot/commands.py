"""Chat commands the gateway answers itself, before any agent sees the message."""

from __future__ import annotations

import re
from dataclasses import dataclass

COMMANDS = ("new", "reset", "stop", "status", "help", "pair", "approve")
HELP = (
    "Commands:\n"
    "/new or /reset: start a fresh conversation\n"
    "/stop: stop the current answer and drop queued messages\n"
    "/status: agent, model, session, tokens used, queue\n"
    "/help: this list\n"
    "/pair CODE: (owners) let the person who got this pairing code talk to the bot\n"
    "/approve ID allow-once|allow-always|deny: (approvers) decide on a command waiting for approval"
)
# The commands as a platform's command menu shows them (Telegram's setMyCommands).
COMMAND_MENU = (
    ("new", "Start a fresh conversation"),
    ("stop", "Stop the current answer"),
    ("status", "Agent, model, session and tokens"),
    ("help", "List the commands"),
)
_COMMAND = re.compile(r"^/([A-Za-z_]+)(?:@([A-Za-z0-9_]+))?(?:\s+(.*))?$", re.DOTALL)


@dataclass(frozen=True)
class Command:
    name: str
    args: str


def parse_command(text: str, bot_username: str | None = None) -> Command | None:
    """A command for this bot, or None (plain text, an unknown command, or `/cmd@otherbot`)."""
    match = _COMMAND.match(text.strip())
    if match is None:
        return None
    name, addressee, args = match.group(1).lower(), match.group(2), match.group(3) or ""
    if name not in COMMANDS:
        return None
    if addressee and bot_username and addressee.lower() != bot_username.lower():
        return None
    return Command(name, args.strip())
