"""The three chat platforms behind one interface, each on its fake server (tests/fakes): what a test of behaviour every
platform shares needs (its config part, who speaks, delivering a DM or a group message with text or files, what the
bot posted and its buttons, clicking one, breaking the connection), and the `platform` fixture that runs such a test
once on each. What only one platform has stays in that platform's own tests; a platform's extra checks of a shared
behaviour are its methods here (`fetched`, `while_stalled`, `check_healed`)."""

from __future__ import annotations

import asyncio
import contextlib
import html
import json
import sys
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import unquote

import configs
import pytest
from fakes.discord import CHANNEL_ID, FakeDiscord, FakeUser
from fakes.llm import FakeLLM
from fakes.slack import FakeSlack, dm_channel
from fakes.telegram import FakeTelegram
from helpers import eventually, status_file_shows

from bot.gateway.adapters import build_adapters
from bot.plugins import Plugins
from channels.base import ActionEvent, ChannelAdapter, InboundMessage

PLATFORMS = ("telegram", "discord", "slack")
NO_MODEL = "http://127.0.0.1:9/v1"  # a model nobody asks: for an adapter alone

Where = Literal["dm", "group"]  # the owner's DM with the bot, or the group (channel) the fake sets up
Kind = Literal["image", "document", "voice"]


@dataclass(frozen=True)
class Sender:
    """Someone who writes to the bot: the platform's id for them (as text) and the name the bot calls them by."""

    id: str
    name: str


@dataclass(frozen=True)
class File:
    """A file a person sends: its bytes, its name and type as their app gives them (None: the app gives none), and
    for a recording its length in seconds."""

    data: bytes
    name: str
    mime_type: str | None = None
    kind: Kind = "document"
    duration: float | None = None


@dataclass(frozen=True)
class Button:
    label: str
    value: str  # what a click sends back (Telegram's callback_data, Discord's custom_id, Slack's value)


@dataclass(frozen=True)
class Shown:
    """One of the bot's messages as it stands now (after edits): where it is, its id, each text a person may read in
    it (Telegram's HTML parsed, Slack's entities read; on Slack the notification text, then each section of its
    blocks), the text as the bot sent it (Telegram's HTML, Slack's mrkdwn) and its buttons."""

    chat: str
    ref: str
    texts: tuple[str, ...]
    sent: str
    buttons: tuple[Button, ...] = ()

    @property
    def text(self) -> str:
        return "\n".join(self.texts)


@dataclass(frozen=True)
class Click:
    """A click a test made: the fake's handle on it (Telegram's callback query id, Discord's interaction id, Slack's
    envelope id), who clicked, and (Slack) how many ephemeral messages had been posted before it."""

    handle: str
    sender: Sender
    ephemerals_before: int = 0


class Inbox:
    """What an adapter handed over."""

    def __init__(self) -> None:
        self.messages: list[InboundMessage] = []
        self.actions: list[ActionEvent] = []

    async def on_message(self, message: InboundMessage) -> None:
        self.messages.append(message)

    async def on_action(self, event: ActionEvent) -> None:
        self.actions.append(event)

    async def wait(self, count: int) -> list[InboundMessage]:
        """The messages, once there are `count` of them."""
        await eventually(lambda: len(self.messages) >= count, f"{count} messages handed over")
        return self.messages

    async def message(self, count: int = 1) -> InboundMessage:
        """The `count`-th message, once it is there."""
        return (await self.wait(count))[count - 1]


class Platform(ABC):
    """One platform on its fake server. Chats are named by `Where`; ids are text whatever the platform's type."""

    name: str
    owner: Sender  # the bot's owner (`owners` in `config`), who writes by default
    stranger: Sender  # someone else, not an owner
    shows_typing: bool = True  # the platform shows a bot's typing (Slack shows none)
    # A click can still come for a button the bot has taken off its message (a client not yet refreshed); on Discord
    # it cannot: the click carries the message as it is now, and discord.py finds no such button on it.
    stale_clicks: bool = True

    @property
    def started(self) -> str:
        """The log line of a `bot run` whose account `main` on this platform has started."""
        return f"channel {self.name} account main started"

    @abstractmethod
    def part(self, **settings: Any) -> dict[str, Any]:
        """The config part of account `main` on the fake (tests/configs.py), with `settings` added."""

    def config(
        self, tmp_path: Path, llm: FakeLLM, account: dict[str, Any] | None = None, **sections: Any
    ) -> dict[str, Any]:
        """A bot's config: account `main` (with `account` settings), the owner, agent `main` bound to the account,
        then `sections` over it."""
        binding = {"agent": "main", "match": {"channel": self.name, "account": "main"}}
        base = {"owners": [f"{self.name}:{self.owner.id}"], "bindings": [binding]}
        return configs.config_dict(tmp_path, llm, self.part(**(account or {})), base, **sections)

    @abstractmethod
    def chat(self, where: Where = "dm") -> str:
        """The id of the owner's DM with the bot, or of the group."""

    @contextlib.asynccontextmanager
    async def adapter(self, tmp_path: Path, **settings: Any) -> AsyncIterator[tuple[ChannelAdapter, Inbox]]:
        """The platform's adapter for account `main` (dm_policy open, then `settings`), built from the config as `bot
        run` builds it and started, handing what it receives to an Inbox; stopped at the end."""
        config = configs.config_of(tmp_path, NO_MODEL, self.part(**({"dm_policy": "open"} | settings)))
        adapters, skipped = build_adapters(config, Plugins())
        assert skipped == [], skipped
        [started], inbox = adapters, Inbox()
        await started.start(inbox.on_message, inbox.on_action)
        try:
            yield started, inbox
        finally:
            await started.stop()

    # --- delivering --------------------------------------------------------------------------------------------------

    @abstractmethod
    async def dm(self, text: str, sender: Sender | None = None) -> None:
        """A direct message to the bot from `sender` (the owner by default)."""

    @abstractmethod
    async def group_message(self, text: str, sender: Sender | None = None) -> None:
        """A message in the group that mentions the bot, from `sender` (the owner by default)."""

    @abstractmethod
    async def confirmed(self) -> None:
        """Wait until the platform knows the bot took every message delivered so far (Telegram: a getUpdates asked
        past them; Slack: each envelope acked); Discord's gateway asks for no confirmation."""

    @abstractmethod
    async def send_files(self, files: Sequence[File], text: str = "") -> list[str]:
        """A DM from the owner carrying `files` and `text`, as the platform's app sends several files at once
        (Telegram: an album, the text the first part's caption); returns the key `fetched` names each file by."""

    @abstractmethod
    def voice_note(self) -> File:
        """A voice note of 104 bytes and 4.2 (Telegram: 4) seconds as the platform's app records it."""

    @abstractmethod
    def saved_as(self, file: File) -> str:
        """The name the bot gives `file` in the inbox (before it makes the name safe): its own, or for one the
        platform delivers without a name (Telegram's photos and voice notes) one made of its kind and type."""

    @abstractmethod
    def line_name(self, file: File) -> str:
        """How the model's line about `file` names it: ` "name"`, or nothing when the platform names none."""

    @abstractmethod
    def fetched(self) -> list[str]:
        """The files the bot fetched, in order, by the keys `send_files` returned; checks as it goes that each was
        fetched the platform's way (Telegram: looked up by getFile, once, then downloaded; Discord: from the CDN,
        without the bot token; Slack: from url_private, with it)."""

    # --- what the bot posted -----------------------------------------------------------------------------------------

    @abstractmethod
    def escaped(self, text: str) -> str:
        """Plain `text` as the platform's markup carries it (Telegram's HTML and Slack's mrkdwn escape `&`, `<` and
        `>`)."""

    @abstractmethod
    def messages_in(self, chat: str) -> list[Shown]:
        """The bot's messages in the chat with this id as they stand now, oldest first."""

    def messages(self, where: Where = "dm") -> list[Shown]:
        """The bot's messages in the chat as they stand now, oldest first."""
        return self.messages_in(self.chat(where))

    def said(self, where: Where = "dm") -> list[str]:
        """The text of each of the bot's messages in the chat as a person reads it (Telegram's HTML parsed, Slack's
        entities read; Discord's markdown as sent), oldest first."""
        return [message.texts[0] for message in self.messages(where)]

    def sent(self, where: Where = "dm") -> list[str]:
        """The text of each of the bot's messages in the chat as the bot sent it (its markup), oldest first."""
        return [message.sent for message in self.messages(where)]

    async def wait_said(self, condition: Callable[[list[str]], bool], where: Where = "dm") -> list[str]:
        """`said(where)` once it satisfies `condition`."""
        await eventually(lambda: condition(self.said(where)), f"the bot's messages in the {where} on {self.name}")
        return self.said(where)

    async def wait_message(self, condition: Callable[[Shown], bool], what: str, where: Where = "dm") -> Shown:
        """The first of the bot's messages in the chat that satisfies `condition`, once there is one."""

        def found() -> list[Shown]:
            return [message for message in self.messages(where) if condition(message)]

        await eventually(lambda: bool(found()), what)
        return found()[0]

    def message(self, shown: Shown) -> Shown:
        """The message `shown` as it stands now."""
        [now] = [message for message in self.messages_in(shown.chat) if message.ref == shown.ref]
        return now

    @abstractmethod
    def posted_to(self) -> list[tuple[str, str | None]]:
        """Where each message the bot posted went (its edits are not posts), in order: (chat, thread or None)."""

    @abstractmethod
    def typed(self, where: Where = "dm") -> bool:
        """Whether the bot has shown that it is typing in the chat."""

    # --- buttons -----------------------------------------------------------------------------------------------------

    @abstractmethod
    async def click(self, shown: Shown, value: str, sender: Sender) -> Click:
        """`sender` clicks the button of `shown` that sends `value`."""

    @abstractmethod
    async def refusal(self, click: Click) -> str:
        """The notice that answered `click`, once it came, checked to be one only the clicker sees."""

    @abstractmethod
    async def taken(self, click: Click) -> None:
        """Wait until `click` was answered, and check that it was answered with no notice (it counted)."""

    # --- a connection that goes bad ----------------------------------------------------------------------------------

    @abstractmethod
    def for_watchdog(self) -> dict[str, Any]:
        """The account settings of a watchdog test, which notices a silent connection within a few seconds (the fake
        made ready for it too)."""

    @abstractmethod
    async def break_connection(self) -> None:
        """The bot's connection goes bad without a word: Telegram's getUpdates hang, Discord's gateway delivers
        events but acknowledges no heartbeat (a zombie), Slack's socket stays open but says nothing."""

    @abstractmethod
    async def while_stalled(self, folder: Path) -> None:
        """Once the bot found the stall: what the platform shows meanwhile, and the end of an outage that lasts
        until the test ends it (Telegram's silence covers new connections too)."""

    @abstractmethod
    async def check_healed(self, folder: Path, log: str) -> None:
        """Once the account recovered: how it did on the wire (`folder`: where the bot runs, `log`: its log)."""


async def bot_status(folder: Path, channel: str) -> tuple[int, list[str]]:
    """`bot status --json` beside the bot running in `folder`: its exit status and the states it shows for
    `channel`'s accounts."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "status", "--json", "--config", str(folder / "bindings.yaml"),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, _ = await process.communicate()
    report = json.loads(out)
    shown = [entry["state"] for entry in report.get("channels", []) if entry["channel"] == channel]
    return process.returncode or 0, shown


# --- Telegram ----------------------------------------------------------------------------------------------------

# The kind of message Telegram carries each kind of file as, and the name the bot gives a file Telegram names not.
_TELEGRAM_KINDS: dict[Kind, str] = {"image": "photo", "document": "document", "voice": "voice"}
_TELEGRAM_UNNAMED: dict[Kind, str] = {"image": "photo.jpg", "voice": "voice.oga"}
RECORDING = b"OggS\x00\x02" + bytes(range(98))  # an Ogg-ish voice note, 104 bytes (Telegram's and Discord's)
CLIP = b"\x1aE\xdf\xa3" + bytes(range(100))  # a WebM-ish recording, 104 bytes (Slack's)


class TelegramPlatform(Platform):
    name = "telegram"

    def __init__(self, tg: FakeTelegram) -> None:
        self.tg = tg
        self.owner = Sender("4242", "Owner")
        self.stranger = Sender("555", "Stranger")
        self.updates: list[dict[str, Any]] = []  # of every message delivered

    def part(self, **settings: Any) -> dict[str, Any]:
        return configs.telegram(self.tg, **settings)

    def chat(self, where: Where = "dm") -> str:
        return self.owner.id if where == "dm" else str(self.tg.group_id)

    async def dm(self, text: str, sender: Sender | None = None) -> None:
        who = sender or self.owner
        self.updates.append(await self.tg.private_message(text, user_id=int(who.id), name=who.name))

    async def group_message(self, text: str, sender: Sender | None = None) -> None:
        who = sender or self.owner
        self.updates.append(await self.tg.group_message(text, user_id=int(who.id), name=who.name, mention=True))

    async def confirmed(self) -> None:
        for update in self.updates:
            await self.tg.acknowledged(update)

    async def send_files(self, files: Sequence[File], text: str = "") -> list[str]:
        kinds = [_TELEGRAM_KINDS[file.kind] for file in files]
        options = [self._options(file) for file in files]
        sender = int(self.owner.id)
        if len(files) == 1:
            updates = [await self.tg.media_message(kinds[0], files[0].data, caption=text, user_id=sender, **options[0])]
        else:
            parts = [
                (kind, file.data, text if number == 0 else "", own)
                for number, (kind, file, own) in enumerate(zip(kinds, files, options, strict=True))
            ]
            updates = await self.tg.media_group(parts, user_id=sender)
        self.updates += updates
        keys = []
        for update, kind in zip(updates, kinds, strict=True):
            item = update["message"][kind]
            keys.append(str((item[-1] if kind == "photo" else item)["file_id"]))  # a photo's largest size
        return keys

    @staticmethod
    def _options(file: File) -> dict[str, Any]:
        """What Telegram's message says of the file: a photo and a voice note carry no name."""
        if file.kind == "image":
            return {}
        found: dict[str, Any] = {"mime_type": file.mime_type}
        if file.kind == "voice":
            found["duration"] = int(file.duration or 0)
        else:
            found["name"] = file.name
        return found

    def voice_note(self) -> File:
        return File(RECORDING, "voice.oga", "audio/ogg", kind="voice", duration=4)

    def saved_as(self, file: File) -> str:
        return _TELEGRAM_UNNAMED.get(file.kind, file.name)

    def line_name(self, file: File) -> str:
        return "" if file.kind in _TELEGRAM_UNNAMED else f' "{file.name}"'

    def fetched(self) -> list[str]:
        asked = self.tg.calls("getFile")
        assert all(list(call) == ["file_id"] for call in asked), asked  # looked up by its id alone
        keys = [str(call["file_id"]) for call in asked]
        # each file looked up was fetched from the file server once, and nothing else was
        assert sorted(self.tg.downloads) == sorted(self.tg.files[key].path for key in keys)
        return keys

    def escaped(self, text: str) -> str:
        return html.escape(text, quote=False)

    def messages_in(self, chat: str) -> list[Shown]:
        stored = sorted((m for m in self.tg.messages.values() if m.chat_id == int(chat)), key=lambda m: m.message_id)
        return [
            Shown(
                chat,
                str(message.message_id),
                (message.visible,),
                message.text,
                tuple(
                    Button(button["text"], button["callback_data"])
                    for row in (message.reply_markup or {}).get("inline_keyboard", [])
                    for button in row
                ),
            )
            for message in stored
        ]

    def posted_to(self) -> list[tuple[str, str | None]]:
        return [
            (str(call["chat_id"]), None if call.get("message_thread_id") is None else str(call["message_thread_id"]))
            for call in self.tg.calls("sendMessage")
        ]

    def typed(self, where: Where = "dm") -> bool:
        return any(str(call["chat_id"]) == self.chat(where) for call in self.tg.calls("sendChatAction"))

    async def click(self, shown: Shown, value: str, sender: Sender) -> Click:
        update = await self.tg.callback_query(
            value, message_id=int(shown.ref), chat_id=int(shown.chat), user_id=int(sender.id), name=sender.name
        )
        return Click(str(update["callback_query"]["id"]), sender)

    async def _answer(self, click: Click) -> dict[str, Any]:
        """answerCallbackQuery for the click, which comes once the click was judged."""
        await eventually(lambda: click.handle in self.tg.answered, f"the answer to click {click.handle}")
        [answer] = [call for call in self.tg.calls("answerCallbackQuery") if call["callback_query_id"] == click.handle]
        return answer

    async def refusal(self, click: Click) -> str:
        answer = await self._answer(click)
        assert answer["show_alert"] in (True, "true"), answer  # an alert only the clicker sees
        return str(answer["text"])

    async def taken(self, click: Click) -> None:
        answer = await self._answer(click)
        assert "text" not in answer, answer

    def for_watchdog(self) -> dict[str, Any]:
        # The shortest stall_seconds the config takes with a 1 s long poll (poll_timeout + STALL_MARGIN): the stall
        # is a real getUpdates held open by the fake, waited through in real time; the decision itself is proven on
        # a fake clock in test_telegram_watchdog.py.
        return {"stall_seconds": 3}

    async def break_connection(self) -> None:
        self.tg.go_silent()
        await eventually(lambda: self.tg.hung >= 1, "a getUpdates held by the silence")

    async def while_stalled(self, folder: Path) -> None:
        await eventually(lambda: self.tg.hung >= 2, "a getUpdates on the new session, held too")
        state = folder / "state"
        await eventually(lambda: status_file_shows(state, "telegram", "main", "stalled"), "the status file's stall")
        assert await bot_status(folder, "telegram") == (1, ["stalled"])  # and `bot status` says so
        self.tg.resume()  # the held getUpdates stay held: only asking again gets an answer

    async def check_healed(self, folder: Path, log: str) -> None:
        assert await bot_status(folder, "telegram") == (0, ["connected"])  # `bot status` says it healed


# --- Discord -----------------------------------------------------------------------------------------------------


class DiscordPlatform(Platform):
    name = "discord"
    stale_clicks = False

    def __init__(self, dc: FakeDiscord) -> None:
        self.dc = dc
        self._users = {dc.alice.id: dc.alice, dc.bob.id: dc.bob}
        self.owner = Sender(dc.alice.id, "Alice")  # Discord's global name: the username, titled
        self.stranger = Sender(dc.bob.id, "Bob")
        self._connections = 0

    def part(self, **settings: Any) -> dict[str, Any]:
        return configs.discord(self.dc, **settings)

    def chat(self, where: Where = "dm") -> str:
        return self.dc.dm_channel_id(self.dc.alice) if where == "dm" else CHANNEL_ID

    def _user(self, sender: Sender | None) -> FakeUser:
        return self._users[(sender or self.owner).id]

    async def dm(self, text: str, sender: Sender | None = None) -> None:
        await self.dc.dm(text, user=self._user(sender))

    async def group_message(self, text: str, sender: Sender | None = None) -> None:
        await self.dc.guild_message(text, user=self._user(sender), channel_id=CHANNEL_ID, mention=True)

    async def confirmed(self) -> None:
        return None  # the gateway delivers, nothing confirms

    async def send_files(self, files: Sequence[File], text: str = "") -> list[str]:
        attachments = [
            self.dc.attachment(file.data, file.name, file.mime_type, duration=file.duration) for file in files
        ]
        await self.dc.message_with_files(attachments, text, voice=any(file.kind == "voice" for file in files))
        # the path the fake's CDN records a download under (decoded, as its route reads it)
        return [unquote(str(attachment["proxy_url"]).split("/attachments/", 1)[1]) for attachment in attachments]

    def voice_note(self) -> File:
        return File(RECORDING, "voice-message.ogg", "audio/ogg", kind="voice", duration=4.2)

    def saved_as(self, file: File) -> str:
        return file.name

    def line_name(self, file: File) -> str:
        return f' "{file.name}"'

    def fetched(self) -> list[str]:
        for download in self.dc.downloads:
            assert download.status == 200, download
            assert "Authorization" not in download.headers  # the CDN never sees the bot token
        return [download.path for download in self.dc.downloads]

    def escaped(self, text: str) -> str:
        return text

    def messages_in(self, chat: str) -> list[Shown]:
        return [
            Shown(
                chat,
                message["id"],
                (message.get("content") or "",),
                message.get("content") or "",
                tuple(
                    Button(item["label"], item["custom_id"])
                    for row in message.get("components") or []
                    for item in row["components"]
                ),
            )
            for message in self.dc.messages.values()
            if message["channel_id"] == chat
        ]

    def posted_to(self) -> list[tuple[str, str | None]]:
        return [(post.path.split("/")[2], None) for post in self.dc.posts()]  # a thread is a channel of its own

    def typed(self, where: Where = "dm") -> bool:
        return bool(self.dc.calls("POST", f"/channels/{self.chat(where)}/typing"))

    async def click(self, shown: Shown, value: str, sender: Sender) -> Click:
        data = await self.dc.click(shown.ref, value, user=self._user(sender))
        return Click(str(data["id"]), sender)

    async def _answer(self, click: Click) -> dict[str, Any]:
        def found() -> list[dict[str, Any]]:
            return [body for handle, body in self.dc.interaction_callbacks if handle == click.handle]

        await eventually(lambda: bool(found()), f"the answer to interaction {click.handle}")
        [body] = found()
        return body

    async def refusal(self, click: Click) -> str:
        body = await self._answer(click)
        assert body["type"] == 4 and body["data"]["flags"] == 64, body  # a message only the clicker sees
        return str(body["data"]["content"])

    async def taken(self, click: Click) -> None:
        assert await self._answer(click) == {"type": 6}  # acknowledged, no message

    def for_watchdog(self) -> dict[str, Any]:
        self.dc.heartbeat_interval_ms = 200  # heartbeats (and their ACKs) every 0.2 s, a zombie after 2 s without
        return {"streaming": "off", "stall_seconds": 2, "storm_reconnects": 50}  # no storm in a watchdog test

    async def break_connection(self) -> None:
        self._connections = self.dc.connections
        # A zombie that is never silent (a typing event every 0.1 s): discord.py's own watchdog, which counts any
        # frame as life, never leaves it; only the missing ACKs tell.
        self.dc.stop_acking(chatter=0.1)

    async def while_stalled(self, folder: Path) -> None:
        return None  # new connections are healthy: the bot leaves the zombie and resumes by itself

    async def check_healed(self, folder: Path, log: str) -> None:
        assert "no heartbeat ACK from the gateway" in log and "though events still arrive" in log
        assert self.dc.connections == self._connections + 1  # one new connection, which resumed the session
        assert [resume["session_id"] for resume in self.dc.resumes] == ["session-1"]


# --- Slack -------------------------------------------------------------------------------------------------------


class SlackPlatform(Platform):
    name = "slack"
    shows_typing = False  # Slack shows no typing indicator for bots

    def __init__(self, fake: FakeSlack) -> None:
        self.fake = fake
        self.owner = Sender("U0OWNER01", "owner")  # their username: what a click says of them
        self.stranger = Sender("U0STRANGE1", "stranger")
        self.envelopes: list[str] = []  # of every message delivered

    def part(self, **settings: Any) -> dict[str, Any]:
        return configs.slack(self.fake, **settings)

    def chat(self, where: Where = "dm") -> str:
        return dm_channel(self.owner.id) if where == "dm" else "C0GENERAL"

    async def dm(self, text: str, sender: Sender | None = None) -> None:
        self.envelopes.append(await self.fake.dm(text, user=(sender or self.owner).id))

    async def group_message(self, text: str, sender: Sender | None = None) -> None:
        user = (sender or self.owner).id
        self.envelopes += await self.fake.channel_message(text, channel=self.chat("group"), user=user, mention=True)

    async def confirmed(self) -> None:
        for envelope in self.envelopes:
            await self.fake.wait_for_ack(envelope)

    async def send_files(self, files: Sequence[File], text: str = "") -> list[str]:
        shared = []
        for file in files:
            extra: dict[str, Any] = {}
            if file.kind == "voice":  # recorded in Slack: an audio clip
                extra = {"subtype": "slack_audio", "duration_ms": int((file.duration or 0) * 1000)}
            shared.append(self.fake.add_file(file.data, file.name, file.mime_type, **extra))
        self.envelopes += await self.fake.share_files(shared, text, user=self.owner.id)
        # the path the fake records a fetch of url_private under (decoded, as its route reads it)
        return [unquote(str(item["url_private"]).removeprefix(self.fake.url)) for item in shared]

    def voice_note(self) -> File:
        return File(CLIP, "audio_message.webm", "audio/webm", kind="voice", duration=4.2)

    def saved_as(self, file: File) -> str:
        return file.name

    def line_name(self, file: File) -> str:
        return f' "{file.name}"'

    def fetched(self) -> list[str]:
        for request in self.fake.file_requests:
            assert request.authorization == f"Bearer {self.fake.bot_token}", request  # url_private wants the token
        return [request.path for request in self.fake.file_requests]

    def escaped(self, text: str) -> str:
        return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")

    @staticmethod
    def _read(text: str) -> str:
        """mrkdwn's three entities as the characters a person sees."""
        return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")

    def messages_in(self, chat: str) -> list[Shown]:
        found = []
        for (channel, ts), message in self.fake.messages.items():
            if channel != chat:
                continue
            blocks = message.get("blocks") or []
            blocks = json.loads(blocks) if isinstance(blocks, str) else blocks
            sections = [block["text"]["text"] for block in blocks if block["type"] == "section"]
            buttons = [
                Button(element["text"]["text"], element["value"])
                for block in blocks
                if block["type"] == "actions"
                for element in block["elements"]
            ]
            text = str(message.get("text") or "")
            texts = tuple(self._read(shown) for shown in (text, *sections))
            found.append(Shown(chat, ts, texts, text, tuple(buttons)))
        return found

    def posted_to(self) -> list[tuple[str, str | None]]:
        return [(str(body["channel"]), body.get("thread_ts")) for body in self.fake.posted]

    def typed(self, where: Where = "dm") -> bool:
        return False

    def _ephemerals(self, click: Click) -> list[dict[str, Any]]:
        later = self.fake.calls_to("chat.postEphemeral")[click.ephemerals_before :]
        return [call.body for call in later if call.body.get("user") == click.sender.id]

    async def click(self, shown: Shown, value: str, sender: Sender) -> Click:
        before = len(self.fake.calls_to("chat.postEphemeral"))
        envelope = await self.fake.click(
            message_ts=shown.ref, value=value, channel=shown.chat, user=sender.id, name=sender.name
        )
        return Click(envelope, sender, before)

    async def refusal(self, click: Click) -> str:
        await eventually(lambda: bool(self._ephemerals(click)), f"an ephemeral answer to {click.handle}")
        [notice] = self._ephemerals(click)  # posted for the clicker only
        return str(notice["text"])

    async def taken(self, click: Click) -> None:
        await self.fake.wait_for_ack(click.handle)  # acked once handled, the notice (if any) posted before
        assert self._ephemerals(click) == []

    def for_watchdog(self) -> dict[str, Any]:
        # A real socket left silent by the fake: the bot's watchdog waits through stall_seconds in real time. Short,
        # yet long enough that pongs 0.5 s apart never look like a stall on a loaded machine.
        return {"streaming": "off", "stall_seconds": 3, "ping_interval": 0.5}

    async def break_connection(self) -> None:
        self.fake.go_deaf()  # the socket stays open but says nothing more, not even a pong; new ones are live

    async def while_stalled(self, folder: Path) -> None:
        return None  # the bot opens a new connection by itself, which the fake serves

    async def check_healed(self, folder: Path, log: str) -> None:
        await self.confirmed()  # what was said during the outage came on the new connection, acked there
        assert self.fake.connections >= 2 and self.fake.max_open_sockets == 2
        await eventually(lambda: self.fake.open_sockets == 1, "the silent socket closed for good")


@pytest.fixture(params=PLATFORMS)
def platform(request: pytest.FixtureRequest) -> Platform:
    """Each platform in turn, on its fake server (the `fake_<name>` fixture)."""
    fake = request.getfixturevalue(f"fake_{request.param}")
    if request.param == "telegram":
        return TelegramPlatform(fake)
    if request.param == "discord":
        return DiscordPlatform(fake)
    return SlackPlatform(fake)
