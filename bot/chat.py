"""`bot chat`: the console conversation, one turn with `-m` or an interactive session; kept between runs."""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import json
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from agent.events import AssistantEvent, Emit, LifecycleEvent, RunEvent, ToolEvent
from agent.loop import Turn, TurnResult, run_turn
from agent.messages import Message, UserMessage
from agent.providers.base import ProviderError
from agent.providers.config import build_provider
from agent.sessions import append_transcript, read_transcript, transcript_path
from bot.assemble import SetupError, choose_model, model_refs, policy_for, system_prompt
from bot.config import Config
from channels.base import CONSOLE
from routing import Peer, RoutingInput
from tools.base import RunInfo
from tools.builtins import builtin_registry
from tools.hooks import Hooks


class ChatFailed(Exception):
    """Every model the agent may use failed; the message says how, one model per clause."""


@dataclass
class ChatSession:
    """The console conversation: which agent, which session, where its transcript lives."""

    config: Config
    agent: str
    session_key: str
    run: RunInfo
    transcript: Path
    peer: Peer
    hooks: Hooks = field(default_factory=Hooks)


def open_session(config: Config, state_dir: Path, agent: str | None = None, user: str | None = None) -> ChatSession:
    """Route a console DM like any other message; `agent` overrides the binding. The console user is an owner."""
    user = user or _console_user()
    peer = Peer("direct", user)
    source = RoutingInput(channel="console", peer=peer)
    router = config.router()
    if agent is None:
        route = router.resolve(source)
        agent, session_key = route.agent, route.session_key
    else:
        config.agent(agent)  # KeyError for an unknown agent
        session_key = router.session_key(agent, source)
    workspace = config.workspace(agent)
    run = RunInfo(
        agent=agent,
        session_key=session_key,
        channel="console",
        sender_id=user,
        sender_name=user,
        sender_is_owner=True,
        capabilities=CONSOLE,
        workspace=str(workspace),
    )
    return ChatSession(config, agent, session_key, run, transcript_path(state_dir, session_key), peer)


def _console_user() -> str:
    with contextlib.suppress(Exception):
        return getpass.getuser() or "local"
    return "local"


async def chat_turn(session: ChatSession, text: str, emit: Emit, cancel: asyncio.Event | None = None) -> TurnResult:
    """One turn: the agent's model, then each fallback while nothing has been shown yet; the transcript
    gains the turn's messages only when it completes."""
    config = session.config
    history: list[Message] = await read_transcript(session.transcript)
    user = UserMessage.of(text)
    registry = builtin_registry()
    Path(session.run.workspace or ".").mkdir(parents=True, exist_ok=True)
    failures: list[str] = []
    shown = False

    async def watch(event: RunEvent) -> None:
        nonlocal shown
        shown = shown or isinstance(event, AssistantEvent | ToolEvent)
        await emit(event)

    for ref in model_refs(config, session.agent):
        try:
            choice = choose_model(config, ref)
        except SetupError as error:
            failures.append(f"{ref}: {error}")
            continue
        run = session.run.model_copy(update={"model": ref})
        policy = policy_for(config, registry, run, peer=session.peer)
        provider = build_provider(choice.provider_name, choice.provider)
        turn = Turn(
            provider=provider,
            model=choice.model_id,
            system=await system_prompt(run, policy, is_group=False),
            run=run,
            tools=policy.kept,
            hooks=session.hooks,
            dispatch=choice.options.tool_dispatch,
            max_tool_iterations=config.defaults.max_tool_iterations,
            max_tokens=choice.options.max_tokens or 4096,
            emit=watch,
            cancel=cancel or asyncio.Event(),
        )
        try:
            result = await run_turn(turn, history, user)
        except ProviderError as error:
            failures.append(f"{ref}: {error.kind}: {error}")
            if shown:  # the person saw part of this answer, and tools may have acted: keep the record, stop
                await append_transcript(session.transcript, error.partial_messages)
                break
            continue
        finally:
            await provider.aclose()
        await append_transcript(session.transcript, result.messages)
        return result
    raise ChatFailed("; ".join(failures))


class ConsoleView:
    """Renders a run's events: text deltas to `out` as they come, each finished tool call as a line to `err`."""

    def __init__(self, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> None:
        self.out = out
        self.err = err
        self._mid_line = False
        self._args: dict[str, str] = {}

    async def __call__(self, event: RunEvent) -> None:
        if isinstance(event, AssistantEvent):
            self.out.write(event.delta)
            self.out.flush()
            self._mid_line = not event.delta.endswith("\n")
        elif isinstance(event, ToolEvent) and event.phase == "start":
            args = json.dumps(event.args or {}, ensure_ascii=False)
            self._args[event.call_id] = args if len(args) <= 80 else args[:79] + "…"
        elif isinstance(event, ToolEvent) and event.phase == "end":
            status = "error" if event.is_error else "ok"
            self._end_line()
            args = self._args.pop(event.call_id, "")
            self.err.write(f"  [{event.name} {args} {status}, {event.duration_ms or 0:.0f} ms]\n")
            self.err.flush()
        elif isinstance(event, LifecycleEvent) and event.phase != "start":
            self._end_line()

    def _end_line(self) -> None:
        if self._mid_line:
            self.out.write("\n")
            self.out.flush()
            self._mid_line = False


async def chat_once(session: ChatSession, text: str, out: TextIO = sys.stdout) -> int:
    """`bot chat -m`: print the final answer (nothing for NO_REPLY); exit status 1 with a reason on failure."""
    try:
        result = await chat_turn(session, text, _ignore)
    except (ChatFailed, SetupError) as error:
        print(f"bot chat: {error}", file=sys.stderr)
        return 1
    if result.text:
        out.write(result.text + "\n")
    elif result.stop_reason == "empty":
        print("bot chat: the model returned an empty answer", file=sys.stderr)
    return 0


async def _ignore(_: RunEvent) -> None:
    return None


HELP = "Type a message. /new starts a new conversation, /exit (or Ctrl-D) leaves, Ctrl-C stops an answer."


async def chat_interactive(session: ChatSession, read: Callable[[str], Awaitable[str]] | None = None) -> int:
    """The interactive console: answers stream as they are written; Ctrl-C stops the current answer."""
    read = read or _read_line
    print(f"Chatting with {session.agent} (session {session.session_key}). {HELP}", file=sys.stderr)
    while True:
        try:
            text = (await read("you> ")).strip()
        except (EOFError, KeyboardInterrupt):
            print(file=sys.stderr)
            return 0
        if not text:
            continue
        if text in ("/exit", "/quit"):
            return 0
        if text == "/new":
            _archive(session.transcript)
            print("(new conversation)", file=sys.stderr)
            continue
        cancel = asyncio.Event()
        loop = asyncio.get_running_loop()
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signal.SIGINT, cancel.set)
        try:
            result = await chat_turn(session, text, ConsoleView(), cancel)
        except (ChatFailed, SetupError) as error:
            print(f"error: {error}", file=sys.stderr)
            continue
        finally:
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(signal.SIGINT)
        if result.stop_reason == "cancelled":
            print("(stopped)", file=sys.stderr)
        elif result.stop_reason in ("no_reply", "empty"):
            print(f"({result.stop_reason.replace('_', ' ')})", file=sys.stderr)


async def _read_line(prompt: str) -> str:
    return await asyncio.to_thread(input, prompt)


def _archive(transcript: Path) -> None:
    """Keep the old conversation beside the new one instead of deleting it."""
    if transcript.exists():
        transcript.rename(transcript.with_name(f"{transcript.stem}.{time.time_ns()}.jsonl"))
