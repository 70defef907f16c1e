"""Running a file tool's job in one worker thread in the run's root, refusals and OS failures as error results."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tools.base import NO_WORKSPACE, ToolContext, ToolResult, error_result, json_result
from tools.fs.paths import FsError
from tools.provenance import ScopeError, prepare_root

GROUP = "group:fs"


def _os_message(error: OSError) -> str:
    """An OSError for the model, without the absolute paths it carries."""
    return f"{type(error).__name__}: {error.strerror or 'operating system error'}"


FsWork = Callable[[Path], dict[str, Any] | ToolResult]


async def _in_workspace(tool: str, ctx: ToolContext, job: FsWork) -> ToolResult:
    """Run `job(root)` in one worker thread, `root` being the real folder the run's tools see (the workspace, or a
    non-owner's own folder in it: tools.provenance); refusals and OS failures become error results."""
    if not ctx.run.workspace:
        return error_result(tool, NO_WORKSPACE)

    def work() -> ToolResult:
        try:
            root = prepare_root(ctx.run)
            assert root is not None
            done = job(root)
            return done if isinstance(done, ToolResult) else json_result(done)
        except (FsError, ScopeError) as error:
            return error_result(tool, str(error))
        except OSError as error:
            return error_result(tool, _os_message(error))

    return await asyncio.to_thread(work)
