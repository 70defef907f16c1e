"""An MCP server whose one tool answers with 3 MB of text (a marker at its start and at its end)."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

server = MCPServer("huge")
SIZE = 3 * 1024 * 1024


@server.tool()
def dump() -> str:
    """Three megabytes of text."""
    return "START " + "x" * (SIZE - len("START  END")) + " END"


if __name__ == "__main__":
    server.run("stdio")
