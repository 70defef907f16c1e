"""A model provider for tests: it answers from a script (texts, tool calls, errors) and records every request it
got, so a test can check what the model saw. A config reaches it as `kind: scripted` through its `plugin()`."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agent.messages import AssistantMessage, ToolCall, ToolResultMessage, Usage
from agent.providers.base import (
    Completed,
    ErrorKind,
    ModelRequest,
    ProviderError,
    StopReason,
    StreamEvent,
    TextDelta,
    ToolCallStarted,
)
from agent.providers.config import ProviderConfig, ProviderPlugin
from tools.base import TextBlock
from tools.schema import SchemaDialect

if TYPE_CHECKING:
    import httpx

    from agent.providers.base import Provider

__all__ = ["SCRIPTED_KIND", "ScriptEntry", "Scripted", "ScriptedProvider", "ScriptedSettings"]

SCRIPTED_KIND = "scripted"


class ScriptedSettings(ProviderConfig):
    """`providers.<name>` with `kind: scripted`: nothing is contacted, so `base_url` may be left out."""

    base_url: str = "http://scripted.invalid"  # `.invalid` can never resolve: no request leaves the process

    def wants_key(self) -> bool:
        return False  # nothing is contacted


@dataclass(frozen=True)
class Scripted:
    """One answer of the scripted model: a message (text, tool calls) and why it stopped, or an error it fails the
    call with instead. Tool calls without an id get `call_1`, `call_2` … in the order they are given."""

    message: AssistantMessage = field(default_factory=AssistantMessage)
    error: ProviderError | None = None
    stop_reason: StopReason | None = None  # None: `tool_use` when the message calls tools, else `end_turn`
    usage: Usage = field(default_factory=Usage)

    @classmethod
    def text(cls, text: str) -> Scripted:
        """An answer that is only text: the model ends its turn with it."""
        return cls(AssistantMessage(text=text))

    @classmethod
    def tool_call(
        cls, name: str, arguments: Mapping[str, Any] | None = None, *, text: str = "", id: str = ""
    ) -> Scripted:
        """An answer that calls one tool, with `text` before the call if given."""
        call = ToolCall(id=id, name=name, arguments=dict(arguments or {}))
        return cls(AssistantMessage(text=text, tool_calls=[call]))

    @classmethod
    def tool_calls(cls, *calls: tuple[str, Mapping[str, Any]], text: str = "") -> Scripted:
        """An answer that calls several tools at once, each `(name, arguments)` (the loop runs them concurrently)."""
        made = [ToolCall(id="", name=name, arguments=dict(arguments)) for name, arguments in calls]
        return cls(AssistantMessage(text=text, tool_calls=made))

    @classmethod
    def failure(
        cls, kind: ErrorKind, message: str, *, status: int | None = None, retry_after: float | None = None
    ) -> Scripted:
        """A failed call instead of an answer (`rate_limit`, `context_overflow` …), as a real provider raises it."""
        return cls(error=ProviderError(kind, message, status=status, retry_after=retry_after))


ScriptEntry = Scripted | Callable[[ModelRequest], Scripted]  # a fixed answer, or one made from the request


class ScriptedProvider:
    """A Provider that answers each request with the next answer of its script, in order, and keeps every request
    in `requests` (unless `record=False`: a benchmark's thousands of requests, each holding the whole conversation,
    would cost memory and garbage-collection pauses). When the script runs out it repeats `default` if one is given,
    and otherwise fails the call with a ProviderError (`bad_request`) saying so: the bot then answers with its usual
    apology and logs the reason.

        model = ScriptedProvider(Scripted.tool_call("shout", {"text": "hi"}), Scripted.text("done"))
        plugins = Plugins(providers={"scripted": model.plugin()})  # then `providers: {fake: {kind: scripted}}`
    """

    def __init__(
        self,
        *script: ScriptEntry,
        default: ScriptEntry | None = None,
        name: str = SCRIPTED_KIND,
        dialect: SchemaDialect = "openai",
        record: bool = True,
    ) -> None:
        self.name = name
        self.default = default
        self.requests: list[ModelRequest] = []  # every request, oldest first (none with `record=False`)
        self.calls = 0  # how many requests it got
        self._record = record
        self._script: list[ScriptEntry] = list(script)
        self._dialect: SchemaDialect = dialect
        self._call_ids = itertools.count(1)

    def script(self, *answers: ScriptEntry) -> None:
        """Add answers to the end of the script."""
        self._script.extend(answers)

    @property
    def remaining(self) -> int:
        """How many scripted answers have not been given yet (`default` not counted)."""
        return len(self._script)

    def plugin(self) -> ProviderPlugin:
        """This provider as the plugin of a provider kind: every provider of that kind in the config is this one."""

        def create(name: str, config: Any, client: httpx.AsyncClient | None) -> Provider:
            return self

        return ProviderPlugin(ScriptedSettings, create)

    def tool_results(self, request: int = -1) -> list[tuple[str, str]]:
        """`(tool name, result text)` of each tool result the model was shown in request number `request` (default:
        the last), oldest first."""
        return [
            (message.name, "\n".join(block.text for block in message.content if isinstance(block, TextBlock)))
            for message in self.requests[request].messages
            if isinstance(message, ToolResultMessage)
        ]

    def dialect(self, model: str) -> SchemaDialect:
        """The schema dialect given at construction (`openai` by default), for every model."""
        return self._dialect

    async def stream(self, request: ModelRequest, *, api_key: str | None = None) -> AsyncIterator[StreamEvent]:
        """Record `request` and stream the next answer: its text as one delta, its calls, then Completed."""
        self.calls += 1
        if self._record:
            self.requests.append(request)
        answer = self._next(request)
        if answer.error is not None:
            failed = answer.error  # a fresh error each time: the loop writes into the one it catches
            raise ProviderError(failed.kind, str(failed), status=failed.status, retry_after=failed.retry_after)
        calls = [
            call if call.id else call.model_copy(update={"id": f"call_{next(self._call_ids)}"})
            for call in answer.message.tool_calls
        ]
        text = answer.message.text
        if text:
            yield TextDelta(text=text)
        for call in calls:
            yield ToolCallStarted(id=call.id, name=call.name)
        stop = answer.stop_reason or ("tool_use" if calls else "end_turn")
        message = AssistantMessage(text=text, tool_calls=calls)
        yield Completed(message=message, stop_reason=stop, usage=answer.usage)

    async def aclose(self) -> None:
        """Nothing to close: the provider holds no connection."""
        return None

    def _next(self, request: ModelRequest) -> Scripted:
        if self._script:
            answer = self._script.pop(0)
        elif self.default is not None:
            answer = self.default
        else:
            raise ProviderError(
                "bad_request",
                f"scripted provider {self.name!r}: the script has no answer left for request {self.calls}",
            )
        return answer(request) if callable(answer) else answer
