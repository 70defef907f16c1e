"""An MCP server that never answers: it reads its stdin and says nothing (a server stuck while starting)."""

import sys

for _line in sys.stdin:
    pass
