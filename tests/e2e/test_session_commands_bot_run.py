"""/model, /think and /usage through a real `bot run` process on the fake Telegram and the fake LLM: a session's own
model and thinking level reach the model's requests and outlive a crash, and /usage counts what the model reported
at the configured prices."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

from configs import config_dict, telegram
from fakes.llm import FakeLLM, Reply
from fakes.telegram import FakeTelegram
from helpers import bot_run, finished, launch_bot

OWNER = 4242
STARTED = "channel telegram account main started"


def config(tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram) -> dict[str, Any]:
    prices = {"providers": {"fake": {"models": {
        "m": {"price": {"input": 1, "output": 2}},
        "big": {"price": {"input": 3, "output": 15, "cache_read": 0.3, "cache_write": 3.75}},
    }}}}  # fmt: skip
    return config_dict(
        tmp_path, fake_llm, prices, telegram(fake_telegram, streaming="off"), defaults={"timezone": "UTC"},
        agents=[{"id": "main", "default": True, "models": ["fake/big"]}], owners=[f"telegram:{OWNER}"],
    )  # fmt: skip


async def test_a_sessions_model_and_thinking_survive_a_crash_and_usage_prices_what_the_model_reported(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg = fake_telegram
    settings = config(tmp_path, fake_llm, fake_telegram)
    fake_llm.script(
        "Small answer.", Reply.text("Big answer.", usage=(10_000, 1_000), cache_read=6_000, cache_write=2_000)
    )
    bot = await launch_bot(settings, tmp_path, STARTED)
    try:
        menu = [command["command"] for command in (await tg.wait_calls("setMyCommands", 1))[-1]["commands"]]
        assert {"model", "think", "queue", "usage", "subagents"} <= set(menu)
        await tg.private_message("hi", user_id=OWNER, name="Owner")
        await tg.wait_sent(OWNER, 1)
        assert fake_llm.requests[-1].body["model"] == "m"

        await tg.private_message("/model fake/nope", user_id=OWNER, name="Owner")
        [refused] = (await tg.wait_sent(OWNER, 2))[-1:]
        assert refused.startswith("No model 'fake/nope' for this agent.") and refused.endswith("fake/m\nfake/big")
        await tg.private_message("/model fake/big", user_id=OWNER, name="Owner")
        await tg.private_message("/think high", user_id=OWNER, name="Owner")
        await tg.private_message("and now?", user_id=OWNER, name="Owner")
        sent = await tg.wait_sent(OWNER, 5)
        assert sent[2:] == [
            "This conversation now uses fake/big (its fallbacks stay the agent's).",
            "Thinking in this conversation: high.",
            "Big answer.",
        ]
        assert (fake_llm.requests[-1].body["model"], fake_llm.requests[-1].body.get("reasoning_effort")) == (
            "big",
            "high",
        )
        assert "reasoning_effort" not in fake_llm.requests[0].body
        await finished(tmp_path / "state")
        bot.send_signal(signal.SIGKILL)  # a crash: nothing is written on the way out
        await bot.wait()
    finally:
        if bot.returncode is None:
            bot.kill()
            await bot.wait()

    fake_llm.script("Still big.")
    async with bot_run(settings, tmp_path, STARTED):  # a new process on the same state
        await tg.private_message("still there?", user_id=OWNER, name="Owner")
        await tg.wait_sent(OWNER, 6)
        assert (fake_llm.requests[-1].body["model"], fake_llm.requests[-1].body.get("reasoning_effort")) == (
            "big",
            "high",
        )
        await tg.private_message("/usage", user_id=OWNER, name="Owner")
        [usage] = (await tg.wait_sent(OWNER, 7))[-1:]
        # fake/m: 21 in, 8 out at $1/$2 per million = $0.000037. fake/big: 2,000 uncached at $3, 6,000 read at $0.30,
        # 2,000 written at $3.75 and 1,000 out at $15 = $0.0303, then 21 in and 8 out = $0.000183. In all $0.03052.
        assert usage.startswith(
            "This conversation: 10,042 tokens in (cache: 6,000 read, 2,000 written), 1,016 out, in 3 runs\n"
            "estimated cost: $0.0305\n"
            "Today (UTC), all conversations: "
        )
