"""`session_status`: the agent can tell who it is, which conversation it is in, and which model answers."""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar

from pydantic import BaseModel

from tools.base import Tool, ToolContext, ToolResult, json_result
from tools.clock import zone, zone_name


class NoArguments(BaseModel):
    """This tool takes no arguments."""


class SessionStatus(Tool):
    name: ClassVar[str] = "session_status"
    label: ClassVar[str] = "Session status"
    description: ClassVar[str] = (
        "Show this conversation's facts: agent id, session key, channel, who is writing (and whether they own "
        "the bot), the model answering, the workspace folder, and the current time. Takes no arguments."
    )
    parameters: ClassVar[type[BaseModel]] = NoArguments

    async def execute(self, call_id: str, args: NoArguments, ctx: ToolContext) -> ToolResult:
        run = ctx.run
        return json_result(
            {
                "agent": run.agent,
                "session_key": run.session_key,
                "channel": run.channel,
                "sender": run.sender_name or run.sender_id,
                "sender_is_owner": run.sender_is_owner,
                "model": run.model,
                "workspace": run.workspace,
                "now": datetime.now(zone(run.timezone)).replace(microsecond=0).isoformat(),
                "time_zone": zone_name(zone(run.timezone)),
            }
        )
