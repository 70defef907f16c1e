"""The agent: LLM providers (`agent.providers`), the inner loop, the outer runner, transcripts, lanes and
prompts. The names below are its public surface, each imported on first use; its other modules are private
by convention."""

from __future__ import annotations

from typing import TYPE_CHECKING

from routing.lazy import lazy_exports

if TYPE_CHECKING:  # what type checkers read; at run time each name is imported from _HOMES on first use
    from agent.events import (
        AssistantEvent as AssistantEvent,
        LifecycleEvent as LifecycleEvent,
        RunEvent as RunEvent,
        ToolEvent as ToolEvent,
    )
    from agent.messages import (
        AssistantMessage as AssistantMessage,
        Message as Message,
        ToolCall as ToolCall,
        ToolResultMessage as ToolResultMessage,
        Usage as Usage,
        UserMessage as UserMessage,
    )
    from agent.runner import Runner as Runner, RunOutcome as RunOutcome, RunSpec as RunSpec

# Where each public name is defined: imported when first asked for.
_HOMES = {
    "AssistantEvent": "agent.events",
    "LifecycleEvent": "agent.events",
    "RunEvent": "agent.events",
    "ToolEvent": "agent.events",
    "AssistantMessage": "agent.messages",
    "Message": "agent.messages",
    "ToolCall": "agent.messages",
    "ToolResultMessage": "agent.messages",
    "Usage": "agent.messages",
    "UserMessage": "agent.messages",
    "RunOutcome": "agent.runner",
    "RunSpec": "agent.runner",
    "Runner": "agent.runner",
}

# Hidden from mypy, which reads the imports above (given a module __getattr__ it would accept any name at all).
__all__ = list(_HOMES)  # the public surface: written once, in the table above

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _HOMES)
