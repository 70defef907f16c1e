"""The agent: LLM providers (`agent.providers`), the inner loop, the outer runner, transcripts, lanes and
prompts. The names below are its public surface, each imported on first use; its other modules are private
by convention."""

from __future__ import annotations

from typing import TYPE_CHECKING

from routing.lazy import lazy_exports

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
    __getattr__, __dir__ = lazy_exports(__name__, _HOMES, __all__)
