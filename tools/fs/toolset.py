"""The file tools as the registry gets them: one of each, in the order the model sees them."""

from __future__ import annotations

from tools.base import Tool
from tools.fs.grep import GrepTool
from tools.fs.listing import FindTool, LsTool
from tools.fs.read import ReadTool
from tools.fs.write import EditTool, WriteTool


def fs_tools() -> list[Tool]:
    """One of each file tool, in the order the model sees them."""
    return [ReadTool(), WriteTool(), EditTool(), LsTool(), FindTool(), GrepTool()]
