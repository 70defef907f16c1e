"""While a bot has no owner, each person's first direct message is answered with how to become one (`/whoami`, then
`bot owners add`), once; never once an owner is set. Through a real `bot run` against the fake Telegram."""

from __future__ import annotations

import json
from pathlib import Path

from configs import config_dict, telegram
from fakes.llm import FakeLLM
from fakes.telegram import FakeTelegram
from helpers import bot_run, eventually

STARTED = "channel telegram account main started"


async def test_an_ownerless_bot_tells_each_person_once_how_to_become_its_owner(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg = fake_telegram
    fake_llm.script("Answer one.", "Answer two.", "Answer three.", "Answer four.")
    settings = config_dict(tmp_path, fake_llm, telegram(tg, streaming="off", dm_policy="open"))
    async with bot_run(settings, tmp_path, STARTED) as path:
        await tg.private_message("hi", user_id=7, name="Ada")
        hint, answer = await tg.wait_sent(7, 2)
        assert "no owner yet" in hint and "/whoami" in hint and "bot owners add telegram:7" in hint
        assert answer == "Answer one."
        await tg.private_message("and again", user_id=7, name="Ada")
        assert (await tg.wait_sent(7, 3))[2] == "Answer two."  # once: not with every answer

        await tg.private_message("/whoami", user_id=8, name="Bo")  # its answer says it already
        [whoami] = await tg.wait_sent(8, 1)
        assert whoami.startswith("Your id: telegram:8") and "no owner yet" not in whoami
        await tg.private_message("hello", user_id=8, name="Bo")
        assert (await tg.wait_sent(8, 3))[1:] == [tg.sent[8][1], "Answer three."]
        assert "bot owners add telegram:8" in tg.sent[8][1]

        path.write_text(json.dumps({**settings, "owners": ["telegram:7"]}))  # taken again live: it has an owner now
        log = tmp_path / "bot.log"
        await eventually(lambda: "reloaded" in log.read_text(errors="replace"), "the reload with the owner")
        await tg.private_message("hi there", user_id=9, name="Cy")
        assert await tg.wait_sent(9, 1) == ["Answer four."]
        assert tg.sent[7] == [hint, "Answer one.", "Answer two."]
