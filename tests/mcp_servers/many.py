"""A real MCP server with many tools: tool_000 … tool_099 for the include/exclude filters, two whose names become
the same name here (`dup.name` and `dup_name`), one whose name is too long for a provider, and one named after a tool
a test registers itself (`taken`)."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

server = MCPServer("many")


def _numbered(number: int) -> None:
    server.add_tool(lambda: f"tool {number:03d}", name=f"tool_{number:03d}", description=f"Tool number {number}.")


for index in range(100):
    _numbered(index)
server.add_tool(lambda: "dotted", name="dup.name", description="A dotted name.")
server.add_tool(lambda: "underscored", name="dup_name", description="An underscored name.")
server.add_tool(lambda: "long", name="a_very_long_tool_name_" + "x" * 60, description="A long name.")
server.add_tool(lambda: "taken", name="taken", description="Named like a tool of the test's own.")

if __name__ == "__main__":
    server.run("stdio")
