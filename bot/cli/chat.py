"""`bot chat`: the console conversation, one turn with `-m` or an interactive session; kept between runs."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TextIO

from agent.cancellation import Stop
from agent.events import AssistantEvent, Emit, LifecycleEvent, RunEvent, ToolEvent
from agent.loop import TurnResult
from agent.messages import AssistantMessage, UserMessage
from agent.providers.config import sees_images
from agent.runner import RunOutcome
from bot.app import App
from bot.approvals.gate import Approvals
from bot.approvals.text import shown_command
from bot.cli.gateway_tools import gateway_only
from bot.config.checks import bot_folders, own_files
from bot.config.owners_file import owner_key
from bot.gateway.state import open_state, transcripts_for
from bot.intake.commands import BY_NAME, HELP as COMMANDS_HELP, Command, parse_command
from bot.intake.handlers import use_skill
from bot.intake.session_commands import model_command, status_lines, think_command, usage_command
from bot.runs.assemble import SetupError, candidates
from bot.runs.conversation import Conversations
from bot.store import ApprovalDecision, ApprovalRecord
from bot.turns.turn import Job
from channels.base import CONSOLE, InboundMessage, Principal
from channels.console import console_user
from routing import Peer, RoutingInput
from routing.errors import SwitchboardError
from tools.base import RunInfo
from tools.clock import envelope, zone
from tools.exec import ProcessTable
from tools.registry import ToolSetup


class ChatFailed(SwitchboardError):
    """The turn could not be answered; the message says why in one line."""


@dataclass
class ChatSession:
    """The console conversation: which agent, which session, and the shared services that run it."""

    conversations: Conversations
    agent: str
    session_key: str
    run: RunInfo
    peer: Peer
    only_under_run: tuple[str, ...] = ()  # the tools a run under `bot run` has and this one lacks

    @property
    def missing_tools(self) -> str:
        """What the console's greeting and /help say plainly: the tools this conversation does not have."""
        if not self.only_under_run:
            return ""
        return (
            f"Here the agent has no {', '.join(self.only_under_run)}: they exist only under `bot run`, where jobs and "
            "messages are delivered to chats (`bot tools` marks them)."
        )

    @property
    def job(self) -> Job:
        """The console's conversation as a chat command sees it (bot.intake.session_commands): the owner, in a DM."""
        user = self.peer.id
        message = InboundMessage(channel="console", peer=self.peer, sender_id=user, sender_name=user, message_id="-")
        return Job(0, message, self.agent, self.session_key, self.run.principal)


async def open_session(app: App, agent: str | None = None, user: str | None = None) -> ChatSession:
    """Route a console DM like any other message; `agent` overrides the binding. The console user is an owner."""
    config = app.config
    user = user or console_user()
    peer = Peer("direct", user)
    source = RoutingInput(channel="console", peer=peer)
    if agent is None:
        route = app.decisions.router.resolve(source)
        agent, session_key = route.agent, route.session_key
    else:
        config.agent(agent)  # KeyError for an unknown agent
        session_key = app.decisions.router.session_key(agent, source)
    run = app.decisions.run_info(
        agent, session_key, channel="console", principal=Principal(owner=True, person=owner_key("console", user)),
        sender_id=user, sender_name=user, capabilities=CONSOLE,
    )  # fmt: skip
    app.state_dir.mkdir(parents=True, exist_ok=True)
    store = await open_state(config, app.state_dir)
    terminal = ask_on_terminal if sys.stdin.isatty() else None
    own = own_files(config, app.state_dir)
    approvals = Approvals(config, store, terminal=terminal, own_files=own)
    processes = ProcessTable(hide=bot_folders(config, app.state_dir))
    registry = app.registry(ToolSetup(None, approvals.authorize, processes))
    transcripts = transcripts_for(config, store, app.state_dir)
    conversations = Conversations(config, store, app.state_dir, transcripts, app.runner, registry, app.hooks)
    return ChatSession(conversations, agent, session_key, run, peer, gateway_only(app))


async def ask_on_terminal(record: ApprovalRecord) -> ApprovalDecision | None:
    """The console's approval prompt: the whole command, its hidden characters escaped (never interpreted by the
    terminal) with a warning line when it holds any, then once / always / deny (anything else denies)."""
    shown = shown_command(record.command)
    where = f"{shown_command(record.agent).text}, in {shown_command(record.cwd).text}"
    warning = shown.plain_warning()
    sys.stderr.write(f"\nApproval required ({where}):\n  {shown.text}\n" + (f"  {warning}\n" if warning else ""))
    choices = "[o]nce, [a]lways, [d]eny" if record.offer_always else "[o]nce, [d]eny"
    answer = (await asyncio.to_thread(input, f"Allow? {choices}: ")).strip().lower()
    if answer in ("o", "once", "y", "yes"):
        return "allow-once"
    if answer in ("a", "always") and record.offer_always:
        return "allow-always"
    return "deny"


async def close_session(session: ChatSession) -> None:
    await session.conversations.runner.aclose()
    await session.conversations.store.close()


STOPPED = "(stopped: the person interrupted this answer with Ctrl-C)"


def _close_stopped(outcome: RunOutcome) -> bool:
    """Keep every turn in the transcript; one stopped with Ctrl-C closed by an answer saying so (`STOPPED`), so that
    the stopped question stays in the history as interrupted and the next one is answered on its own (without it,
    the history ends with the unanswered question and the model answers both together)."""
    result = outcome.result
    if result is not None and result.stop_reason == "cancelled":
        result.messages.append(AssistantMessage(text=STOPPED))
    return True


async def chat_turn(session: ChatSession, text: str, emit: Emit, cancel: asyncio.Event | None = None) -> TurnResult:
    """One turn through the runner (key rotation, fallbacks, compaction, time limit); ChatFailed if unanswered. A
    turn stopped through `cancel` is kept closed as interrupted (`_close_stopped`)."""
    user = UserMessage.of(f"{envelope(time.time(), zone(session.run.timezone))} {text}")
    outcome = await session.conversations.answer(
        session.run, user, peer=session.peer, emit=emit, cancel=cancel, record=_close_stopped
    )
    if outcome.result is None:
        raise ChatFailed(f"{outcome.user_message} ({outcome.reason})" if outcome.reason else str(outcome.user_message))
    return outcome.result


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


async def skill_request(session: ChatSession, text: str) -> tuple[str | None, str]:
    """What to send for `text`: `/skill NAME [request]` as the message asking for that skill, or (None, the list
    of skills) for a missing or unknown name (bot.intake.handlers.use_skill); any other text as it is."""
    command = parse_command(text)
    if command is None or command.name != "skill":
        return text, ""
    report = await asyncio.to_thread(session.conversations.skills, session.agent)
    return use_skill(report.eligible, command.args)


async def chat_once(session: ChatSession, text: str, out: TextIO = sys.stdout) -> int:
    """`bot chat -m`: print the final answer (nothing for NO_REPLY), or a command's; exit status 1 with a reason on
    failure."""
    command = parse_command(text)
    if command is not None and command.name != "skill":
        out.write(await console_command(session, command) + "\n")
        return 0
    request, listing = await skill_request(session, text)
    if request is None:
        out.write(listing + "\n")
        return 0
    try:
        result = await chat_turn(session, request, _ignore)
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


def _images_note(session: ChatSession) -> str:
    """Whether the agent's model is shown images, for the greeting ("" when it has no usable model)."""
    try:
        candidate = candidates(session.conversations.config, session.agent)[0]
    except SetupError:
        return ""
    sees, why = sees_images(candidate.model_id, candidate.options)
    return f"; {candidate.ref} is {'shown images' if sees else 'not shown images'} ({why})"


HELP = "Type a message. /help lists the commands, /exit (or Ctrl-D) leaves, Ctrl-C stops an answer."


async def console_command(session: ChatSession, command: Command) -> str:
    """A chat command typed in the console, answered from the same table (bot.intake.commands) and, for the settings and
    costs of the conversation, by the same code as in chats (bot.intake.session_commands)."""
    store, config = session.conversations.store, session.conversations.config
    job, name, args = session.job, command.name, command.args
    if name in ("new", "reset"):
        await store.reset_session(session.session_key)
        return "(new conversation)"
    if name == "stop":
        return "Nothing was running. (Ctrl-C stops an answer while it is written.)"
    if name == "model":
        return await model_command(store, config, job, args)
    if name == "think":
        return await think_command(store, config, job, args)
    if name == "usage":
        return await usage_command(store, config, job, time.time())
    if name == "status":
        session_record = await store.get_session(session.session_key)
        return "\n".join(status_lines(config, job, session_record, "one message at a time (bot chat)"))
    if name == "whoami":
        return f"You are {job.principal.person} here, at the bot's own terminal: an owner."
    if name == "help":
        return "\n".join(filter(None, [COMMANDS_HELP, HELP, session.missing_tools]))
    return BY_NAME[name].console or COMMANDS_HELP  # pair, approve, queue, subagents: where they apply


async def chat_interactive(session: ChatSession, read: Callable[[str], Awaitable[str]] | None = None) -> int:
    """The interactive console: answers stream as they are written; Ctrl-C stops the current answer."""
    read = read or _read_line
    greeting = f"Chatting with {session.agent} (session {session.session_key}){_images_note(session)}. {HELP}"
    greeting += f" {session.missing_tools}" if session.missing_tools else ""
    print(greeting, file=sys.stderr)
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
        command = parse_command(text)
        if command is not None and command.name != "skill":  # /skill becomes a message below
            print(await console_command(session, command), file=sys.stderr)
            continue
        request, listing = await skill_request(session, text)
        if request is None:
            print(listing)
            continue
        cancel = Stop()
        loop = asyncio.get_running_loop()
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signal.SIGINT, cancel.set)
        try:
            result = await chat_turn(session, request, ConsoleView(), cancel)
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


async def run_chat(app: App, agent: str | None, message: str | None) -> int:
    """`bot chat`: one turn with `message`, else the interactive console; the exit status."""
    session = await open_session(app, agent)
    try:
        return await (chat_once(session, message) if message is not None else chat_interactive(session))
    finally:
        await close_session(session)
