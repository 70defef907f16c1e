"""What every LLM provider offers the loop: one streaming call, typed events, classified errors."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field

from agent.messages import AssistantMessage, Message, Usage
from routing.errors import SwitchboardError
from tools.schema import SchemaDialect

StopReason = Literal["end_turn", "tool_use", "max_tokens", "other"]
# How hard a reasoning model thinks before answering; a model that rejects a level is retried one lower.
ThinkingLevel = Literal["off", "low", "medium", "high"]
ErrorKind = Literal["auth", "rate_limit", "context_overflow", "server", "timeout", "bad_request", "network"]


class ToolSpec(BaseModel):
    """A tool as offered to the model; `parameters` is already normalized for the provider's dialect."""

    name: str
    description: str
    parameters: dict[str, Any]


class ModelRequest(BaseModel):
    """One call to the model."""

    model: str  # the provider's own model id (the part after `provider/`)
    system: str = ""
    messages: list[Message]
    tools: list[ToolSpec] = Field(default_factory=list)
    max_tokens: int = 4096
    temperature: float | None = None
    thinking: ThinkingLevel = "off"


class TextDelta(BaseModel):
    """A piece of the answer's text, as it streams."""

    type: Literal["text_delta"] = "text_delta"
    text: str


class ToolCallStarted(BaseModel):
    """The model began writing a tool call (its arguments are still streaming)."""

    type: Literal["tool_call_started"] = "tool_call_started"
    id: str
    name: str


class Completed(BaseModel):
    """The end of a stream: the whole assistant message, why the model stopped, and what it cost."""

    type: Literal["completed"] = "completed"
    message: AssistantMessage
    stop_reason: StopReason
    usage: Usage = Field(default_factory=Usage)


StreamEvent = TextDelta | ToolCallStarted | Completed


class ProviderError(SwitchboardError):
    """A failed model call, classified so the runner knows whether to retry, rotate keys, compact or give up.

    The message never contains an API key or a request header.
    """

    def __init__(
        self, kind: ErrorKind, message: str, *, status: int | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(message)
        self.kind: ErrorKind = kind
        self.status = status
        self.retry_after = retry_after
        # Set by the loop: what the run had added before the failure (the user's message, answered tool rounds).
        self.partial_messages: list[Message] = []


class Provider(Protocol):
    """A configured LLM endpoint."""

    name: str

    def dialect(self, model: str) -> SchemaDialect:
        """The schema dialect this provider needs for `model`."""
        ...

    def stream(self, request: ModelRequest, *, api_key: str | None = None) -> AsyncIterator[StreamEvent]:
        """Stream one model call: any number of TextDelta/ToolCallStarted, then exactly one Completed.

        `api_key` picks one of the configured keys (the runner rotates them); default: the first.
        Raises ProviderError for every failure, including a stream that ends before it completes.
        """
        ...

    async def aclose(self) -> None:
        """Close the HTTP client the provider made for itself (a client passed in stays open)."""
        ...
