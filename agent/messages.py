"""The conversation as the agent keeps it, independent of any provider's wire format."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from tools.base import ContentBlock, ImageBlock, TextBlock

__all__ = [
    "AssistantMessage",
    "ContentBlock",
    "ImageBlock",
    "Message",
    "TextBlock",
    "ToolCall",
    "ToolResultMessage",
    "Usage",
    "UserMessage",
]


class ToolCall(BaseModel):
    """A call the model asked for. `arguments_error` is set when its arguments were not a JSON object."""

    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    arguments_error: str | None = None


class UserMessage(BaseModel):
    role: Literal["user"] = "user"
    content: list[ContentBlock]

    @classmethod
    def of(cls, text: str) -> UserMessage:
        return cls(content=[TextBlock(text=text)])


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    text: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)


class ToolResultMessage(BaseModel):
    role: Literal["tool"] = "tool"
    call_id: str
    name: str
    content: list[ContentBlock]
    is_error: bool = False


Message = Annotated[UserMessage | AssistantMessage | ToolResultMessage, Field(discriminator="role")]


class Usage(BaseModel):
    """What model calls cost, in tokens. `input_tokens` is the whole prompt (uncached, written to and read from the
    provider's cache); `cache_read_tokens` and `cache_write_tokens` are the parts of it the cache served or stored."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
        )
