"""The chat commands the gateway answers itself, before any agent sees the message: one table (name, aliases, who
may use it, help, menu text, what `bot chat` answers) that intake, the platforms' command menus, `/help` and
`bot chat` all read."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from agent.prompt import one_line
from tools.skills import Skill


@dataclass(frozen=True)
class ChatCommand:
    """One chat command: `/name` (or an alias), its line in `/help`, its entry in a platform's command menu (None:
    not listed there), and what `bot chat` answers for it when it has no meaning in the console (None: it has)."""

    name: str
    help: str  # after "/name" (and its aliases) in /help: its arguments, then what it does and who may use it
    menu: str | None = None
    aliases: tuple[str, ...] = ()
    console: str | None = None


TABLE: tuple[ChatCommand, ...] = (
    ChatCommand("new", ": start a fresh conversation (the settings below stay)", "Start a fresh conversation",
                aliases=("reset",)),
    ChatCommand("stop", ": stop the current answer and drop queued messages", "Stop the current answer"),
    ChatCommand("status", ": agent, model, session, tokens used, queue, this conversation's settings",
                "Agent, model, session and tokens"),
    ChatCommand("model", " [NAME|default]: list the models this conversation may use, or switch it to one",
                "Show or switch this chat's model"),
    ChatCommand("think", " [off|low|medium|high|default]: how hard the model thinks in this conversation",
                "Show or set the thinking level"),
    ChatCommand("queue", " [collect|followup|steer|interrupt|default]: what happens to messages sent while it answers",
                "Show or set the queue mode",
                console="bot chat answers one message at a time: queue modes are for the chats `bot run` serves."),
    ChatCommand("usage", ": tokens and estimated cost of this conversation (owners: and today's total)",
                "Tokens and cost of this chat"),
    ChatCommand("subagents", " [kill ID]: list this conversation's background tasks, or stop one",
                "List or stop background tasks",
                console="Background tasks run in the chats `bot run` serves (sessions_spawn is not offered here)."),
    ChatCommand("skill", " NAME [request]: answer using one of the agent's skills (/skill alone lists them)",
                "Use a skill (alone: list them)"),
    ChatCommand("whoami", ": your id as the bot's owners: list takes it, and whether you are an owner",
                "Your id, for the bot's owners list"),
    ChatCommand("help", ": this list", "List the commands"),
    ChatCommand("pair", " CODE: (owners) let the person who got this pairing code talk to the bot",
                console="Pairing lets people talk to the bot on a chat platform; the console is yours already."),
    ChatCommand("approve", " ID allow-once|allow-always|deny: (approvers) decide on a command waiting for approval",
                console="Commands that need an approval are asked here in the terminal, as they come."),
)  # fmt: skip
BY_NAME = {alias: command for command in TABLE for alias in (command.name, *command.aliases)}
COMMANDS = tuple(BY_NAME)  # every name a message may start with
HELP = "Commands:\n" + "\n".join(
    "/" + " or /".join((command.name, *command.aliases)) + command.help for command in TABLE
)
# The commands as a platform's command menu shows them (Telegram's setMyCommands), in the table's order.
COMMAND_MENU = tuple((command.name, command.menu) for command in TABLE if command.menu is not None)
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


def use_skill(skills: Sequence[Skill], args: str) -> tuple[str | None, str]:
    """`/skill NAME [request]` against the skills offered: (the message that asks the agent to use that skill,
    naming its SKILL.md to read first, ""), or (None, the reply listing the skills) for a missing or unknown name."""
    name, request = [*args.split(maxsplit=1), "", ""][:2]
    skill = next((item for item in skills if item.name == name.lower()), None) if name else None
    if skill is not None:
        return f"Use the skill {skill.name} (read {skill.file} first)" + (f": {request}" if request else "."), ""
    lead = f"No skill {one_line(name, 64)!r} here. " if name else ""
    if not skills:
        return None, lead + "This agent has no skills."
    listed = "\n".join(f"{item.name}: {one_line(item.description, 160)}" for item in skills)
    return None, f"{lead}Skills (/skill NAME request):\n{listed}"
