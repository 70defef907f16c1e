"""`sessions_spawn`, `sessions_send` and `subagents`: work handed to a child session that runs in the background and
announces its result, messages between sessions, and this session's children managed."""

from __future__ import annotations

from typing import Any, ClassVar, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from tools.base import RunInfo, Tool, ToolContext, ToolResult, error_result, json_result

__all__ = ["SessionsSend", "SessionsSpawn", "Spawner", "SubagentsTool", "subagent_tools"]


class Spawner(Protocol):
    """Children and messages between sessions, as the tools ask for them; each call raises LookupError (no such child
    or session) or ValueError (refused: a cap, a policy) with a message for the model."""

    async def spawn(
        self,
        run: RunInfo,
        task: str,
        *,
        agent: str | None = None,
        label: str | None = None,
        model: str | None = None,
        timeout_seconds: float | None = None,
    ) -> dict[str, Any]: ...
    async def send(self, run: RunInfo, session_key: str, message: str, *, wait_seconds: float) -> dict[str, Any]: ...
    async def children(self, run: RunInfo) -> list[dict[str, Any]]: ...
    async def kill(self, run: RunInfo, child: str) -> dict[str, Any]: ...
    async def steer(self, run: RunInfo, child: str, message: str) -> dict[str, Any]: ...


class SpawnArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    task: str = Field(description="What the subagent should do, with everything it needs to know: it sees nothing else")
    agent: str | None = Field(default=None, description="The agent that does it (default: this one)")
    label: str | None = Field(default=None, description="A short name for the task, shown when it is listed")
    model: str | None = Field(default=None, description="provider/model for the subagent (default: its agent's)")
    timeout_seconds: float | None = Field(default=None, gt=0, description="Its time limit (capped by the config)")


class SessionsSpawn(Tool):
    name: ClassVar[str] = "sessions_spawn"
    label: ClassVar[str] = "Start a subagent"
    description: ClassVar[str] = (
        "Hand a long task to a subagent that works on it in the background in its own session, so this "
        "conversation stays free. Returns at once with a run id; when the subagent ends, its result comes back to "
        "this conversation as a message, and you then tell the person. Give it the whole task: it does not see "
        "this conversation."
    )
    parameters: ClassVar[type[BaseModel]] = SpawnArgs
    group: ClassVar[str | None] = "group:sessions"

    def __init__(self, spawner: Spawner) -> None:
        self.spawner = spawner

    async def execute(self, call_id: str, args: SpawnArgs, ctx: ToolContext) -> ToolResult:
        try:
            started = await self.spawner.spawn(
                ctx.run, args.task, agent=args.agent, label=args.label, model=args.model,
                timeout_seconds=args.timeout_seconds,
            )  # fmt: skip
        except (ValueError, LookupError) as error:
            return error_result(self.name, str(error))
        return json_result(started)


class SendArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    session_key: str = Field(description="The session to message (sessions_list shows them)")
    message: str
    wait_seconds: float = Field(
        default=60, ge=0, le=600, description="How long to wait for its answer; 0 sends without waiting"
    )


class SessionsSend(Tool):
    name: ClassVar[str] = "sessions_send"
    label: ClassVar[str] = "Message another session"
    description: ClassVar[str] = (
        "Put a message into another session (another conversation of this agent, or of an agent you may talk "
        "to); its agent answers you, not its chat. Waits up to wait_seconds for the answer; an answer that comes "
        "later arrives in this conversation as a message. Exchanges between agents are capped."
    )
    parameters: ClassVar[type[BaseModel]] = SendArgs
    group: ClassVar[str | None] = "group:sessions"

    def __init__(self, spawner: Spawner) -> None:
        self.spawner = spawner

    async def execute(self, call_id: str, args: SendArgs, ctx: ToolContext) -> ToolResult:
        try:
            sent = await self.spawner.send(ctx.run, args.session_key, args.message, wait_seconds=args.wait_seconds)
        except (ValueError, LookupError) as error:
            return error_result(self.name, str(error))
        return json_result(sent)


class SubagentsArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    action: Literal["list", "kill", "steer"]
    id: str | None = Field(default=None, description="The subagent's run id (kill, steer)")
    message: str | None = Field(default=None, description="steer: what to tell the running subagent")


class SubagentsTool(Tool):
    name: ClassVar[str] = "subagents"
    label: ClassVar[str] = "This conversation's subagents"
    description: ClassVar[str] = (
        "The subagents this conversation started: action=list; kill (id) stops one (it is announced as killed); "
        "steer (id, message) tells a running one something it reads at its next step."
    )
    parameters: ClassVar[type[BaseModel]] = SubagentsArgs
    group: ClassVar[str | None] = "group:sessions"

    def __init__(self, spawner: Spawner) -> None:
        self.spawner = spawner

    async def execute(self, call_id: str, args: SubagentsArgs, ctx: ToolContext) -> ToolResult:
        try:
            if args.action == "list":
                return json_result({"status": "ok", "subagents": await self.spawner.children(ctx.run)})
            if args.id is None:
                return error_result(self.name, f"action {args.action} needs the subagent's id")
            if args.action == "kill":
                return json_result(await self.spawner.kill(ctx.run, args.id))
            if not args.message:
                return error_result(self.name, "steer needs a message")
            return json_result(await self.spawner.steer(ctx.run, args.id, args.message))
        except (ValueError, LookupError) as error:
            return error_result(self.name, str(error))


def subagent_tools(spawner: Spawner) -> list[Tool]:
    """sessions_spawn, sessions_send and subagents, on `spawner`."""
    return [SessionsSpawn(spawner), SessionsSend(spawner), SubagentsTool(spawner)]
