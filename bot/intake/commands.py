"""The chat commands the gateway answers itself, before any agent sees the message: one table (name, aliases, who
may use it, help, menu text, what `bot chat` answers, the handler) that intake, the platforms' command menus,
`/help` and `bot chat` all read."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from bot.intake import handlers
from bot.intake.handlers import Command, CommandHandler, CommandParts
from bot.turns.turn import Job

__all__ = ["BY_NAME", "COMMANDS", "COMMAND_MENU", "HELP", "TABLE", "ChatCommand", "Command", "Who", "parse_command"]

# Who may use a command: anyone the bot answers; the bot's owners (intake refuses the others); the approvers of the
# request it names (the approvals decide); or as the agent's `agents[].commands.<name>` setting says, for a change.
Who = Literal["everyone", "owners", "approvers", "setting"]


@dataclass(frozen=True)
class ChatCommand:
    """One chat command: `/name` (or an alias), its arguments and what it does (its line in `/help`), who may use
    it, its entry in a platform's command menu (None: not listed there), what `bot chat` answers for it when it has
    no meaning in the console (None: it has), and its handler."""

    name: str
    args: str
    does: str
    handler: CommandHandler
    menu: str | None = None
    who: Who = "everyone"
    aliases: tuple[str, ...] = ()
    console: str | None = None

    @property
    def help(self) -> str:
        """Its line in `/help`."""
        names = " or /".join((self.name, *self.aliases))
        who = f"({self.who}) " if self.who in ("owners", "approvers") else ""
        return f"/{names}{' ' + self.args if self.args else ''}: {who}{self.does}"


async def _help(parts: CommandParts, job: Job, command: Command) -> str:
    return HELP


TABLE: tuple[ChatCommand, ...] = (
    ChatCommand("new", "", "start a fresh conversation (the settings below stay)", handlers.new,
                "Start a fresh conversation", who="setting", aliases=("reset",)),
    ChatCommand("stop", "", "stop the current answer and drop queued messages", handlers.stop,
                "Stop the current answer", who="setting"),
    ChatCommand("status", "", "agent, model, session, tokens used, queue, this conversation's settings",
                handlers.status, "Agent, model, session and tokens"),
    ChatCommand("model", "[NAME|default]", "list the models this conversation may use, or switch it to one",
                handlers.model, "Show or switch this chat's model", who="setting"),
    ChatCommand("think", "[off|low|medium|high|default]", "how hard the model thinks in this conversation",
                handlers.think, "Show or set the thinking level", who="setting"),
    ChatCommand("queue", "[collect|followup|steer|interrupt|default]",
                "what happens to messages sent while it answers", handlers.queue, "Show or set the queue mode",
                who="setting",
                console="bot chat answers one message at a time: queue modes are for the chats `bot run` serves."),
    ChatCommand("usage", "", "tokens and estimated cost of this conversation (owners: and today's total)",
                handlers.usage, "Tokens and cost of this chat"),
    ChatCommand("subagents", "[kill ID]", "list this conversation's background tasks, or stop one",
                handlers.subagents, "List or stop background tasks",
                console="Background tasks run in the chats `bot run` serves (sessions_spawn is not offered here)."),
    ChatCommand("skill", "NAME [request]", "answer using one of the agent's skills (/skill alone lists them)",
                handlers.skill, "Use a skill (alone: list them)"),
    ChatCommand("whoami", "", "your id as the bot's owners: list takes it, and whether you are an owner",
                handlers.whoami_command, "Your id, for the bot's owners list"),
    ChatCommand("help", "", "this list", _help, "List the commands"),
    ChatCommand("pair", "CODE", "let the person who got this pairing code talk to the bot", handlers.pair,
                who="owners",
                console="Pairing lets people talk to the bot on a chat platform; the console is yours already."),
    ChatCommand("approve", "ID allow-once|allow-always|deny", "decide on a command waiting for approval",
                handlers.approve, who="approvers",
                console="Commands that need an approval are asked here in the terminal, as they come."),
)  # fmt: skip
BY_NAME = {alias: command for command in TABLE for alias in (command.name, *command.aliases)}
COMMANDS = tuple(BY_NAME)  # every name a message may start with
HELP = "Commands:\n" + "\n".join(command.help for command in TABLE)
# The commands as a platform's command menu shows them (Telegram's setMyCommands), in the table's order.
COMMAND_MENU = tuple((command.name, command.menu) for command in TABLE if command.menu is not None)
_COMMAND = re.compile(r"^/([A-Za-z_]+)(?:@([A-Za-z0-9_]+))?(?:\s+(.*))?$", re.DOTALL)


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
