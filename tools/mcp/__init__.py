"""MCP servers as tools: `mcp.servers.<name>` settings (settings.py), each server looked after in the background
(server.py, on the SDK through connection.py), all of them a source of tools for the registry (manager.py:
McpManager), their tools named `<server>__<tool>` (naming.py, tools.py) and their results fenced as untrusted
content (results.py). Nothing is imported here: bot.config reads settings.py alone, and the SDK is imported only
when a server starts."""
