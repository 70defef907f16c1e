"""The file tools `read`, `write`, `edit`, `ls`, `find` and `grep`: the agent's files, confined to its workspace folder.
paths.py confines every path; files.py, walk.py, authors.py, runner.py serve read.py, write.py, listing.py, grep.py."""

from tools.fs.grep import MAX_GREP_LINE_CHARS, MAX_GREP_MATCHES, GrepTool
from tools.fs.listing import MAX_FIND_RESULTS, MAX_LS_ENTRIES, FindTool, LsTool
from tools.fs.paths import FsError, PathRefused, new_file, resolve_in_workspace, safe_file_name
from tools.fs.read import MAX_READ_BYTES, ReadTool
from tools.fs.toolset import fs_tools
from tools.fs.write import EditTool, WriteTool

__all__ = [
    "MAX_FIND_RESULTS",
    "MAX_GREP_LINE_CHARS",
    "MAX_GREP_MATCHES",
    "MAX_LS_ENTRIES",
    "MAX_READ_BYTES",
    "EditTool",
    "FindTool",
    "FsError",
    "GrepTool",
    "LsTool",
    "PathRefused",
    "ReadTool",
    "WriteTool",
    "fs_tools",
    "new_file",
    "resolve_in_workspace",
    "safe_file_name",
]
