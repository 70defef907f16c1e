"""An MCP server that never starts: it says why on stderr and exits."""

import sys

sys.exit("broken: no database is configured")
