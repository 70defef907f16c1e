"""Nothing lost, nothing twice: a real `bot run` process is SIGKILLed mid-run, started again, and every
message still gets exactly one reply."""

from __future__ import annotations

import contextlib
import json
import signal
import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

from configs import config_dict, loopback
from fakes.bridge import FakeBridge
from fakes.llm import FakeLLM, Reply, ToolCallSpec
from helpers import asked, bot_run, eventually, launch_bot

STARTED = "channel loopback account default started"
BOB = "question from bob, sent while the bot was down"


def bot_config(path: Path, llm: FakeLLM, bridge: FakeBridge) -> dict[str, Any]:
    timeout = {"providers": {"fake": {"timeout_seconds": 60}}}
    return config_dict(
        path, llm, loopback(bridge, poll_timeout=1), timeout, defaults={"model": "fake/model-a"},
        session={"queue": {"debounce_ms": 0}},
        owners=["loopback:owner"],  # someone, so that nobody is told how to become the owner (bot.intake.ownerless)
    )  # fmt: skip


def replies_per_chat(bridge: FakeBridge) -> Counter[str]:
    return Counter(body["target"]["peer"]["id"] for body in bridge.sent)


async def test_a_sigkill_mid_run_loses_nothing_and_answers_once(tmp_path: Path, fake_llm: FakeLLM) -> None:
    async with FakeBridge() as bridge:
        config = bot_config(tmp_path, fake_llm, bridge)
        fake_llm.script(Reply.stall(120))  # the first answer never comes: the process dies waiting for it
        bot = await launch_bot(config, tmp_path, STARTED)
        try:
            await bridge.say("question from alice", sender="alice")
            await eventually(lambda: len(fake_llm.requests) == 1, "alice's turn to reach the model")  # mid-run
        finally:
            if bot.returncode is None:
                bot.send_signal(signal.SIGKILL)
            await bot.wait()
        assert bridge.sent == []

        await bridge.say(BOB, sender="bob")
        fake_llm.script("An answer.", "Another answer.")
        async with bot_run(config, tmp_path, STARTED):  # stopped with SIGTERM at the end, which must exit 0
            await eventually(lambda: sum(replies_per_chat(bridge).values()) >= 2, "both replies")
            # One more message in each chat. A chat's turns run one at a time and its replies go out in order, so a
            # duplicate of an earlier answer (a second run of the turn, or a reply sent twice) would come before
            # the answer to this one; and a second run queued with it would have been asked together with it.
            fake_llm.script("A later answer.", "A later answer.")
            await bridge.say("one more from alice", sender="alice")
            await bridge.say("one more from bob", sender="bob")
            await eventually(
                lambda: all("A later answer." in bridge.texts_to(chat) for chat in ("alice", "bob")),
                "the answers to the later messages",
            )
            assert replies_per_chat(bridge) == {"alice": 2, "bob": 2}
            # alice's turn once before the kill and once after; bob's once; then one turn for each later message
            assert len(fake_llm.requests) == 5
            assert asked(fake_llm)[0] == "question from alice"
            assert sorted(asked(fake_llm)[1:3]) == ["question from alice", BOB]
            assert sorted(asked(fake_llm)[3:]) == ["one more from alice", "one more from bob"]


def tool_results(llm: FakeLLM, request: int) -> list[dict[str, Any]]:
    """The tool results the model read in its `request`-th call (0-based)."""
    return [json.loads(m["content"]) for m in llm.requests[request].body["messages"] if m["role"] == "tool"]


async def test_a_message_tool_send_is_made_once_when_its_turn_runs_again_after_a_sigkill(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    note = ToolCallSpec("message", {"action": "send", "text": "A note on the way."})
    async with FakeBridge() as bridge:
        config = bot_config(tmp_path, fake_llm, bridge)
        fake_llm.script(Reply.tool_calls(note), Reply.stall(120))  # the note goes out, then the turn hangs
        bot = await launch_bot(config, tmp_path, STARTED)
        try:
            await bridge.say("please leave a note", sender="alice")
            await eventually(lambda: len(fake_llm.requests) == 2, "the turn to go on after its note")
        finally:
            if bot.returncode is None:
                bot.send_signal(signal.SIGKILL)
            await bot.wait()
        assert bridge.texts_to("alice") == ["A note on the way."]
        first = tool_results(fake_llm, 1)

        # The turn runs again from the start and makes the same send: the outbox knows it, so it is not made twice.
        fake_llm.script(Reply.tool_calls(note), "Done.")
        async with bot_run(config, tmp_path, STARTED):
            await eventually(lambda: "Done." in bridge.texts_to("alice"), "the answer after the restart")
        assert bridge.texts_to("alice") == ["A note on the way.", "Done."]
        again = tool_results(fake_llm, 3)
        assert first[0]["status"] == again[0]["status"] == "ok"
        assert again[0]["message_id"] == first[0]["message_id"]  # the note the first run sent


def card_recorded(state: Path) -> bool:
    """Whether the bot has noted where its approval card was shown (what a click on it is checked against)."""
    with contextlib.closing(sqlite3.connect(state / "state.db")) as db:
        return db.execute("SELECT count(*) FROM approvals WHERE messages != '[]'").fetchone()[0] == 1


async def test_an_approval_card_is_shown_once_and_still_decides_after_a_sigkill(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    touch = ToolCallSpec("exec", {"command": "touch approved.txt"})  # an unknown program: it asks
    async with FakeBridge() as bridge:
        config = bot_config(tmp_path, fake_llm, bridge) | {"owners": ["loopback:alice"]}
        fake_llm.script(Reply.tool_calls(touch))  # the turn waits for the card's answer...
        bot = await launch_bot(config, tmp_path, STARTED)
        try:
            await bridge.say("please make the file", sender="alice")
            [card] = await bridge.wait_for_sends(1)
            await eventually(lambda: card_recorded(tmp_path / "state"), "the card to be recorded")
        finally:  # ...when the process dies
            if bot.returncode is None:
                bot.send_signal(signal.SIGKILL)
            await bot.wait()
        [[allow, *_]] = card["message"]["buttons"]
        assert "touch approved.txt" in card["message"]["text"] and allow["label"] == "Allow once"

        # The turn runs again and makes the same request: it finds the card already out and waits for its answer.
        fake_llm.script(Reply.tool_calls(touch), "Done.")
        async with bot_run(config, tmp_path, STARTED):
            await bridge.click(bridge.sent_ids[0], allow["value"], sender="alice")
            await eventually(lambda: "Done." in bridge.texts_to("alice"), "the answer once the command ran")
        assert (tmp_path / "ws" / "main" / "approved.txt").exists()
        assert bridge.texts_to("alice") == [card["message"]["text"], "Done."]  # one card, one answer
        [result] = tool_results(fake_llm, 2)
        assert result["status"] == "ok"
        edits = [body for method, body in bridge.calls if method == "edit"]
        assert [edit["message_id"] for edit in edits] == [bridge.sent_ids[0]]
        assert "Allowed (once)" in edits[0]["message"]["text"]
