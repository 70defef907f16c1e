"""The channel interface: what adapters deliver (messages, button clicks), what they can do, and what they send."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, field_validator

from routing import Peer, RoutingInput
from routing.errors import ChannelError

log = logging.getLogger(__name__)

Markup = Literal["plain", "markdown", "telegram-html", "discord-markdown", "slack-mrkdwn"]


class Capabilities(BaseModel):
    """What a channel can show and do; the message tool's schema and the system prompt are built from it."""

    model_config = ConfigDict(frozen=True)

    buttons: bool = False
    edit: bool = False
    delete: bool = False
    reactions: bool = False
    threads: bool = False
    polls: bool = False
    files: bool = False  # the bot can upload files (OutboundMessage.media)
    max_upload_bytes: int = 0  # the largest file the bot may upload here (0: none)
    max_caption_length: int = 0  # the longest text sent as a file's caption (longer text goes as its own message)
    max_text_length: int = 4000
    markup: Markup = "plain"
    streaming: bool = False
    edit_interval_seconds: float = 1.0  # the shortest gap between two edits of one message while streaming
    ends_turns: bool = False  # told, in order after its answer, when a turn is over (TurnEnds.end_turn)


CONSOLE = Capabilities(max_text_length=1_000_000, markup="markdown", streaming=True)


class MediaLimits(BaseModel):
    """`media` of a channel account: how much of what people send is fetched into the workspace."""

    model_config = ConfigDict(extra="forbid")

    max_bytes: int = Field(
        default=20 * 1024 * 1024,
        gt=0,
        description="The largest file fetched, in bytes (20 MiB: Telegram's Bot API serves nothing larger); the "
        "person is told about a larger one and the agent reads why it is missing.",
    )
    max_files: int = Field(
        default=10,
        ge=0,
        description="Files fetched per message; the rest are named to the agent, not fetched.",
    )


class AccountSettings(BaseModel):
    """What every channel account shares under `channels.<platform>.accounts.<id>` (platforms add their own keys).

    Word-valued settings accept YAML's bare words (`streaming: off` means off)."""

    model_config = ConfigDict(extra="forbid")

    api_base_url: str | None = Field(
        default=None,
        description="The platform server's root with its scheme (a local Bot API server, a proxy, a test fake); "
        "none: the real https://api.telegram.org, https://discord.com or https://slack.com.",
    )
    dm_policy: Literal["pairing", "allowlist", "open", "disabled"] = Field(
        default="pairing",
        description="Who may talk to the bot in direct messages: `pairing`, an unknown sender gets a one-time code "
        "an owner approves (`bot pairing approve`, `/pair`); `allowlist`, only `allow_from`; `open`, anyone; "
        "`disabled`, nobody.",
    )
    allow_from: list[str] = Field(
        default_factory=list,
        description="Sender ids allowed in direct messages under `dm_policy: allowlist`, exactly as the platform "
        "writes them.",
    )
    group_policy: Literal["open", "allowlist", "disabled"] = Field(
        default="open",
        description="Who the bot answers in groups and channels: `open`, anyone; `allowlist`, only "
        "`group_allow_from`; `disabled`, nobody.",
    )
    group_allow_from: list[str] = Field(
        default_factory=list,
        description="Sender ids the bot answers in groups under `group_policy: allowlist`, exactly as the platform "
        "writes them.",
    )
    require_mention: bool = Field(
        default=True,
        description="In groups and channels, answer only when mentioned or replied to; false: answer every message.",
    )
    streaming: Literal["off", "partial"] = Field(
        default="partial",
        description="`partial`: the answer appears as one message edited while the model writes (where the platform "
        "can edit); `off`: whole answers only.",
    )
    media: MediaLimits = Field(
        default_factory=MediaLimits, description="How much of the files people send is fetched into the workspace."
    )
    stall_seconds: float = Field(
        default=90.0,
        gt=0,
        description="Seconds of silence from the platform (no completed poll, no envelope or pong, no heartbeat "
        "acknowledgement) after which the account counts as stalled and its connection is replaced (Telegram "
        "polling: at least `poll_timeout` + 2; Discord's own gateway: at least 45 is used).",
    )

    @field_validator("allow_from", "group_allow_from", mode="before")
    @classmethod
    def _ids_as_text(cls, value: object) -> object:
        return [str(item).strip() for item in value] if isinstance(value, list) else value


AttachmentKind = Literal["image", "audio", "voice", "video", "document", "sticker"]


class Attachment(BaseModel):
    """A file that came with a message, as the platform describes it; the adapter's `download` fetches its bytes.

    `ref` is the platform's handle for the file (Telegram's file_id, Discord's attachment URL, Slack's
    url_private): only the adapter that made it uses it. `name` is the platform's file name, unsanitized.
    """

    kind: AttachmentKind = "document"
    ref: str
    name: str | None = None
    mime_type: str | None = None
    size: int | None = None  # bytes, when the platform says
    caption: str | None = None  # a caption of this file alone (a media group's other members' captions)
    duration: float | None = None  # seconds, for audio, voice and video


class OutboundFile(BaseModel):
    """A file the bot sends: a file on disk (already confined to the run's workspace) and how to present it.
    `kind` image goes as a photo, voice as a voice note, anything else as a document."""

    path: str
    name: str
    kind: AttachmentKind = "document"
    mime_type: str | None = None


class Poll(BaseModel):
    """A native poll: a question and its answers."""

    question: str
    options: list[str] = Field(min_length=2)


class ChatTarget(BaseModel):
    """Where a message goes: a channel account's chat, optionally a thread in it."""

    model_config = ConfigDict(frozen=True)

    channel: str
    account: str = "default"
    peer: Peer
    thread_id: str | None = None


class Principal(BaseModel):
    """Who a run acts for: the bot's owners, or one person who is not an owner (`person`, `channel:id`). Every turn
    has exactly one, decided in one place (bot.runs.principal) from whoever started it; there is no default."""

    model_config = ConfigDict(frozen=True)

    owner: bool
    person: str | None = None  # the non-owner's `channel:id` (None for the owners, and for nobody in particular)

    @property
    def key(self) -> str:
        """`owners`, or the person's `channel:id`: what a session records of who had turns in it."""
        return "owners" if self.owner else self.person or "nobody"


OWNERS = Principal(owner=True)


class Scheduled(BaseModel):
    """What started a turn that no person sent: a cron job's tick, a heartbeat, a subagent's task (`subagent`) or its
    announcement to the parent (`announce`), another session's message (`agent`), a steer into a running child
    (`steer`). Never set by an adapter, so no person can pose as one. The turn runs for `agent` in `session_key`
    with an owner's powers only when `owner` says so (it has no default: whoever makes one decides, bot.runs.principal);
    otherwise it acts for the message's sender, whose message it stands in for."""

    kind: Literal["cron", "heartbeat", "subagent", "announce", "agent", "steer", "webhook"] = "cron"
    job: str  # the cron job's id, the child's run id, or the message's id between sessions
    agent: str
    session_key: str
    owner: bool
    depth: int = 0  # a child's depth below the session people talk to (RunInfo.depth)
    hops: int = 0  # messages agents have exchanged so far (RunInfo.hops)
    reply_session: str | None = None  # `agent`: the session the answer goes back to
    awaited: bool = False  # `agent`: the sender waits for the answer (sessions_send's wait_seconds)
    timeout_seconds: float | None = None  # `subagent`: the child's own time limit
    person: str | None = None  # whom a turn not the owners' acts for, when not its sender (a webhook: `hook:<name>`)


class InboundMessage(BaseModel):
    """One message as an adapter delivers it: the routing input, the sender, and the content."""

    channel: str
    account: str = "default"
    peer: Peer
    parent_peer: Peer | None = None
    guild: str | None = None
    team: str | None = None
    member_roles: tuple[str, ...] = ()
    sender_id: str
    sender_name: str | None = None
    sender_is_bot: bool = False
    text: str = ""
    message_id: str
    reply_to: str | None = None
    reply_to_bot: bool = False  # a reply to one of the bot's own messages counts as a mention
    thread_id: str | None = None
    was_mentioned: bool = False
    attachments: list[Attachment] = Field(default_factory=list)
    button: bool = False  # a click on a button the agent sent: `text` is its value, data and never a command
    scheduled: Scheduled | None = None  # a turn started by a schedule, not a person

    def routing_input(self) -> RoutingInput:
        return RoutingInput(
            channel=self.channel,
            account=self.account,
            peer=self.peer,
            parent_peer=self.parent_peer,
            guild=self.guild,
            team=self.team,
            member_roles=self.member_roles,
            thread=self.thread_id,
        )

    def target(self) -> ChatTarget:
        """Where a reply to this message goes."""
        return ChatTarget(channel=self.channel, account=self.account, peer=self.peer, thread_id=self.thread_id)


class Button(BaseModel):
    label: str
    value: str
    style: Literal["primary", "secondary", "success", "danger"] = "secondary"


class OutboundMessage(BaseModel):
    """What the bot sends: text (in the channel's markup), optional button rows, a reply-to and a thread; files
    (`media`, with the text as their caption when it fits `max_caption_length`, else sent before them) or a poll
    (`poll`, with the text, if any, sent before it)."""

    text: str
    buttons: list[list[Button]] = Field(default_factory=list)
    reply_to: str | None = None
    thread_id: str | None = None
    media: list[OutboundFile] = Field(default_factory=list)
    poll: Poll | None = None


class ActionEvent(BaseModel):
    """A button click: who clicked, on which message, in which chat, and the button's value."""

    channel: str
    account: str = "default"
    peer: Peer
    sender_id: str
    sender_name: str | None = None
    message_id: str
    value: str
    thread_id: str | None = None
    click_id: str | None = None  # the platform's id for this click, the same on a redelivery


OnMessage = Callable[[InboundMessage], Awaitable[None]]
OnAction = Callable[[ActionEvent], Awaitable[str | None]]  # returns a notice only the clicker sees, or None

NOTICE_BUDGET_SECONDS = 2.5  # Discord wants an interaction answered within 3 s; Telegram and Slack are kinder
_T = TypeVar("_T")
_late_work: set[asyncio.Task[Any]] = set()


async def within(
    work: Awaitable[_T], seconds: float, what: str, late: set[asyncio.Task[Any]] | None = None
) -> _T | None:
    """`work`'s result if it comes within `seconds` (its exception too); otherwise None, and the work finishes
    in the background, kept in `late` (a module-wide set by default) and its failure logged, so that the
    platform gets its answer in time."""
    task: asyncio.Task[_T] = asyncio.ensure_future(work)
    try:
        async with asyncio.timeout(seconds):
            return await asyncio.shield(task)
    except TimeoutError:
        log.warning("%s is slow; answering the platform first", what)
        keep = _late_work if late is None else late
        keep.add(task)
        task.add_done_callback(lambda done: _late_done(keep, done, what))
        return None


def _late_done(late: set[asyncio.Task[Any]], task: asyncio.Task[Any], what: str) -> None:
    late.discard(task)
    if not task.cancelled() and task.exception() is not None:
        log.error("%s failed after the platform was answered: %r", what, task.exception())


class ChannelAdapter(Protocol):
    """One account on one platform. `on_message` returns once the message is safely recorded, so an adapter
    acknowledges the platform (commits an offset, answers a webhook) only after awaiting it. An adapter may keep
    a `health` attribute (channels.health.ChannelHealth), which `bot status`, `/status` and the metrics read."""

    channel: str
    account: str
    capabilities: Capabilities
    bot_username: str | None  # for `/command@name` (None where the platform has no such thing)

    @property
    def settings(self) -> AccountSettings:
        """Who may talk to this account, mention gating, streaming."""
        ...

    async def start(self, on_message: OnMessage, on_action: OnAction) -> None:
        """Connect and begin delivering; returns once running (delivery continues in the background)."""
        ...

    async def stop(self) -> None: ...

    async def send(self, target: ChatTarget, message: OutboundMessage) -> str | None:
        """Send one message; returns the platform's message id (None where the platform has none). The text is
        never longer than `capabilities.max_text_length`: the gateway's delivery splits longer ones."""
        ...

    async def edit(self, target: ChatTarget, message_id: str, message: OutboundMessage) -> None: ...

    async def delete(self, target: ChatTarget, message_id: str) -> None: ...

    async def react(self, target: ChatTarget, message_id: str, emoji: str) -> None: ...

    async def typing(self, target: ChatTarget) -> None: ...

    def download(self, attachment: Attachment) -> AsyncGenerator[bytes, None]:
        """The bytes of a file that came with a message, streamed in chunks from the platform (use it with
        `contextlib.aclosing`). ChannelError when the platform will not give it."""
        ...

    async def create_thread(self, target: ChatTarget, name: str, message_id: str | None = None) -> str:
        """Start a thread named `name` in the chat (from message `message_id` where the platform starts threads
        from a message); returns the thread id, which a ChatTarget's `thread_id` then names. Only called where
        `capabilities.threads` says the channel has threads."""
        ...


@runtime_checkable
class TurnEnds(Protocol):
    """An adapter whose capabilities say `ends_turns`: after everything a turn said to a chat, the outbox tells it the
    turn is over and which of the chat's messages (their `message_id`s) it answered (an HTTP response waits for
    this)."""

    async def end_turn(self, target: ChatTarget, answered: list[str]) -> None: ...


@runtime_checkable
class ElectedIngress(Protocol):
    """An adapter whose listening may run in only one process of several serving the same bot from one database
    (Telegram's long polling for a token, one Discord shard). When the gateway sets `ingress_deferred` before
    `start()`, start connects for sending only; the gateway then opens a listener once this process has won its
    election (an advisory lock per key) and closes it when the lock is lost. `ingress_keys()` names the listeners
    (stable across processes, no secret in them: e.g. `telegram:<hash of the token>`); none when any process may
    listen (a Telegram webhook, Slack)."""

    ingress_deferred: bool

    def ingress_keys(self) -> list[str]: ...

    async def open_ingress(self, key: str) -> None:
        """Begin listening as `key` (after `start()`); idempotent."""
        ...

    async def close_ingress(self, key: str) -> None:
        """Stop listening as `key` (another process takes over); sending keeps working; idempotent."""
        ...


class TextOnly:
    """What an adapter of a channel without files or threads inherits: `download` and `create_thread` refuse."""

    channel: str

    async def download(self, attachment: Attachment) -> AsyncGenerator[bytes, None]:
        """Refuse: this channel carries no files."""
        raise ChannelError(f"{self.channel} carries no files")
        yield b""  # unreachable: makes this an async generator, as the protocol's callers expect

    async def create_thread(self, target: ChatTarget, name: str, message_id: str | None = None) -> str:
        """Refuse: this channel has no threads."""
        raise ChannelError(f"{self.channel} has no threads")


@dataclass(frozen=True)
class ChannelSetup:
    """What the application hands a channel plugin besides the account's settings."""

    commands: Sequence[tuple[str, str]] = ()  # (name, description) of the chat commands, for a platform's menu


@dataclass(frozen=True)
class ChannelPlugin:
    """A channel as a plugin (entry point group `switchboard.channels`, named for the channel): the settings model
    of its accounts, which `bot config check` validates, and how to build one account's adapter. Keep the
    platform's SDK out of the module that defines it: import it inside `adapter`."""

    settings: type[AccountSettings]
    adapter: Callable[[str, Any, ChannelSetup], ChannelAdapter]
