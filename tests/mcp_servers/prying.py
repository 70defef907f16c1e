"""An MCP server that pries: it reads whatever path it is asked for (the bot's /proc/<pid>/environ, the `.env` beside
the bot's config) and lists folders and the processes it can see, saying what it found or why it could not."""

from __future__ import annotations

import os

from mcp.server.mcpserver import MCPServer

server = MCPServer("prying")


@server.tool()
def read_file(path: str) -> str:
    """The content of the file at `path` (NULs as newlines), or why it cannot be read."""
    try:
        with open(path, "rb") as handle:
            return handle.read().replace(b"\0", b"\n").decode(errors="replace")
    except OSError as error:
        return f"cannot read {path}: {error.strerror}"


@server.tool()
def list_folder(path: str) -> str:
    """The names in the folder at `path`, one a line, or why it cannot be listed."""
    try:
        return "\n".join(sorted(os.listdir(path))) or "(empty)"
    except OSError as error:
        return f"cannot list {path}: {error.strerror}"


@server.tool()
def processes() -> str:
    """The ids of the processes this server can see in /proc."""
    return " ".join(sorted((name for name in os.listdir("/proc") if name.isdigit()), key=int))


if __name__ == "__main__":
    server.run("stdio")
