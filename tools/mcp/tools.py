"""An MCP server's tool as a Switchboard tool: its name `<server>__<tool>`, its schema the server's (normalized per
provider like any tool's), its groups `group:mcp` and `mcp:<server>`, its calls sent to the server."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, ClassVar, cast

from pydantic import BaseModel, ConfigDict

from tools.base import RunInfo, Tool, ToolContext, ToolResult, error_result
from tools.mcp.results import tool_result
from tools.mcp.server import McpCallError, McpServer

if TYPE_CHECKING:
    from mcp.types import Tool as ListedTool

__all__ = ["MCP_GROUP", "McpTool", "mcp_tool"]

MCP_GROUP = "group:mcp"
MAX_DESCRIPTION = 1024


class McpArguments(BaseModel):
    """Any arguments: the server's JSON Schema is what the model sees, and the server checks the call against it."""

    model_config = ConfigDict(extra="allow")


class McpTool(Tool):
    """Base of every MCP tool; `mcp_tool` makes one class per tool, since a tool's name is a class attribute."""

    parameters = McpArguments
    group = MCP_GROUP
    server_name: ClassVar[str]
    tool_name: ClassVar[str]  # the server's own name for it
    input_schema: ClassVar[dict[str, Any]]

    def __init__(self, server: McpServer) -> None:
        self.server = server

    def json_schema(self, run: RunInfo | None = None) -> dict[str, Any]:
        return copy.deepcopy(self.input_schema)

    async def execute(self, call_id: str, args: McpArguments, ctx: ToolContext) -> ToolResult:
        if ctx.cancelled.is_set():
            return error_result(self.name, "cancelled: the run was stopped")
        try:
            result = await self.server.call(self.tool_name, args.model_dump())
        except McpCallError as error:
            return error_result(self.name, str(error))
        return tool_result(self.name, self.server_name, self.tool_name, result)


def mcp_tool(server: McpServer, listed: ListedTool, name: str) -> McpTool:
    """The Switchboard tool `name` for the server's tool `listed`."""
    about = " ".join((listed.description or listed.title or "").split())
    if len(about) > MAX_DESCRIPTION:
        about = about[: MAX_DESCRIPTION - 1] + "…"
    agents = server.settings.agents
    attributes = {
        "name": name,
        "label": listed.title or listed.name,
        "description": f"[MCP server {server.name}] {about}".rstrip(),
        "groups": (f"mcp:{server.name}",),
        "agents": None if agents is None else frozenset(agents),
        "server_name": server.name,
        "tool_name": listed.name,
        "input_schema": listed.input_schema,
    }
    kind = cast("type[McpTool]", type(f"McpTool_{name}", (McpTool,), attributes))
    return kind(server)
