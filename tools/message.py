"""`message`: the agent sends, replies, edits, deletes and reacts in chats, within what each channel and run may do."""

from __future__ import annotations

import asyncio
import mimetypes
from collections import OrderedDict, deque
from pathlib import Path
from typing import Any, ClassVar, Literal, Protocol, TypeVar

import httpx
from pydantic import BaseModel, Field, field_validator

from channels.base import AttachmentKind, Button, Capabilities, ChatTarget, OutboundFile, OutboundMessage, Poll
from routing import DEFAULT_ACCOUNT, Peer, normalize_account, normalize_channel
from routing.errors import ToolError
from tools.base import IMAGE_TYPES, RunInfo, Tool, ToolContext, ToolResult, error_result, json_result
from tools.fs import FsError, resolve_in_workspace
from tools.web import WebFetch

Action = Literal["send", "reply", "edit", "delete", "react", "thread-create", "poll"]
ButtonStyle = Literal["primary", "secondary", "success", "danger"]

MAX_BUTTON_LABEL = 64
MAX_BUTTON_VALUE_BYTES = 64  # Telegram's callback_data limit, the tightest of the platforms
RESERVED_PREFIX = "ap:"  # approval buttons: the agent must never be able to forge one
MAX_SENT_PER_SESSION = 50
# Messages a session may still edit or delete: the latest ones it sent. With MAX_SESSIONS that bounds the record at
# 50,000 short strings (bench/soak.py: 200 per session kept RSS growing for 100,000 messages).
MAX_OWN_PER_SESSION = 50
MAX_SESSIONS = 1000
MIN_POLL_OPTIONS, MAX_POLL_OPTIONS = 2, 10  # Telegram's and Discord's bounds
DOWNLOADS = "downloads"  # where files the agent sends by URL are kept in its workspace

# channel, account, chat and message id in one string (a thread does not change the message): small to keep
MessageKey = str


class Messenger(Protocol):
    """What the message tool needs from the gateway (which implements it over the running adapters)."""

    def capabilities(self, channel: str, account: str) -> Capabilities | None:
        """What that account's channel can do; None when no such account is running."""
        ...

    def accounts(self) -> list[tuple[str, str]]:
        """The (channel, account) pairs running."""
        ...

    async def send(self, target: ChatTarget, message: OutboundMessage, *, key: str | None = None) -> str | None:
        """Send (split to the channel's limit when longer); the last piece's message id. A send made again under
        the same `key` (the same turn run again after a restart) is not sent twice: the first one's id comes back."""
        ...

    async def edit(self, target: ChatTarget, message_id: str, message: OutboundMessage) -> None: ...

    async def delete(self, target: ChatTarget, message_id: str) -> None: ...

    async def react(self, target: ChatTarget, message_id: str, emoji: str) -> None: ...

    async def create_thread(self, target: ChatTarget, name: str, message_id: str | None = None) -> str:
        """Start a thread in the chat (from `message_id` where the platform starts threads from a message); its id."""
        ...

    async def is_approval_card(self, target: ChatTarget, message_id: str) -> bool:
        """Whether that message shows an approval request (which only the approvals module may edit or delete)."""
        ...


class ButtonSpec(BaseModel):
    """One button as the model writes it."""

    label: str = Field(min_length=1, max_length=MAX_BUTTON_LABEL)
    value: str
    style: ButtonStyle = "secondary"

    @field_validator("value")
    @classmethod
    def _value_allowed(cls, value: str) -> str:
        size = len(value.encode("utf-8"))
        if not 1 <= size <= MAX_BUTTON_VALUE_BYTES:
            raise ValueError(f"a button value must be 1 to {MAX_BUTTON_VALUE_BYTES} bytes of UTF-8 (got {size})")
        if value.strip().lower().startswith(RESERVED_PREFIX):
            raise ValueError(f"button values starting with {RESERVED_PREFIX!r} are reserved for approvals")
        return value


class MessageArgs(BaseModel):
    """Every parameter the tool accepts; the schema the model sees is narrowed to the channel (`json_schema`)."""

    action: Action
    text: str | None = None
    to: str | None = None  # "<channel>[/<account>]:<kind>:<id>"; omitted: this chat
    message_id: str | None = None
    buttons: list[list[ButtonSpec]] | None = None
    emoji: str | None = None
    thread_id: str | None = None
    thread_name: str | None = None
    poll_question: str | None = None
    poll_options: list[str] | None = None
    media: list[str] | None = None  # workspace-relative paths of files to send (send, reply)


class SentMessage(BaseModel):
    """One delivery the tool made during a run (the gateway reads these to skip repeating the answer)."""

    target: ChatTarget
    message_id: str | None
    text: str


def supported_actions(caps: Capabilities) -> list[str]:
    """The actions a channel with `caps` can do, in the schema's order."""
    flags = (
        ("edit", caps.edit),
        ("delete", caps.delete),
        ("react", caps.reactions),
        ("thread-create", caps.threads),
        ("poll", caps.polls),
    )
    return ["send", "reply", *(action for action, able in flags if able)]


def format_target(target: ChatTarget) -> str:
    """`<channel>:<kind>:<id>`, with `/<account>` after the channel when it is not the default one."""
    account = "" if target.account == DEFAULT_ACCOUNT else f"/{target.account}"
    return f"{target.channel}{account}:{target.peer.kind}:{target.peer.id}"


def parse_to(text: str) -> tuple[str, str | None, Peer]:
    """Read `<channel>[/<account>]:<kind>:<id>` into (channel, account or None, peer); ValueError if malformed."""
    head, sep, rest = text.strip().partition(":")
    channel_part, slash, account_part = head.partition("/")
    channel = normalize_channel(channel_part)
    if not sep or not channel:
        raise ValueError(f"`to` must look like telegram:direct:12345 or slack/work:channel:C0123 (got {text!r})")
    peer = Peer.parse(rest)
    if peer.id is None:
        raise ValueError(f"`to` names no chat id (got {text!r})")
    account = normalize_account(account_part) if slash else None
    return channel, account, peer


def _names_a_chat(args: MessageArgs) -> bool:
    return bool(args.to and args.to.strip())


def _where(target: ChatTarget) -> str:
    return format_target(target) + (f" thread {target.thread_id}" if target.thread_id is not None else "")


_Entry = TypeVar("_Entry")


def _session_entries(records: OrderedDict[str, deque[_Entry]], key: str, maxlen: int) -> deque[_Entry]:
    """A session's bounded record, as the most recently used; the least recently used sessions beyond
    MAX_SESSIONS are dropped."""
    entries = records.setdefault(key, deque(maxlen=maxlen))
    records.move_to_end(key)
    while len(records) > MAX_SESSIONS:
        records.popitem(last=False)
    return entries


def _key(target: ChatTarget, message_id: str) -> MessageKey:
    return "\x1f".join((target.channel, target.account, target.peer.kind, target.peer.id or "", message_id))


def _same_message(first: SentMessage, second: SentMessage) -> bool:
    """Whether two records are about one platform message (a thread id does not change which message it is)."""
    a, b = first.target, second.target
    return (a.channel, a.account, a.peer, first.message_id) == (b.channel, b.account, b.peer, second.message_id)


def _button_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "label": {"type": "string", "description": f"The text on the button, 1 to {MAX_BUTTON_LABEL} characters."},
            "value": {
                "type": "string",
                "description": (
                    f"What a click sends back to you: 1 to {MAX_BUTTON_VALUE_BYTES} bytes of UTF-8 (keep it short, "
                    f"e.g. 'yes' or 'size:large'). Must not start with '{RESERVED_PREFIX}' (reserved)."
                ),
            },
            "style": {
                "type": "string",
                "enum": ["primary", "secondary", "success", "danger"],
                "description": "The button's look; 'secondary' when omitted.",
            },
        },
        "required": ["label", "value"],
        "additionalProperties": False,
    }


def build_schema(caps: Capabilities, accounts: list[tuple[str, str]], *, anywhere: bool = True) -> dict[str, Any]:
    """The parameters as JSON Schema for a run in a channel with `caps`, with `accounts` running; a run that may
    act only in its own chat (`anywhere` false) is offered no `to` and no `thread_id`."""
    actions = supported_actions(caps)
    needed = [action for action in ("edit", "delete", "react") if action in actions]
    running = ", ".join(f"{channel}/{account}" for channel, account in accounts) or "none"
    properties: dict[str, Any] = {
        "action": {
            "type": "string",
            "enum": actions,
            "description": (
                "What to do: 'send' a new message, 'reply' to a message (by default the one you are answering)"
                + (", 'edit' the text of a message sent in this conversation" if caps.edit else "")
                + (", 'delete' a message sent in this conversation" if caps.delete else "")
                + (", 'react' to a message with an emoji" if caps.reactions else "")
                + (", 'thread-create' to start a thread" if caps.threads else "")
                + (", 'poll' to post a poll" if caps.polls else "")
                + "."
                + ("" if anywhere else " Everything you do here happens in this chat only: no other chat or thread.")
            ),
        },
        "text": {
            "type": "string",
            "description": (
                f"The message text, at most {caps.max_text_length} characters here; longer text is refused, not "
                "split (send several messages instead). Needed for send, reply"
                + (" and edit (the new text)." if caps.edit else ".")
            ),
        },
        "to": {
            "type": "string",
            "description": (
                "Another chat, as '<channel>:<kind>:<id>' with kind direct, group or channel, e.g. "
                "'telegram:direct:12345' or 'slack:channel:C0123'; name an account as "
                f"'<channel>/<account>:<kind>:<id>'. Omit it for this chat. Running accounts: {running}."
            ),
        },
        "message_id": {
            "type": "string",
            "description": (
                "The platform id of a message, as an earlier send returned it."
                + (f" Needed for {', '.join(needed)}." if needed else "")
                + " For reply and react it defaults to the message you are answering."
                + (
                    " Edit and delete take only a message sent in this conversation (by this tool, or as your "
                    "answer), never someone else's message or an approval request."
                    if caps.edit or caps.delete
                    else ""
                )
            ),
        },
    }
    if not anywhere:
        del properties["to"]
    if caps.buttons:
        properties["buttons"] = {
            "type": "array",
            "description": (
                "Rows of buttons shown under the message (send, reply, edit). When someone clicks one, the click "
                "comes back to you as a message from the person who clicked, carrying the button's value."
            ),
            "items": {"type": "array", "description": "One row of buttons, left to right.", "items": _button_schema()},
        }
    if caps.reactions:
        properties["emoji"] = {"type": "string", "description": "For react: one emoji, e.g. '👍'."}
    if caps.threads and anywhere:
        properties["thread_id"] = {
            "type": "string",
            "description": "Put the message in this thread of the chat (omitted: where this conversation is).",
        }
    if caps.threads:
        properties["thread_name"] = {"type": "string", "description": "For thread-create: the new thread's name."}
    if caps.polls:
        properties["poll_question"] = {"type": "string", "description": "For poll: the question."}
        properties["poll_options"] = {
            "type": "array",
            "items": {"type": "string"},
            "description": f"For poll: the {MIN_POLL_OPTIONS} to {MAX_POLL_OPTIONS} answers people choose from.",
        }
    if caps.files:
        properties["media"] = {
            "type": "array",
            "items": {"type": "string"},
            "description": (
                "For send and reply: files to send, as paths relative to your workspace (e.g. 'reports/q3.pdf') "
                f"or public http(s) URLs (downloaded into {DOWNLOADS}/ first), at most "
                f"{caps.max_upload_bytes // 1_000_000} MB each here; images go as pictures, .ogg files as voice "
                "notes, the rest as documents. `text`, if any, is their caption."
            ),
        }
    return {"type": "object", "properties": properties, "required": ["action"], "additionalProperties": False}


class SentLog:
    """What sessions' runs sent, in memory: per session, what the current run delivered through the message tool
    (`sent_in`, the latest MAX_SENT_PER_SESSION) and the messages its runs may edit or delete (`sent_by`, the latest
    MAX_OWN_PER_SESSION, kept across its runs). The gateway's turns and outbox write it beside the tool."""

    def __init__(self) -> None:
        self._sent: OrderedDict[str, deque[SentMessage]] = OrderedDict()
        self._own: OrderedDict[str, deque[MessageKey]] = OrderedDict()
        self._turn_sends: dict[str, int] = {}  # session key -> sends its current turn made

    def sent_in(self, run_session_key: str) -> list[SentMessage]:
        """What the message tool delivered for the session since it was last forgotten (the latest 50 at most)."""
        return list(self._sent.get(run_session_key, ()))

    def forget(self, run_session_key: str) -> None:
        """Drop what was recorded for the session (the gateway calls this as each run starts and ends); what the
        session may edit or delete is kept."""
        self._sent.pop(run_session_key, None)
        self._turn_sends.pop(run_session_key, None)

    def remember(self, session_key: str, target: ChatTarget, message_id: str) -> None:
        """Note a message the bot sent for the session (the gateway does, for its answers): the session's runs
        may edit or delete it."""
        entries = _session_entries(self._own, session_key, MAX_OWN_PER_SESSION)
        key = _key(target, message_id)
        if key not in entries:
            entries.append(key)

    def sent_by(self, session_key: str, target: ChatTarget, message_id: str) -> bool:
        """Whether that message is one the session sent (and may edit or delete)."""
        return _key(target, message_id) in self._own.get(session_key, ())

    def disown(self, session_key: str, target: ChatTarget, message_id: str) -> None:
        """That message is gone (deleted): the session's runs no longer own it."""
        entries = self._own.get(session_key)
        if entries is not None and _key(target, message_id) in entries:
            entries.remove(_key(target, message_id))

    def record(self, key: str, sent: SentMessage) -> None:
        """Note what the message tool delivered for the session (an edit replaces its message's entry)."""
        entries = _session_entries(self._sent, key, MAX_SENT_PER_SESSION)
        for index, entry in enumerate(entries):
            if sent.message_id is not None and _same_message(entry, sent):
                entries[index] = sent
                break
        else:
            entries.append(sent)

    def next_send(self, session_key: str) -> int:
        """Count one more send of the session's current turn: how many it has made, this one included."""
        count = self._turn_sends.get(session_key, 0) + 1
        self._turn_sends[session_key] = count
        return count


class MessageTool(Tool):
    """Sends through the gateway's `Messenger`, within what the run may do, and records what it delivered.

    Where: a run that may not act elsewhere (`RunInfo.acts_anywhere`, from `message.cross_chat`) acts only in
    the chat and thread it was started from. What: edit and delete take only a message the session's runs sent
    (through this tool, or as the answers the gateway delivered and `remember`ed), and never an approval card.
    That record is in memory, the latest `MAX_OWN_PER_SESSION` per session and kept across the session's runs:
    after a restart the earlier messages can no longer be edited or deleted, which is the safe side.

    Files (`media`) come from the run's workspace only, confined as the file tools confine paths, and go where
    the channel can upload them (`Capabilities.files`), within its size limit.
    """

    name: ClassVar[str] = "message"
    label: ClassVar[str] = "Message"
    group: ClassVar[str | None] = "group:messaging"
    description: ClassVar[str] = (
        "Send messages in chats: reply to a specific message, attach buttons, post to another chat where this "
        "conversation may (only then is there a `to`), and (where the channel allows) send files from your "
        "workspace, edit or delete a message sent in this conversation, react with an emoji, start a thread, "
        "post a poll. Your final answer reaches this chat on its own: use this tool for what that cannot do, and "
        "do not send the same text twice."
    )
    parameters: ClassVar[type[BaseModel]] = MessageArgs

    def __init__(self, messenger: Messenger, fetcher: WebFetch | None = None, sent: SentLog | None = None) -> None:
        """`fetcher` downloads the http(s) URLs given in `media` (vetted as `web_fetch` vets them); without one,
        only files in the workspace can be sent. `sent` is the record of what sessions sent (the gateway's, which
        its turns and outbox also write; else the tool's own)."""
        self.messenger = messenger
        self.fetcher = fetcher
        self.sent = sent or SentLog()

    def json_schema(self, run: RunInfo | None = None) -> dict[str, Any]:
        if run is None:
            return build_schema(Capabilities(), self.messenger.accounts())
        return build_schema(run.capabilities, self.messenger.accounts(), anywhere=run.acts_anywhere)

    def _error(self, message: str) -> ToolResult:
        return error_result(self.name, message)

    def _target(self, args: MessageArgs, run: RunInfo) -> ChatTarget | str:
        """The chat (and thread) the call names: `to`, else this run's chat; or what is wrong."""
        here = run.target
        if args.to is None or not _names_a_chat(args):
            if here is None:
                return "this run has no chat to send to; name one with `to`"
            target = here
        else:
            try:
                channel, named, peer = parse_to(args.to)
            except ValueError as error:
                return str(error)
            account = named or (here.account if here is not None and channel == here.channel else DEFAULT_ACCOUNT)
            target = ChatTarget(channel=channel, account=account, peer=peer)
        if args.thread_id:
            target = target.model_copy(update={"thread_id": args.thread_id})
        return target

    def _capabilities(self, args: MessageArgs, run: RunInfo, target: ChatTarget) -> Capabilities | str:
        """What the target's channel can do, or why it cannot be reached."""
        if args.to is None or not _names_a_chat(args):
            return run.capabilities
        running = self.messenger.accounts()
        if target.channel == run.channel:
            caps: Capabilities | None = run.capabilities
        else:
            caps = self.messenger.capabilities(target.channel, target.account)
        if (target.channel, target.account) not in running or caps is None:
            available = ", ".join(f"{c}/{a}" for c, a in running) or "none"
            return f"no running account {target.channel}/{target.account}; available: {available}"
        return caps

    def _check(self, args: MessageArgs, run: RunInfo, target: ChatTarget, caps: Capabilities) -> str | None:
        """What the target channel refuses about this call, or None."""
        where = f"this channel ({run.channel})" if target.channel == run.channel else f"channel {target.channel}"
        actions = supported_actions(caps)
        if args.action not in actions:
            return f"{where} cannot {args.action}; it supports: {', '.join(actions)}"
        if args.buttons and not caps.buttons:
            return f"{where} has no buttons"
        if args.thread_id and not caps.threads:
            return f"{where} has no threads"
        if args.media and not caps.files:
            return f"{where} cannot take files"
        if args.media and args.action not in ("send", "reply"):
            return "media goes with send or reply"
        if args.action == "thread-create" and not (args.thread_name and args.thread_name.strip()):
            return "thread-create needs thread_name"
        if args.action == "poll" and (problem := _poll_problem(args)) is not None:
            return problem
        if args.action in ("send", "reply", "edit") and not (args.text and args.text.strip()) and not args.media:
            return f"{args.action} needs text" + (" or media" if caps.files and args.action != "edit" else "")
        if args.text is not None and len(args.text) > caps.max_text_length:
            return (
                f"text is {len(args.text)} characters; {target.channel} allows at most {caps.max_text_length} "
                "per message (send several shorter messages)"
            )
        if args.action in ("edit", "delete", "react") and not args.message_id:
            return f"{args.action} needs message_id"
        if args.action == "react" and not (args.emoji and args.emoji.strip()):
            return "react needs emoji"
        return None

    async def _may_change(self, args: MessageArgs, run: RunInfo, target: ChatTarget) -> str | None:
        """Why this edit or delete may not touch its message, or None: only the session's own, never a card."""
        message_id = args.message_id or ""
        if await self.messenger.is_approval_card(target, message_id):
            return f"message {message_id} shows an approval request: only the approvals module edits or deletes it"
        if not self.sent.sent_by(run.session_key, target, message_id):
            return (
                f"{args.action} works only on a message sent in this conversation (by this tool, or as your "
                f"answer); message {message_id} in {format_target(target)} is not one"
            )
        return None

    async def execute(self, call_id: str, args: MessageArgs, ctx: ToolContext) -> ToolResult:
        run = ctx.run
        # First what the model was offered: the current channel's narrowed schema.
        here = supported_actions(run.capabilities)
        if args.action not in here:
            return self._error(f"this channel ({run.channel}) cannot {args.action}; it supports: {', '.join(here)}")
        if args.buttons and not run.capabilities.buttons:
            return self._error(f"this channel ({run.channel}) has no buttons")
        target = self._target(args, run)
        if isinstance(target, str):
            return self._error(target)
        # Then where this run may act: before anything else is looked up about another chat.
        if not run.acts_anywhere and target != run.target:
            started = f" ({_where(run.target)})" if run.target is not None else ""
            return self._error(
                f"this run may only act in the chat it was started from{started}: another chat, account, channel "
                "or thread is not allowed here"
            )
        caps = self._capabilities(args, run, target)
        if isinstance(caps, str):
            return self._error(caps)
        if args.action == "react" and not args.message_id and not _names_a_chat(args) and run.reply_to:
            args = args.model_copy(update={"message_id": run.reply_to})  # react to the message being answered
        problem = self._check(args, run, target, caps)
        if problem is None and args.action in ("edit", "delete"):
            problem = await self._may_change(args, run, target)
        if problem is not None:
            return self._error(problem)
        reply_to: str | None = None
        if args.action == "reply":
            reply_to = args.message_id or (None if _names_a_chat(args) else run.reply_to)
            if reply_to is None:
                return self._error("reply needs message_id: this run is not answering a message there")
        try:
            paths = [await self._local(item, run, caps) for item in args.media or []]
            media = await asyncio.to_thread(outbound_files, paths, run, caps)
        except (FsError, ValueError, ToolError) as error:
            return self._error(str(error))
        try:
            message_id = await self._perform(args, target, reply_to, run, media)
        except Exception as error:  # the platform refused: the model reads why, the run goes on
            return self._error(f"{args.action} failed: {str(error) or type(error).__name__}")
        if args.action in ("send", "reply", "edit") and args.text is not None:
            self.sent.record(run.session_key, SentMessage(target=target, message_id=message_id, text=args.text))
        if args.action in ("send", "reply") and message_id is not None:
            self.sent.remember(run.session_key, target, message_id)
        elif args.action == "delete" and message_id is not None:
            self.sent.disown(run.session_key, target, message_id)
        payload: dict[str, Any] = {
            "status": "ok",
            "action": args.action,
            "message_id": message_id,
            "to": format_target(target),
        }
        if args.action == "thread-create":
            payload["thread_id"] = payload.pop("message_id")  # where the next sends go: `thread_id`
        elif target.thread_id is not None:
            payload["thread_id"] = target.thread_id
        if media:
            payload["files"] = [file.name for file in media]
        return json_result(payload)

    async def _local(self, item: str, run: RunInfo, caps: Capabilities) -> str:
        """A `media` entry as a path in the workspace: an http(s) URL is downloaded into DOWNLOADS first."""
        if not item.strip().lower().startswith(("http://", "https://")):
            return item
        if self.fetcher is None or run.workspace is None:
            raise ValueError(f"{item} cannot be fetched here: send a file from your workspace")
        try:
            path = await self.fetcher.save(item, Path(run.workspace), DOWNLOADS, caps.max_upload_bytes)
        except httpx.HTTPError as error:
            raise ValueError(f"could not fetch {item}: {str(error) or type(error).__name__}") from None
        return str(path)

    def _send_key(self, run: RunInfo) -> str | None:
        """The key of this run's next send: its turn and how many sends the turn made before, which is the same
        when the turn runs again after a restart."""
        count = self.sent.next_send(run.session_key)
        return f"message:{run.turn}:{count}" if run.turn is not None else None

    async def _perform(
        self, args: MessageArgs, target: ChatTarget, reply_to: str | None, run: RunInfo, media: list[OutboundFile]
    ) -> str | None:
        """Do the (checked) action; the message (or for thread-create the thread) id it concerns."""
        buttons = [
            [Button(label=spec.label, value=spec.value, style=spec.style) for spec in row] for row in args.buttons or []
        ]
        if args.action in ("send", "reply", "poll"):
            poll = _poll(args) if args.action == "poll" else None
            message = OutboundMessage(
                text=args.text or "",
                buttons=buttons,
                reply_to=reply_to,
                thread_id=target.thread_id,
                media=media,
                poll=poll,
            )
            return await self.messenger.send(target, message, key=self._send_key(run))
        if args.action == "thread-create":
            return await self.messenger.create_thread(target, (args.thread_name or "").strip(), args.message_id)
        message_id = args.message_id or ""
        if args.action == "edit":
            message = OutboundMessage(text=args.text or "", buttons=buttons, thread_id=target.thread_id)
            await self.messenger.edit(target, message_id, message)
        elif args.action == "delete":
            await self.messenger.delete(target, message_id)
        elif args.action == "react":
            await self.messenger.react(target, message_id, (args.emoji or "").strip())
        return message_id


def _poll_options(args: MessageArgs) -> list[str]:
    return [option.strip() for option in args.poll_options or [] if option.strip()]


def _poll(args: MessageArgs) -> Poll:
    """The checked call's poll (`_poll_problem` said nothing)."""
    return Poll(question=(args.poll_question or "").strip(), options=_poll_options(args))


def _poll_problem(args: MessageArgs) -> str | None:
    options = _poll_options(args)
    if not (args.poll_question and args.poll_question.strip()):
        return "poll needs poll_question"
    if not MIN_POLL_OPTIONS <= len(options) <= MAX_POLL_OPTIONS:
        return f"poll needs {MIN_POLL_OPTIONS} to {MAX_POLL_OPTIONS} poll_options (got {len(options)})"
    return None


def outbound_files(paths: list[str], run: RunInfo, caps: Capabilities) -> list[OutboundFile]:
    """The files `paths` name in the run's workspace, ready to upload; FsError (a path outside the workspace, a
    missing file or a folder) or ValueError (too large for the channel) says which is wrong. Touches the disk."""
    if not paths:
        return []
    if run.workspace is None:
        raise ValueError("this run has no workspace to send files from")
    files = []
    for given in paths:
        path = resolve_in_workspace(Path(run.workspace), given)
        if not path.is_file():
            raise FsError(f"{given!r} is not a file in your workspace")
        size = path.stat().st_size
        if size > caps.max_upload_bytes:
            raise ValueError(f"{given!r} is {size:,} bytes; this channel takes files up to {caps.max_upload_bytes:,}")
        mime_type = mimetypes.guess_type(path.name)[0]
        files.append(OutboundFile(path=str(path), name=path.name, kind=file_kind(mime_type), mime_type=mime_type))
    return files


def file_kind(mime_type: str | None) -> AttachmentKind:
    """How a file is presented: a picture, a voice note (Ogg audio), audio, video, or a document."""
    mime_type = (mime_type or "").lower()
    if mime_type in IMAGE_TYPES.values():
        return "image"
    if mime_type in ("audio/ogg", "audio/opus"):
        return "voice"
    for kind in ("audio", "video"):
        if mime_type.startswith(f"{kind}/"):
            return kind
    return "document"


__all__ = [
    "ButtonSpec",
    "MessageArgs",
    "MessageTool",
    "Messenger",
    "SentLog",
    "SentMessage",
    "build_schema",
    "supported_actions",
]
