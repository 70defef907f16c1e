"""The tools Switchboard ships, registered in one place."""

from __future__ import annotations

from channels.base import Capabilities, ChatTarget, OutboundMessage
from tools.base import Tool, ToolContext
from tools.cron import CronTool
from tools.exec import Authorization, Authorize, ExecTool, ProcessTable, ProcessTool
from tools.fs import fs_tools
from tools.memory import memory_tools
from tools.message import MessageTool, Messenger
from tools.registry import ToolRegistry, ToolSetup
from tools.session_status import SessionStatus
from tools.sessions import session_tools
from tools.subagents import subagent_tools
from tools.web import WebFetch, web_tools


class NoChats:
    """The Messenger where no channel runs (`bot tools`, `bot prompt`, `bot chat`): every send fails."""

    def capabilities(self, channel: str, account: str) -> Capabilities | None:
        return None

    def accounts(self) -> list[tuple[str, str]]:
        return []

    async def send(self, target: ChatTarget, message: OutboundMessage, *, key: str | None = None) -> str | None:
        raise LookupError("no channel is running here")

    async def edit(self, target: ChatTarget, message_id: str, message: OutboundMessage) -> None:
        raise LookupError("no channel is running here")

    async def delete(self, target: ChatTarget, message_id: str) -> None:
        raise LookupError("no channel is running here")

    async def react(self, target: ChatTarget, message_id: str, emoji: str) -> None:
        raise LookupError("no channel is running here")

    async def create_thread(self, target: ChatTarget, name: str, message_id: str | None = None) -> str:
        raise LookupError("no channel is running here")

    async def is_approval_card(self, target: ChatTarget, message_id: str) -> bool:
        return False  # nothing is shown anywhere here


async def nobody_to_ask(command: str, ctx: ToolContext) -> Authorization:
    """The Authorize where nobody can approve anything: every command is denied."""
    return Authorization(allowed=False, status="denied", reason="no approvals can be asked for here")


def builtin_tools(setup: ToolSetup) -> list[Tool]:
    """The built-in tools (the tool plugin `builtins`): `message` only with a messenger (`NoChats()` lists it where
    no channel runs, as `bot tools` does); `cron` only with a job book, the session tools only with a session book
    and the subagent tools only with a spawner (a running gateway); `web_search` only with BRAVE_API_KEY set."""
    tools: list[Tool] = [SessionStatus()]
    if setup.messenger is not None:
        tools.append(MessageTool(setup.messenger, fetcher=WebFetch(), sent=setup.sent))
    processes = setup.processes
    tools += [ExecTool(setup.authorize, processes), ProcessTool(processes), *fs_tools(), *web_tools(), *memory_tools()]
    if setup.jobs is not None:
        tools.append(CronTool(setup.jobs))
    if setup.sessions is not None:
        tools += session_tools(setup.sessions)
    if setup.subagents is not None:
        tools += subagent_tools(setup.subagents)
    return tools


def builtin_registry(
    *,
    messenger: Messenger | None = None,
    authorize: Authorize = nobody_to_ask,
    processes: ProcessTable | None = None,
) -> ToolRegistry:
    """A registry of the built-in tools alone, wired to the given chats and approvals."""
    return ToolRegistry(builtin_tools(ToolSetup(messenger, authorize, processes or ProcessTable())))
