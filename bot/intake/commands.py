"""Chat commands the gateway answers itself, before any agent sees the message."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from agent.prompt import one_line
from tools.skills import Skill

COMMANDS = (
    "new", "reset", "stop", "status", "skill", "help", "pair", "approve",
    "model", "think", "queue", "usage", "subagents", "whoami",
)  # fmt: skip
HELP = (
    "Commands:\n"
    "/new or /reset: start a fresh conversation (the settings below stay)\n"
    "/stop: stop the current answer and drop queued messages\n"
    "/status: agent, model, session, tokens used, queue, this conversation's settings\n"
    "/model [NAME|default]: list the models this conversation may use, or switch it to one\n"
    "/think [off|low|medium|high|default]: how hard the model thinks in this conversation\n"
    "/queue [collect|followup|steer|interrupt|default]: what happens to messages sent while it answers\n"
    "/usage: tokens and estimated cost of this conversation (owners: and today's total)\n"
    "/subagents [kill ID]: list this conversation's background tasks, or stop one\n"
    "/skill NAME [request]: answer using one of the agent's skills (/skill alone lists them)\n"
    "/whoami: your id as the bot's owners: list takes it, and whether you are an owner\n"
    "/help: this list\n"
    "/pair CODE: (owners) let the person who got this pairing code talk to the bot\n"
    "/approve ID allow-once|allow-always|deny: (approvers) decide on a command waiting for approval"
)
# The commands as a platform's command menu shows them (Telegram's setMyCommands).
COMMAND_MENU = (
    ("new", "Start a fresh conversation"),
    ("stop", "Stop the current answer"),
    ("status", "Agent, model, session and tokens"),
    ("skill", "Use a skill (alone: list them)"),
    ("model", "Show or switch this chat's model"),
    ("think", "Show or set the thinking level"),
    ("queue", "Show or set the queue mode"),
    ("usage", "Tokens and cost of this chat"),
    ("subagents", "List or stop background tasks"),
    ("whoami", "Your id, for the bot's owners list"),
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
