"""The agent: LLM providers (`agent.providers`), the inner loop, the outer runner, transcripts, lanes and
prompts. The names below are its public surface, each imported on first use; its other modules are private
by convention."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agent.events import AssistantEvent, LifecycleEvent, RunEvent, ToolEvent
    from agent.messages import AssistantMessage, Message, ToolCall, ToolResultMessage, Usage, UserMessage
    from agent.runner import Runner, RunOutcome, RunSpec

__all__ = [
    "AssistantEvent",
    "AssistantMessage",
    "LifecycleEvent",
    "Message",
    "RunEvent",
    "RunOutcome",
    "RunSpec",
    "Runner",
    "ToolCall",
    "ToolEvent",
    "ToolResultMessage",
    "Usage",
    "UserMessage",
]

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
if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        home = _HOMES.get(name)
        if home is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home), name)
        globals()[name] = value  # later look-ups find it without coming here
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *__all__})
