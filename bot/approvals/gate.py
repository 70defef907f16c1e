"""Exec approvals: judge a command, ask the approvers with buttons (or `/approve`), wait, record, show the outcome."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import secrets
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Literal

from bot.approvals.text import Shown, shown_command
from bot.config.http_api import API_CHANNEL
from bot.config.live import LiveConfig, ReadsLiveConfig, live
from bot.config.owners_file import owner_key
from bot.config.settings import Config
from bot.observe.metrics import Metrics
from bot.store import ApprovalDecision, ApprovalRecord, ApprovalStatus, ApprovalStore
from channels import markup_slack
from channels.base import ActionEvent, Button, Capabilities, ChatTarget, OutboundMessage
from routing import Peer
from tools.base import RunInfo, ToolContext
from tools.exec import Authorization
from tools.exec_policy import AllowEntry, Verdict, evaluate
from tools.message import Messenger

log = logging.getLogger(__name__)

PREFIX = "ap"  # button values are `ap:<id>:<o|a|d>`: well within Telegram's 64 bytes of callback data
_CODES: dict[str, ApprovalDecision] = {"o": "allow-once", "a": "allow-always", "d": "deny"}
_WORDS: dict[str, ApprovalDecision] = {
    "allow-once": "allow-once",
    "once": "allow-once",
    "allow": "allow-once",
    "allow-always": "allow-always",
    "always": "allow-always",
    "deny": "deny",
    "reject": "deny",
    "block": "deny",
}
_OUTCOMES = {
    "allow-once": "Allowed (once)",
    "allow-always": "Allowed (always)",
    "deny": "Denied",
}
NOT_AUTHORIZED = "You are not authorized to approve this."
NOT_PENDING = "This approval request is unknown or no longer pending."
MAX_TURNS_KEPT = 1000  # turns whose count of requests is kept (a turn asks again only when it runs again)
POLL_SECONDS = 1.0  # how often a waiting run looks for a decision made from the CLI (another process)
# How long a click on a card another process is showing waits for that process to record where the card is (it
# records it right after the send returns; in a cluster the click may reach this process first).
RECORDING_WAIT_SECONDS = 10.0

Target = Literal["chat", "dm", "both"]
TerminalAsk = Callable[[ApprovalRecord], Awaitable[ApprovalDecision | None]]


class Approvals(ReadsLiveConfig):
    """Asks before a risky command runs, and only the approvers' answer counts.

    A request is stored before its message goes out; the run waits for a decision (a button, `/approve`, the
    `bot approvals` CLI or the terminal), or for expiry, which denies. Whoever decides, the messages are edited
    to show the outcome without buttons. Requests left pending by a previous process are expired at start.
    """

    def __init__(
        self,
        config: Config | LiveConfig,
        store: ApprovalStore,
        messenger: Messenger | None = None,
        *,
        terminal: TerminalAsk | None = None,
        clock: Callable[[], float] = time.time,
        own_files: Sequence[str] = (),
        metrics: Metrics | None = None,
        announce: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        """`announce` (a cluster's) tells every process of a decision made here (`wake` in each)."""
        self.live = live(config)
        self.own_files = list(own_files)  # a command that names one never runs, whoever would approve it
        self.store = store
        self.messenger = messenger
        self.terminal = terminal
        self.clock = clock
        self._decided: dict[str, asyncio.Event] = {}
        self.metrics = metrics or Metrics()  # each decision recorded here is counted (a gateway's, shared)
        self._showing: dict[str, asyncio.Event] = {}  # request id -> set once its cards are sent and recorded
        self._turn_asks: OrderedDict[str, int] = OrderedDict()  # turn -> requests it made in this process
        self.announce = announce

    # --- the exec tool's question -----------------------------------------------------------------------------

    async def authorize(self, command: str, ctx: ToolContext) -> Authorization:
        """May `command` run for this run? Asks a person when the policy says so (and waits for the answer)."""
        run = ctx.run
        settings = self.config.exec_for(run.agent)
        stored = [
            AllowEntry(executable=path, args=args, sha256=digest)
            for path, args, digest in await self.store.allowed_commands(run.agent)
        ]
        verdict = evaluate(
            command, settings, stored, path=os.environ.get("PATH"), cwd=run.workspace, protected=self.own_files
        )
        if verdict.decision == "allow":
            return Authorization(allowed=True, status="allowed", reason=verdict.reason)
        if verdict.decision == "deny":
            return Authorization(allowed=False, status="denied", reason=verdict.reason)
        if run.channel == API_CHANNEL and self.config.http_api.approvals == "refuse":
            reason = f"{verdict.reason}; this API refuses what needs an approval (http_api.approvals: refuse)"
            return Authorization(allowed=False, status="denied", reason=reason)
        approvers = list(settings.approvers if settings.approvers is not None else self.config.owner_keys())
        if not approvers and run.channel != "console":
            reason = f"{verdict.reason}; nobody can approve it (set `owners` or `agents[].exec.approvers`)"
            return Authorization(allowed=False, status="denied", reason=reason)
        turn_id = self._turn_request_id(run, command)
        found = await self.store.get_approval(turn_id) if turn_id is not None else None
        same = found is not None and (found.command, found.session_key) == (command, run.session_key)
        again = found if same else None
        if again is not None and again.status in ("allowed", "denied"):
            return await self._outcome(again, verdict)  # decided while the bot was down: the decision stands
        record = (
            again
            if again is not None and again.status == "pending"
            else ApprovalRecord(
                id=turn_id if turn_id is not None and found is None else secrets.token_hex(6),
                turn=run.turn,
                agent=run.agent,
                session_key=run.session_key,
                command=command,
                cwd=run.workspace or ".",
                requester=owner_key(run.channel, run.sender_id) if run.sender_id else None,
                approvers=[owner_key(*approver.split(":", 1)) for approver in approvers],
                offer_always=verdict.offer_always,
                created=self.clock(),
                expires=self.clock() + self.config.approvals.timeout_seconds,
                status="pending",
            )
        )
        targets = None if run.target is None or run.channel == "console" else self._targets(record, run.target)
        too_long = self._too_long(record, targets or [])
        if too_long is not None:  # refused before anything is stored or sent: never part of a command under buttons
            return Authorization(allowed=False, status="denied", reason=too_long)
        decided = self._decided[record.id] = asyncio.Event()  # first: a sweep for orphans must skip it
        announcing: asyncio.Future[int] | None = None
        try:
            if record is not again:
                await self.store.create_approval(record)  # before any message: a click only finds a stored request
            if targets is None:
                settled = await self._ask_terminal(record)
            else:
                # Shielded: a card that reached the chat is recorded even when the run is stopped meanwhile, so that
                # the request's end can be shown on it (else its buttons would stay, looking live).
                announcing = asyncio.ensure_future(self._announce(record, targets))
                if await asyncio.shield(announcing):
                    settled = await self._wait(record, decided)
                else:  # shown nowhere: nobody can answer it, so do not make the run wait for the expiry
                    reason = "nobody (the request could not be shown)"
                    settled = await self._settle(record.id, "denied", "deny", reason)
        except asyncio.CancelledError:  # the run was stopped: nobody can answer this request any more
            with contextlib.suppress(Exception):
                if announcing is not None:
                    await asyncio.shield(announcing)
                await self._show_outcome(await self._settle(record.id, "expired", None, None))
            raise
        finally:
            self._decided.pop(record.id, None)
        return await self._outcome(settled, verdict)

    def _turn_request_id(self, run: RunInfo, command: str) -> str | None:
        """The id of the turn's next request: made from the turn (the journaled message it answers), how many
        requests the turn made before and the command, so the same turn run again after a restart meets the request
        it made before instead of asking twice. None outside a turn."""
        if run.turn is None:
            return None
        count = self._turn_asks.pop(run.turn, 0) + 1
        self._turn_asks[run.turn] = count
        while len(self._turn_asks) > MAX_TURNS_KEPT:
            self._turn_asks.popitem(last=False)
        return hashlib.sha256(f"{run.turn}\0{count}\0{command}".encode()).hexdigest()[:12]

    async def _outcome(self, record: ApprovalRecord, verdict: Verdict) -> Authorization:
        who = record.decided_by
        if record.status == "expired":
            return Authorization(allowed=False, status="expired", reason="nobody approved it in time")
        if record.decision == "deny" or record.status != "allowed":
            return Authorization(allowed=False, status="denied", reason=f"denied by {who or 'an approver'}")
        if record.decision == "allow-always":
            for entry in verdict.always:
                await self.store.allow_command(record.agent, entry.executable, entry.args, who, entry.sha256)
        return Authorization(allowed=True, status="allowed", reason=_OUTCOMES[record.decision or ""], decided_by=who)

    # --- asking -----------------------------------------------------------------------------------------------

    def _targets(self, record: ApprovalRecord, origin: ChatTarget) -> list[ChatTarget]:
        """Where `approvals.target` says the request is shown: the chat it came from, the approvers' DMs, or both."""
        targets: list[ChatTarget] = []
        where = self.config.approvals.target
        if where in ("chat", "both"):
            targets.append(origin)
        if where in ("dm", "both"):
            targets += [target for target in self._approver_dms(record, origin) if target not in targets]
        return targets

    async def _announce(self, record: ApprovalRecord, targets: list[ChatTarget]) -> int:
        """Show the request in each of `targets`; how many places show it. Until every place is recorded, a click
        on a card waits for it (`on_click`)."""
        showing = self._showing[record.id] = asyncio.Event()
        try:
            return sum([await self._show(record, target) for target in targets])
        finally:
            showing.set()
            del self._showing[record.id]

    def _too_long(self, record: ApprovalRecord, targets: list[ChatTarget]) -> str | None:
        """Why the request cannot be shown whole, in one message with its buttons, everywhere it would go (the
        reason the model reads); None when it can. A request is refused rather than split: buttons under the tail
        of a command would ask for an answer about what the approver did not see."""
        tightest: tuple[int, int, str] | None = None  # (room for the command, its length there, channel)
        for target in targets:
            caps = self.messenger.capabilities(target.channel, target.account) if self.messenger is not None else None
            if caps is None:
                continue
            card = _length(_request_text(record), caps)
            command = _length(_code_body(shown_command(record.command)), caps, code=True)
            room = caps.max_text_length - (card - command)
            if card > caps.max_text_length and (tightest is None or room < tightest[0]):
                tightest = (room, command, target.channel)
        if tightest is None:
            return None
        room, length, channel = tightest
        return (
            f"the command is too long to show an approver whole ({length} characters as shown; {channel} shows at "
            f"most {max(room, 0)} in one approval request); split it into shorter commands"
        )

    def _approver_dms(self, record: ApprovalRecord, origin: ChatTarget) -> list[ChatTarget]:
        running = self.messenger.accounts() if self.messenger is not None else []
        found = []
        for approver in record.approvers:
            channel, _, sender = approver.partition(":")
            accounts = [account for name, account in running if name == channel]
            if not accounts:
                log.warning("approval %s: no running %s account to reach approver %s", record.id, channel, sender)
                continue
            account = origin.account if channel == origin.channel and origin.account in accounts else accounts[0]
            found.append(ChatTarget(channel=channel, account=account, peer=Peer("direct", sender)))
        return found

    async def _show(self, record: ApprovalRecord, target: ChatTarget) -> bool:
        if self.messenger is None:
            return False
        caps = self.messenger.capabilities(target.channel, target.account)
        buttons = _buttons(record) if caps is not None and caps.buttons else []
        text = _request_text(record)
        if caps is not None and _length(text, caps) > caps.max_text_length:  # checked before storing; never split
            log.warning("approval %s: too long to show whole in %s; not sent", record.id, target.channel)
            return False
        try:
            chat = f"{target.channel}/{target.account}/{target.peer.kind}:{target.peer.id}"
            card = OutboundMessage(text=text, buttons=buttons)
            message_id = await self.messenger.send(target, card, key=f"approval:{record.id}:{chat}")
        except Exception as error:
            log.warning("approval %s: could not show it in %s: %s", record.id, target.channel, error)
            return False
        if message_id is not None:
            where = {"target": target.model_dump(mode="json"), "message_id": message_id}
            await self.store.add_approval_message(record.id, where)
        return True

    async def _ask_terminal(self, record: ApprovalRecord) -> ApprovalRecord:
        decision = None
        if self.terminal is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(record.expires - self.clock()):
                    decision = await self.terminal(record)
        if self.terminal is None:  # nobody to ask: the safe answer
            return await self._settle(record.id, "denied", "deny", "nobody (no terminal to ask on)")
        if decision is None:
            return await self._settle(record.id, "expired", None, None)
        return await self._settle(record.id, "denied" if decision == "deny" else "allowed", decision, "terminal")

    async def _wait(self, record: ApprovalRecord, decided: asyncio.Event) -> ApprovalRecord:
        """Until a decision (here, or by the CLI in another process) or expiry; then show the outcome."""
        while True:
            left = record.expires - self.clock()
            if left <= 0:
                settled = await self._settle(record.id, "expired", None, None)
                break
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(POLL_SECONDS, left)):
                    await decided.wait()
            current = await self.store.get_approval(record.id)
            if current is not None and current.status != "pending":
                settled = current
                break
        await self._show_outcome(settled)
        return settled

    async def _settle(
        self, approval_id: str, status: Literal["allowed", "denied", "expired"], decision: ApprovalDecision | None,
        decided_by: str | None,
    ) -> ApprovalRecord:  # fmt: skip
        """Decide unless somebody already has; the request as it stands afterwards."""
        settled = await self.store.decide_approval(approval_id, status, decision, decided_by)
        if settled is None:
            settled = await self.store.get_approval(approval_id)
        else:
            self.metrics.decided(decision or status)
        assert settled is not None
        return settled

    async def _show_outcome(self, record: ApprovalRecord) -> None:
        if self.messenger is None:
            return
        for where in record.messages:
            target = ChatTarget.model_validate(where["target"])
            text = _outcome_text(record, self.messenger.capabilities(target.channel, target.account))
            try:
                await self.messenger.edit(target, str(where["message_id"]), OutboundMessage(text=text))
            except Exception as error:
                log.warning("approval %s: could not update its message in %s: %s", record.id, target.channel, error)

    # --- answers ----------------------------------------------------------------------------------------------

    def is_click(self, event: ActionEvent) -> bool:
        return event.value.startswith(f"{PREFIX}:")

    async def on_click(self, event: ActionEvent) -> str | None:
        """A click on an approval button; a notice for the clicker when nothing happened."""
        _, _, rest = event.value.partition(":")
        approval_id, _, code = rest.partition(":")
        decision = _CODES.get(code)
        record = await self.store.get_approval(approval_id) if decision is not None and approval_id else None
        if record is not None and record.status == "pending" and not _shown_on(record, event):
            # Clicked between the card reaching the chat and its place being recorded: look once it is.
            record = await self._once_recorded(record, event)
        if decision is None or record is None or not _shown_on(record, event):
            # Not a button of this request's own card: one the agent sent can look the same, but decides nothing.
            return NOT_PENDING
        return await self.decide(record, decision, owner_key(event.channel, event.sender_id), event.sender_name)

    async def _once_recorded(self, record: ApprovalRecord, event: ActionEvent) -> ApprovalRecord | None:
        """`record` read again once the clicked card's place is recorded: at once when this process is showing it;
        when another process is (a cluster), within RECORDING_WAIT_SECONDS, or as it stands then."""
        showing = self._showing.get(record.id)
        if showing is not None:
            await showing.wait()
            return await self.store.get_approval(record.id)
        if self.announce is None:  # one process: nobody else is showing it
            return record
        loop = asyncio.get_running_loop()
        deadline = loop.time() + RECORDING_WAIT_SECONDS
        current: ApprovalRecord | None = record
        while loop.time() < deadline:
            await asyncio.sleep(0.05)
            current = await self.store.get_approval(record.id)
            if current is None or current.status != "pending" or _shown_on(current, event):
                break
        return current

    async def decide(
        self, record: ApprovalRecord, decision: ApprovalDecision, who: str, name: str | None = None
    ) -> str | None:
        """Record an approver's decision on `record` (as read just now); a sentence for `who` when it did not count
        (None when it did)."""
        approval_id = record.id
        if record.status != "pending" or record.expires <= self.clock():
            return NOT_PENDING
        if who not in record.approvers:
            log.warning("approval %s: %s is not an approver; nothing changes", approval_id, who)
            return NOT_AUTHORIZED
        if decision == "allow-always" and not record.offer_always:
            decision = "allow-once"  # Allow always was not offered for this command
        status: ApprovalStatus = "denied" if decision == "deny" else "allowed"
        settled = await self.store.decide_approval(approval_id, status, decision, name or who)
        if settled is None:
            return NOT_PENDING
        log.info("approval %s: %s by %s", approval_id, decision, who)
        self.metrics.decided(decision)
        waiting = self._decided.get(approval_id)
        if waiting is not None:
            waiting.set()  # the waiting run shows the outcome
        elif self.announce is not None:
            await self.announce(approval_id)  # the run waiting in another process shows it
        else:  # a request held for a turn that has not run again yet: nobody else will show it
            await self._show_outcome(settled)
        return None

    def wake(self, approval_id: str) -> None:
        """Another process decided `approval_id`: a run waiting for it here goes on now (not at its next look)."""
        waiting = self._decided.get(approval_id)
        if waiting is not None:
            waiting.set()

    async def on_command(self, args: str, who: str, name: str | None = None) -> str:
        """`/approve <id> allow-once|allow-always|deny` (an unambiguous prefix of the id is enough)."""
        parts = args.split()
        if len(parts) != 2 or parts[1].lower() not in _WORDS:
            return "Usage: /approve <id> allow-once|allow-always|deny"
        # Only requests `who` may decide count: anyone else gets the same answer whether or not one exists.
        matches = [match for match in await self.store.find_approvals(parts[0].lower()) if who in match.approvers]
        if not matches:
            return NOT_PENDING
        if len(matches) > 1:
            return f"More than one pending request starts with {parts[0]}: give more of the id."
        refusal = await self.decide(matches[0], _WORDS[parts[1].lower()], who, name)
        return refusal or f"{_OUTCOMES[_WORDS[parts[1].lower()]]}: {matches[0].id}."

    async def expire_orphans(self, orphans: list[ApprovalRecord] | None = None) -> int:
        """Requests a previous process left pending (`orphans`, default: every pending one that no run of this
        process waits for) can never be answered: expire them and say so where they were shown."""
        expired = 0
        for record in await self.store.pending_approvals() if orphans is None else orphans:
            if record.id in self._decided:
                continue  # waited on by a run of this process
            settled = await self.store.decide_approval(record.id, "expired", None, None)
            if settled is not None:
                expired += 1
                self.metrics.decided("expired")
                await self._show_outcome(settled)
        return expired

    async def expire_when_due(self, held: list[ApprovalRecord]) -> int:
        """Expire `held` requests (left pending by a previous process for turns that run again) once their time is
        up, unless a run waits for them again by then."""
        await asyncio.sleep(max(0.0, max(record.expires for record in held) - self.clock()))
        return await self.expire_orphans(held)


def _shown_on(record: ApprovalRecord, event: ActionEvent) -> bool:
    """Whether the clicked message is one this request was shown in (the approvals module sent it)."""
    return any(
        shown.get("message_id") == event.message_id
        and shown.get("target", {}).get("channel") == event.channel
        and shown.get("target", {}).get("account") == event.account
        for shown in record.messages
    )


def card(record: ApprovalRecord) -> tuple[str, list[tuple[Button, ApprovalDecision]]]:
    """The card of `record` as every surface shows it: its text (Markdown: the request, or once decided or expired
    its outcome) and, while it is pending, its buttons with the decision each one makes."""
    if record.status != "pending":
        return _outcome_text(record), []
    return _request_text(record), [(button, _CODES[button.value[-1]]) for row in _buttons(record) for button in row]


def _buttons(record: ApprovalRecord) -> list[list[Button]]:
    row = [Button(label="Allow once", value=f"{PREFIX}:{record.id}:o", style="success")]
    if record.offer_always:
        row.append(Button(label="Allow always", value=f"{PREFIX}:{record.id}:a", style="primary"))
    row.append(Button(label="Deny", value=f"{PREFIX}:{record.id}:d", style="danger"))
    return [row]


def _clock_text(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%H:%M UTC")


def _request_text(record: ApprovalRecord) -> str:
    """The request card, the same with buttons or without (then `/approve` is how to answer)."""
    minutes = max(1, round((record.expires - record.created) / 60))
    choices = "allow-once|allow-always|deny" if record.offer_always else "allow-once|deny"
    shown = shown_command(record.command)
    return "\n".join(
        [
            "**Approval required**",
            _code_block(shown),
            *_warning(shown),
            f"Directory: `{shown_command(record.cwd).text}`",
            f"Agent: {record.agent} · expires in {minutes} min ({_clock_text(record.expires)})",
            f"ID: `{record.id}` (or reply `/approve {record.id[:8]} {choices}`)",
        ]
    )


def _outcome_text(record: ApprovalRecord, caps: Capabilities | None = None) -> str:
    """The card once decided or expired (no buttons); without the command if, with a long name, it would no
    longer fit the channel's one message (never a part of it)."""
    if record.status == "expired":
        outcome = "Expired: nobody approved it in time"
    else:
        who = shown_command(record.decided_by or "an approver").text
        outcome = f"{_OUTCOMES.get(record.decision or 'deny', 'Denied')} by {who}"
    shown = shown_command(record.command)
    text = "\n".join([f"**{outcome}**", _code_block(shown), *_warning(shown), f"ID: `{record.id}`"])
    if caps is None or _length(text, caps) <= caps.max_text_length:
        return text
    return "\n".join([f"**{outcome}**", "(the command is too long to repeat with the outcome)", f"ID: `{record.id}`"])


def _code_block(shown: Shown) -> str:
    return f"```\n{_code_body(shown)}\n```"


def _code_body(shown: Shown) -> str:
    return shown.text.replace("```", "`\u200b``")  # the command cannot close the code block around it


def _warning(shown: Shown) -> list[str]:
    warning = shown.warning()
    return [] if warning is None else [warning]


def _length(text: str, caps: Capabilities, *, code: bool = False) -> int:
    """How much of `caps.max_text_length` a card (or, with `code`, the inside of its code block) takes: counted as
    Telegram counts (UTF-16 code units, never fewer than the characters the adapters' splitting counts), after
    Slack's conversion where it applies."""
    if caps.markup == "slack-mrkdwn":
        text = markup_slack.escape(text) if code else markup_slack.markdown_to_mrkdwn(text)
    return len(text.encode("utf-16-le", "surrogatepass")) // 2
