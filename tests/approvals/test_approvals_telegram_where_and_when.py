"""Exec approvals through a real `bot run` on Telegram, when and where they are asked: a request nobody answers
expires (its buttons go, a late click decides nothing), a restart leaves a pending request expired and harmless, and
`approvals.target: dm` asks in the approvers' DMs instead of the group."""

from __future__ import annotations

from pathlib import Path

from fakes.llm import FakeLLM
from fakes.telegram import FakeTelegram
from helpers import bot_run, eventually
from test_approvals_telegram import (
    OWNER,
    STARTED,
    STRANGER,
    approval_messages,
    ask_for,
    card_of,
    click_answer,
    config,
    edited_to,
    exec_call,
    keyboard,
    tool_result,
)


async def test_an_expired_request_runs_nothing_and_its_buttons_are_gone(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg = fake_telegram
    fake_llm.script(exec_call("touch late.txt"), "Nobody answered.")
    async with bot_run(config(tmp_path, fake_llm, tg, timeout_seconds=2), tmp_path, STARTED):
        buttons = await ask_for(tg, "do it", 1)
        message_id = card_of(tg, buttons)
        await eventually(lambda: "Nobody answered." in tg.sent.get(OWNER, []), "the final answer")
        assert tool_result(fake_llm, 1)["status"] == "expired"
        await eventually(edited_to(tg, message_id), "the expired message edited")
        assert "Expired" in tg.messages[(OWNER, message_id)].visible
        late = await tg.callback_query(buttons[0][1], message_id=message_id, chat_id=OWNER, user_id=OWNER)
        assert "no longer pending" in (await click_answer(tg, late))["text"]  # too late: nothing was decided
    assert not (tmp_path / "ws" / "main" / "late.txt").exists()
    assert len(fake_llm.requests) == 2


async def test_a_restart_leaves_a_pending_request_expired_and_harmless(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg = fake_telegram
    fake_llm.script(exec_call("touch orphan.txt"), "Stopped.")
    settings = config(tmp_path, fake_llm, tg) | {"lanes": {"stop_grace": 0}}  # the stop does not wait for the click
    async with bot_run(settings, tmp_path, STARTED):
        buttons = await ask_for(tg, "start it", 1)
        message_id = card_of(tg, buttons)
    fake_llm.script("Fresh start.")
    async with bot_run(settings, tmp_path, STARTED):
        await eventually(edited_to(tg, message_id), "the orphaned request's message edited")
        assert "Expired" in tg.messages[(OWNER, message_id)].visible
        late = await tg.callback_query(buttons[0][1], message_id=message_id, chat_id=OWNER, user_id=OWNER)
        assert "no longer pending" in (await click_answer(tg, late))["text"]  # nothing was decided
    assert not (tmp_path / "ws" / "main" / "orphan.txt").exists()


async def test_approvals_can_go_to_the_approvers_dms(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg = fake_telegram
    fake_llm.script(exec_call("touch from-group.txt"), "Done for the group.")
    async with bot_run(config(tmp_path, fake_llm, tg, target="dm"), tmp_path, STARTED):
        await tg.group_message("make it", user_id=STRANGER, name="Bo")
        await eventually(lambda: len(approval_messages(tg, OWNER)) == 1, "the approval in the owner's DM")
        assert approval_messages(tg, tg.group_id) == []  # not shown in the group
        buttons = keyboard(approval_messages(tg, OWNER)[0])
        await tg.callback_query(buttons[0][1], message_id=card_of(tg, buttons), chat_id=OWNER, user_id=OWNER)
        await eventually(lambda: "Done for the group." in tg.sent.get(tg.group_id, []), "the answer in the group")
    assert (tmp_path / "ws" / "main" / "senders" / f"telegram-{STRANGER}" / "from-group.txt").exists()  # their folder
