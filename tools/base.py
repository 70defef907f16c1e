"""The tool contract: a Tool, its context, its result, and `invoke`, which never lets a tool break the run."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, ValidationError, model_serializer

from channels.base import Capabilities, ChatTarget, Principal
from tools.sandbox import SandboxSettings
from tools.skills import Skill

log = logging.getLogger(__name__)

# How a part waits: asyncio.sleep in the bot, a test's own clock in a test.
Sleep = Callable[[float], Awaitable[None]]


class TextBlock(BaseModel):
    """Text content, in a tool result or a message."""

    type: Literal["text"] = "text"
    text: str


class ImageBlock(BaseModel):
    """An image in a tool result or a message: base64 `data`, and where it was read from (`path`) when it is a file.
    An image with a path is stored by reference (its data is left out of transcripts) and read again when a model
    that can see is shown it (agent.images)."""

    type: Literal["image"] = "image"
    data: str = ""
    mime_type: str
    path: str | None = None

    @model_serializer(mode="wrap")
    def _by_reference(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        dumped: dict[str, Any] = handler(self)
        if self.path is not None:
            dumped.pop("data", None)
        else:
            dumped.pop("path", None)
        return dumped


ContentBlock = Annotated[TextBlock | ImageBlock, Field(discriminator="type")]


class ToolResult(BaseModel):
    """What a tool gives back: content for the model, `details` for the program (never sent to the model)."""

    content: list[ContentBlock]
    details: Any = None
    is_error: bool = False

    @property
    def text(self) -> str:
        """The text blocks joined, for logs, events and text-only providers."""
        return "\n".join(block.text for block in self.content if isinstance(block, TextBlock))


def json_result(payload: Any, *, is_error: bool = False) -> ToolResult:
    """A result whose content is `payload` as JSON text (and whose details are the payload itself)."""
    text = json.dumps(payload, ensure_ascii=False, indent=2, default=str)
    return ToolResult(content=[TextBlock(text=text)], details=payload, is_error=is_error)


# Anthropic takes at most 5 MB per image (OpenAI 20 MB): a larger image is named, not shown (nothing is rescaled).
MAX_IMAGE_BYTES = 5 * 1024 * 1024
# The image types every provider takes as image input, by file extension.
IMAGE_TYPES = {
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".png": "image/png",
    ".gif": "image/gif",
    ".webp": "image/webp",
}


def image_file(path: Path, mime_type: str) -> ImageBlock | None:
    """The image file as a block a model can be shown (its data read, its path kept); None when it is gone or
    larger than MAX_IMAGE_BYTES. Reads the file: call it off the event loop."""
    try:
        if path.stat().st_size > MAX_IMAGE_BYTES:
            return None
        data = path.read_bytes()
    except OSError:
        return None
    return ImageBlock(data=base64.b64encode(data).decode("ascii"), mime_type=mime_type, path=str(path))


def image_result(data: bytes, mime_type: str, caption: str | None = None) -> ToolResult:
    """A result carrying one image (and an optional caption the model reads)."""
    blocks: list[TextBlock | ImageBlock] = [TextBlock(text=caption)] if caption else []
    blocks.append(ImageBlock(data=base64.b64encode(data).decode("ascii"), mime_type=mime_type))
    return ToolResult(content=list(blocks), details={"mime_type": mime_type, "bytes": len(data)})


def error_result(tool: str, error: str) -> ToolResult:
    """The one shape of a failed tool call: `{"status": "error", "tool": ..., "error": ...}`."""
    return json_result({"status": "error", "tool": tool, "error": error}, is_error=True)


NO_WORKSPACE = "this agent has no workspace"  # what a workspace tool answers when the run has none

# `agents[].message.cross_chat`: whose runs may act in another chat than their own (the message tool's `to`).
CrossChat = Literal["owners", "all", "none"]


class RunInfo(BaseModel):
    """Who and where a run is for, as tools may see it."""

    model_config = ConfigDict(frozen=True)

    agent: str
    session_key: str
    channel: str = "console"
    sender_id: str | None = None
    sender_name: str | None = None
    # Whom the run acts for (bot.runs.principal decides; bot.app.run_info sets both): the owners, or `person`
    # (`channel:id`, None for nobody in particular). Not an owner unless said.
    sender_is_owner: bool = False
    person: str | None = None
    capabilities: Capabilities = Field(default_factory=Capabilities)
    workspace: str | None = None  # the folder the file, memory and exec tools work in
    # The agent's whole workspace (None: `workspace` itself). Under `memory.scope: sender` a non-owner's run has
    # `workspace` set to their own folder inside it (tools.provenance); the bootstrap files come from here.
    agent_workspace: str | None = None
    model: str | None = None  # `provider/model-id` of the model answering
    target: ChatTarget | None = None  # the chat the run answers in (None outside a chat, e.g. `bot prompt`)
    reply_to: str | None = None  # the platform id of the message being answered
    # Which turn this run is (the journal row it answers), the same when the turn runs again after a restart: what
    # the run sends is keyed by it, so that a send is not made twice.
    turn: str | None = None
    sandbox: SandboxSettings | None = None  # exec/process run in this sandbox; None: unsandboxed (tools.sandbox)
    cross_chat: CrossChat = "owners"  # the agent's `message.cross_chat`
    timezone: str | None = None  # the agent's IANA time zone (None: the host's)
    # The skills offered to this run (tools.skills): listed in its prompt, their folders readable by `read`.
    skills: tuple[Skill, ...] = ()
    depth: int = 0  # 0: a run people or schedules started; n: a child of sessions_spawn, n levels down
    # Messages agents have passed back and forth in the exchange this run belongs to (sessions_send): capped by
    # `tools.agent_to_agent.max_exchanges`, so two agents cannot keep each other busy for ever.
    hops: int = 0

    @property
    def principal(self) -> Principal:
        """Whom the run acts for."""
        return Principal(owner=self.sender_is_owner, person=self.person)

    @property
    def acts_anywhere(self) -> bool:
        """Whether this run may act in another chat, account, channel or thread than `target` (`cross_chat`)."""
        return self.cross_chat == "all" or (self.cross_chat == "owners" and self.sender_is_owner)


UpdateCallback = Callable[[str], Awaitable[None]]


async def _no_update(_: str) -> None:
    return None


class ToolContext:
    """Handed to `Tool.execute`: the run's info, a cancellation signal, and a progress callback."""

    def __init__(
        self,
        run: RunInfo,
        *,
        cancelled: asyncio.Event | None = None,
        on_update: UpdateCallback = _no_update,
    ) -> None:
        self.run = run
        self.cancelled = cancelled or asyncio.Event()
        self.on_update = on_update


class Tool:
    """Base for tools. Subclasses set the class attributes and implement `execute`.

    `parameters` is a pydantic model: its JSON Schema is what the model sees, and the model's
    arguments are validated against it before `execute` runs.
    """

    name: ClassVar[str]
    label: ClassVar[str] = ""
    description: ClassVar[str]
    parameters: ClassVar[type[BaseModel]]
    owner_only: ClassVar[bool] = False
    group: ClassVar[str | None] = None  # e.g. "group:fs"; policies may name the group instead of the tool
    groups: ClassVar[tuple[str, ...]] = ()  # further groups, e.g. ("mcp:github",) for an MCP server's tools
    agents: ClassVar[frozenset[str] | None] = None  # the agents whose runs may use it; None: every agent

    async def execute(self, call_id: str, args: Any, ctx: ToolContext) -> ToolResult:
        raise NotImplementedError

    def json_schema(self, run: RunInfo | None = None) -> dict[str, Any]:
        """The parameters as JSON Schema, before provider normalization. A tool whose abilities depend on the
        run (the message tool and its channel) builds it from `run`; `parameters` still validates the call."""
        return self.parameters.model_json_schema()


def _validation_message(error: ValidationError) -> str:
    parts = []
    for item in error.errors(include_url=False, include_input=False):
        where = ".".join(str(part) for part in item["loc"]) or "arguments"
        parts.append(f"{where}: {item['msg']}")
    return "invalid arguments: " + "; ".join(parts)


async def invoke(tool: Tool, call_id: str, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
    """Validate the arguments and run the tool; every failure becomes an error result, never an exception.

    Cancellation (asyncio.CancelledError) is the one thing that propagates: the run is being stopped.
    """
    try:
        args = tool.parameters.model_validate(arguments)
    except ValidationError as error:
        return error_result(tool.name, _validation_message(error))
    try:
        result = await tool.execute(call_id, args, ctx)
    except asyncio.CancelledError:
        raise
    except Exception as error:  # a tool's bug must not break the run; the model reads what went wrong
        log.warning("tool %s failed", tool.name, exc_info=True)
        return error_result(tool.name, f"{type(error).__name__}: {error}")
    if not isinstance(result, ToolResult):
        return error_result(tool.name, f"tool returned {type(result).__name__}, not a ToolResult")
    return result
