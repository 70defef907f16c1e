"""bot/approvals.py on its own: the real SQLite store and a courier that records what would be shown (the adapters
behind it are proven end to end in test_approvals_telegram.py and test_approvals_discord_slack.py)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from helpers import WAIT, eventually

from bot.approvals import NOT_AUTHORIZED, NOT_PENDING, Approvals
from bot.config import parse_config
from bot.store import SqliteStore
from channels.base import ActionEvent, Capabilities, ChatTarget, OutboundMessage
from routing import Peer
from tools.base import RunInfo, ToolContext

CHAT = ChatTarget(channel="telegram", account="main", peer=Peer("direct", "42"))


class Courier:
    def __init__(self, *, buttons: bool = True, broken: bool = False) -> None:
        self.caps = Capabilities(buttons=buttons, edit=True)
        self.broken = broken
        self.sent: list[tuple[ChatTarget, OutboundMessage]] = []
        self.edits: list[tuple[str, OutboundMessage]] = []

    def capabilities(self, channel: str, account: str) -> Capabilities | None:
        return self.caps

    def accounts(self) -> list[tuple[str, str]]:
        return [("telegram", "main")]

    async def send(self, target: ChatTarget, message: OutboundMessage) -> str | None:
        if self.broken:
            raise ConnectionError("the platform is down")
        self.sent.append((target, message))
        return str(len(self.sent))

    async def edit(self, target: ChatTarget, message_id: str, message: OutboundMessage) -> None:
        self.edits.append((message_id, message))

    async def delete(self, target: ChatTarget, message_id: str) -> None:
        raise AssertionError("approvals never delete")

    async def react(self, target: ChatTarget, message_id: str, emoji: str) -> None:
        raise AssertionError("approvals never react")


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    async with await SqliteStore.open(tmp_path) as opened:
        yield opened


def approvals(store: SqliteStore, courier: Courier, tmp_path: Path, **exec_settings: Any) -> Approvals:
    config = parse_config(
        json.dumps(
            {
                "agents": [{"id": "main", "exec": exec_settings}],
                "owners": ["telegram:42"],
                "defaults": {"workspace_root": str(tmp_path / "ws")},
            }
        )
    )
    return Approvals(config, store, courier)


def context(tmp_path: Path) -> ToolContext:
    run = RunInfo(
        agent="main", session_key="agent:main:x", channel="telegram", sender_id="7", target=CHAT,
        workspace=str(tmp_path / "ws" / "main"),
    )  # fmt: skip
    return ToolContext(run)


def click(value: str, who: str = "42") -> ActionEvent:
    return ActionEvent(channel="telegram", account="main", peer=CHAT.peer, sender_id=who, message_id="1", value=value)


async def shown(courier: Courier) -> str:
    """The id of the request once it has been shown (read from its first button)."""
    await eventually(lambda: bool(courier.sent), "the request to be shown")
    return courier.sent[-1][1].buttons[0][0].value.split(":")[1]


async def test_safe_and_allowlisted_commands_run_without_a_request(store: SqliteStore, tmp_path: Path) -> None:
    courier = Courier()
    gate = approvals(store, courier, tmp_path, allowlist=[{"executable": "echo", "args": "*"}])
    assert (await gate.authorize("wc -l", context(tmp_path))).allowed
    assert (await gate.authorize("echo hello", context(tmp_path))).allowed
    assert courier.sent == [] and await store.pending_approvals() == []


async def test_security_deny_and_ask_off_never_ask(store: SqliteStore, tmp_path: Path) -> None:
    courier = Courier()
    denied = await approvals(store, courier, tmp_path, security="deny").authorize("wc -l", context(tmp_path))
    assert not denied.allowed and denied.status == "denied"
    strict = await approvals(store, courier, tmp_path, ask="off").authorize("rm -rf /tmp/x", context(tmp_path))
    assert not strict.allowed and courier.sent == []


async def test_a_request_is_stored_before_it_is_shown_and_only_approvers_decide(
    store: SqliteStore, tmp_path: Path
) -> None:
    courier = Courier()
    gate = approvals(store, courier, tmp_path)
    waiting = asyncio.create_task(gate.authorize("rm -rf build", context(tmp_path)))
    approval_id = await shown(courier)
    [record] = await store.pending_approvals()
    assert record.id == approval_id and record.command == "rm -rf build" and record.approvers == ["telegram:42"]
    assert [button.label for button in courier.sent[0][1].buttons[0]] == ["Allow once", "Allow always", "Deny"]
    assert await gate.on_click(click(f"ap:{approval_id}:o", who="7")) == NOT_AUTHORIZED  # the requester is no approver
    assert not waiting.done()
    assert await gate.on_click(click(f"ap:{approval_id}:d")) is None
    outcome = await asyncio.wait_for(waiting, WAIT)
    assert not outcome.allowed and outcome.status == "denied"
    assert "Denied" in courier.edits[-1][1].text and courier.edits[-1][1].buttons == []
    assert await gate.on_click(click(f"ap:{approval_id}:o")) == NOT_PENDING  # decided once


async def test_forged_clicks_do_nothing(store: SqliteStore, tmp_path: Path) -> None:
    gate = approvals(store, Courier(), tmp_path)
    for value in ("ap:", "ap:nope:o", "ap:nope", "ap:abc:x"):
        assert await gate.on_click(click(value)) == NOT_PENDING


async def test_ask_always_offers_no_allow_always(store: SqliteStore, tmp_path: Path) -> None:
    courier = Courier()
    gate = approvals(store, courier, tmp_path, ask="always")
    waiting = asyncio.create_task(gate.authorize("wc -l", context(tmp_path)))  # even a safe bin asks
    approval_id = await shown(courier)
    assert [button.label for button in courier.sent[0][1].buttons[0]] == ["Allow once", "Deny"]
    assert await gate.on_click(click(f"ap:{approval_id}:a")) is None  # a forged "always" counts as once
    assert (await asyncio.wait_for(waiting, WAIT)).allowed
    assert await store.allowed_commands("main") == []


async def test_without_buttons_the_request_says_how_to_answer_in_text(store: SqliteStore, tmp_path: Path) -> None:
    courier = Courier(buttons=False)
    gate = approvals(store, courier, tmp_path)
    waiting = asyncio.create_task(gate.authorize("rm -rf build", context(tmp_path)))
    await eventually(lambda: bool(courier.sent), "the request to be shown")
    text = courier.sent[0][1].text
    assert courier.sent[0][1].buttons == [] and "/approve " in text
    [record] = await store.pending_approvals()
    assert await gate.on_command(f"{record.id[:4]} allow-once", "telegram:42") == f"Allowed (once): {record.id}."
    assert (await asyncio.wait_for(waiting, WAIT)).allowed


async def test_a_look_alike_approval_button_on_any_other_message_decides_nothing(
    store: SqliteStore, tmp_path: Path
) -> None:
    courier = Courier()
    gate = approvals(store, courier, tmp_path)
    waiting = asyncio.create_task(gate.authorize("rm -rf build", context(tmp_path)))
    approval_id = await shown(courier)
    card = click(f"ap:{approval_id}:o")
    look_alikes = [
        card.model_copy(update={"message_id": "99"}),  # a message the agent sent, with the same button value
        card.model_copy(update={"channel": "discord"}),  # the card's message id, on another platform
        card.model_copy(update={"account": "other"}),  # or another account
    ]
    for event in look_alikes:
        assert await gate.on_click(event) == NOT_PENDING
    assert [record.status for record in await store.pending_approvals()] == ["pending"]
    assert await gate.on_click(card) is None  # the card itself still decides
    assert (await asyncio.wait_for(waiting, WAIT)).allowed


async def test_approve_by_text_tells_a_non_approver_nothing_about_pending_requests(
    store: SqliteStore, tmp_path: Path
) -> None:
    gate = approvals(store, Courier(buttons=False), tmp_path)
    waiting = [asyncio.create_task(gate.authorize(f"rm -rf build{n}", context(tmp_path))) for n in range(2)]
    await eventually(lambda: _pending(store, 2), "two pending requests")
    first, second = await store.pending_approvals()
    prefixes = [first.id, second.id[:4], "zzzz"]  # a whole id, a prefix, no request at all
    words = ("allow-once", "allow-always", "deny")
    answers = {await gate.on_command(f"{prefix} {word}", "telegram:666") for prefix in prefixes for word in words}
    assert answers == {NOT_PENDING}
    assert [record.status for record in await store.pending_approvals()] == ["pending", "pending"]
    for task in waiting:
        task.cancel()
    await asyncio.gather(*waiting, return_exceptions=True)


async def _pending(store: SqliteStore, count: int) -> bool:
    return len(await store.pending_approvals()) == count


async def test_a_request_that_could_not_be_shown_is_denied_at_once(store: SqliteStore, tmp_path: Path) -> None:
    outcome = await approvals(store, Courier(broken=True), tmp_path).authorize("rm -rf build", context(tmp_path))
    assert not outcome.allowed and "could not be shown" in outcome.reason


async def test_a_cancelled_run_expires_its_request(store: SqliteStore, tmp_path: Path) -> None:
    courier = Courier()
    gate = approvals(store, courier, tmp_path)
    waiting = asyncio.create_task(gate.authorize("rm -rf build", context(tmp_path)))
    approval_id = await shown(courier)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    record = await store.get_approval(approval_id)
    assert record is not None and record.status == "expired"
    assert "Expired" in courier.edits[-1][1].text


async def test_requests_left_by_a_crashed_process_are_expired_at_start(store: SqliteStore, tmp_path: Path) -> None:
    courier = Courier()
    crashed = approvals(store, courier, tmp_path)
    waiting = asyncio.create_task(crashed.authorize("rm -rf build", context(tmp_path)))
    approval_id = await shown(courier)
    crashed._decided.clear()  # as if its process had died: nobody in this process waits for the request
    restarted = approvals(store, courier, tmp_path)
    assert await restarted.expire_orphans() == 1
    record = await store.get_approval(approval_id)
    assert record is not None and record.status == "expired"
    assert courier.edits[-1][0] == "1" and "Expired" in courier.edits[-1][1].text
    assert await restarted.on_click(click(f"ap:{approval_id}:o")) == NOT_PENDING  # its button can never run it
    assert not (await asyncio.wait_for(waiting, WAIT)).allowed  # the old waiter sees the expiry too
