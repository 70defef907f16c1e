"""One session's own settings and costs: the store's overrides and usage rows, the price math, and what /model,
/think, /queue and /usage answer and change (a real store, a real config, real lanes)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import pytest
from helpers import FakeClock

from agent.lanes import Lanes, RunControl
from agent.messages import Usage
from agent.providers.config import ModelPrice
from bot.config.loading import parse_config
from bot.config.settings import Config
from bot.gateway.retention import DAY, prune_once
from bot.intake.commands import COMMAND_MENU, COMMANDS, HELP, parse_command
from bot.intake.session_commands import (
    dollars,
    model_command,
    queue_command,
    restore_queue_modes,
    settings_line,
    start_of_day,
    think_command,
    total_usage,
    usage_command,
)
from bot.runs.assemble import candidates, session_models
from bot.store import SqliteStore
from bot.store.sessions import UsageRow
from bot.turns.turn import Job, fold
from channels.base import OWNERS, InboundMessage, Principal
from routing import Peer

NOW = datetime(2026, 11, 27, 10, 0, tzinfo=UTC).timestamp()
KEY = "agent:main:telegram:direct:1"
DM = "agent:main:telegram:direct:7"  # the stranger's own
PRICE = {"input": 3.0, "output": 15.0, "cache_read": 0.3, "cache_write": 3.75}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(NOW)


@pytest.fixture
async def store(tmp_path: Path, clock: FakeClock) -> AsyncIterator[SqliteStore]:
    opened = await SqliteStore.open(tmp_path, clock=clock)
    yield opened
    await opened.close()


def make_config(**agent: Any) -> Config:
    return parse_config(
        json.dumps(
            {
                "defaults": {"model": "fake/m", "fallbacks": ["fake/f"], "timezone": "UTC"},
                "agents": [{"id": "main", "default": True, "models": ["fake/big", "other/x"], **agent}],
                "providers": {
                    "fake": {
                        "kind": "openai",
                        "base_url": "http://127.0.0.1:9/v1",
                        "models": {
                            "m": {"price": PRICE, "thinking": "low"},
                            "big": {"price": {"input": 1, "output": 2}},
                        },
                    },
                    "other": {"kind": "openai", "base_url": "http://127.0.0.1:9/v1"},
                },
            }
        )
    )


def job(*, kind: Literal["direct", "group", "channel"] = "direct", owner: bool = True, key: str = KEY) -> Job:
    message = InboundMessage(channel="telegram", peer=Peer(kind, "1"), sender_id="7", message_id="m1")
    principal = OWNERS if owner else Principal(owner=False, person="telegram:7")
    return Job(1, message, "main", key, principal)


def tokens(total: int, out: int, read: int = 0, write: int = 0) -> Usage:
    return Usage(input_tokens=total, output_tokens=out, cache_read_tokens=read, cache_write_tokens=write)


# --- the store ------------------------------------------------------------------------------------------------------


async def test_overrides_are_stored_merged_cleared_and_kept_across_new(store: SqliteStore) -> None:
    assert await store.get_session(KEY) is None
    made = await store.set_overrides(KEY, "main", model="fake/big")  # the session is made on first use
    assert made.overrides == {"model": "fake/big"} and made.agent == "main"
    both = await store.set_overrides(KEY, "main", thinking="high", queue="steer")
    assert both.overrides == {"model": "fake/big", "thinking": "high", "queue": "steer"}
    assert (await store.reset_session(KEY)).overrides == both.overrides  # /new keeps them
    cleared = await store.set_overrides(KEY, "main", model=None, thinking=None)
    assert cleared.overrides == {"queue": "steer"}
    await store.ensure_session("agent:main:other", "main")
    assert await store.all_overrides() == {KEY: {"queue": "steer"}}
    await store.set_overrides(KEY, "main", queue=None)
    assert (await store.get_session(KEY)).overrides == {}  # type: ignore[union-attr]
    assert await store.all_overrides() == {}
    with pytest.raises(ValueError, match="unknown session overrides"):
        await store.set_overrides(KEY, "main", colour="red")


async def test_each_run_with_usage_adds_a_usage_row_and_old_rows_are_pruned(
    store: SqliteStore, clock: FakeClock
) -> None:
    await store.ensure_session(KEY, "main")
    await store.ensure_session("k2", "main")
    await store.touch_session(KEY, model="fake/m", usage=tokens(100, 10, read=60, write=20))
    clock.advance(60)
    await store.touch_session(KEY, channel="telegram")  # no usage: no row
    await store.touch_session("k2", model="fake/big", usage=tokens(5, 1))
    rows = await store.usage_since(0)
    assert rows == [
        UsageRow(at=NOW, session_key=KEY, agent="main", model="fake/m", input_tokens=100, output_tokens=10,
                 cache_read_tokens=60, cache_write_tokens=20),
        UsageRow(at=NOW + 60, session_key="k2", agent="main", model="fake/big", input_tokens=5, output_tokens=1),
    ]  # fmt: skip
    assert [row.session_key for row in await store.usage_since(0, KEY)] == [KEY]
    assert [row.session_key for row in await store.usage_since(NOW + 1)] == ["k2"]
    with pytest.raises(KeyError):  # no session: neither the totals nor a row
        await store.touch_session("missing", usage=tokens(1, 1))
    assert len(await store.usage_since(0)) == 2
    clock.advance(31 * DAY)
    assert (await prune_once(store, 30))["usage"] == 2
    assert await store.usage_since(0) == []


# --- prices ---------------------------------------------------------------------------------------------------------


def test_cost_counts_uncached_input_cache_reads_writes_and_output_at_their_prices() -> None:
    price = ModelPrice.model_validate(PRICE)
    # 10,000 in: 6,000 read from the cache, 2,000 written to it, 2,000 uncached; 1,000 out.
    cost = price.cost(10_000, 1_000, 6_000, 2_000)
    assert cost == pytest.approx((2_000 * 3 + 6_000 * 0.3 + 2_000 * 3.75 + 1_000 * 15) / 1e6)
    assert cost == pytest.approx(0.0303)
    plain = ModelPrice(input=2, output=8)  # cache reads and writes cost what input does
    assert plain.cost(10_000, 1_000, 6_000, 2_000) == pytest.approx((10_000 * 2 + 1_000 * 8) / 1e6)


def test_total_usage_names_the_models_without_a_price() -> None:
    rows = [
        UsageRow(at=1, session_key="k", agent="a", model="fake/m", input_tokens=1_000_000, output_tokens=100_000),
        UsageRow(at=2, session_key="k", agent="a", model="other/x", input_tokens=10, output_tokens=1),
        UsageRow(at=3, session_key="k", agent="a", model="other/x", input_tokens=10, output_tokens=1),
    ]
    total = total_usage(rows, lambda ref: ModelPrice.model_validate(PRICE) if ref == "fake/m" else None)
    assert (total.runs, total.input_tokens, total.output_tokens, total.priced) == (3, 1_000_020, 100_002, 1)
    assert total.cost == pytest.approx(3.0 + 1.5) and total.unpriced == ("other/x",)
    assert [dollars(4.5), dollars(0.0303), dollars(0.000183)] == ["$4.50", "$0.0303", "$0.000183"]


def test_a_model_price_must_be_complete_and_not_negative() -> None:
    with pytest.raises(ValueError):
        ModelPrice.model_validate({"input": 3})
    with pytest.raises(ValueError):
        ModelPrice.model_validate({"input": -1, "output": 2})


# --- /model and /think ----------------------------------------------------------------------------------------------


async def test_model_lists_switches_refuses_and_resets(store: SqliteStore) -> None:
    config = make_config()
    assert session_models(config, "main") == ["fake/m", "fake/f", "fake/big", "other/x"]
    listing = await model_command(store, config, job(), "")
    assert "\nfake/m (current: the agent's model)\nfake/f\nfake/big\nother/x\n" in listing
    refused = await model_command(store, config, job(), "fake/bog")
    assert refused.startswith("No model 'fake/bog' for this agent. Did you mean fake/big?")
    assert await store.get_session(KEY) is None  # nothing changed
    assert (
        await model_command(store, config, job(), "big")
        == "This conversation now uses fake/big (its fallbacks stay the agent's)."
    )
    assert "\nfake/m\nfake/f\nfake/big (current: this conversation's choice)\n" in await model_command(
        store, config, job(), ""
    )
    assert [candidate.ref for candidate in candidates(config, "main", {"model": "fake/big"})] == ["fake/big", "fake/f"]
    assert [candidate.ref for candidate in candidates(config, "main", {"model": "gone/old"})] == ["fake/m", "fake/f"]
    assert "agent's model again: fake/m" in await model_command(store, config, job(), "default")
    assert (await store.get_session(KEY)).overrides == {}  # type: ignore[union-attr]


async def test_what_changes_the_cost_is_the_owners_and_the_queue_is_for_whose_conversation_it_is(
    store: SqliteStore,
) -> None:
    config = make_config()
    lanes = idle_lanes()
    in_group, in_dm = job(kind="group", owner=False), job(kind="direct", owner=False)
    for stranger in (in_group, in_dm):  # agents[].commands: model and think are the owners' by default
        assert await model_command(store, config, stranger, "fake/big") == "Only the bot's owners can use /model here."
        assert await think_command(store, config, stranger, "high") == "Only the bot's owners can use /think here."
    assert await store.get_session(KEY) is None
    assert "fake/m (current" in await model_command(store, config, in_group, "")  # anyone may look
    assert await think_command(store, config, job(kind="group", owner=True), "high") == (
        "Thinking in this conversation: high."
    )
    # /queue is `own`: a conversation others have talked in is not this person's to change...
    await store.touch_session(KEY, principal="owners")  # the owners had a turn here
    refused = await queue_command(store, config, lanes, in_group, "steer")
    assert "changes this conversation for everyone in it" in refused
    assert lanes.mode(KEY) == "collect"
    # ...while one only they have talked in is
    own = job(kind="direct", owner=False, key=DM)
    await store.ensure_session(DM, "main")
    await store.touch_session(DM, principal="telegram:7")
    assert await queue_command(store, config, lanes, own, "steer") == "Queue mode in this conversation: steer."
    # and `agents[].commands` opens what the owners choose
    generous = make_config(commands={"think": "own", "model": "everyone"})
    assert await think_command(store, generous, own, "low") == "Thinking in this conversation: low."
    assert "now uses fake/big" in await model_command(store, generous, in_group, "fake/big")


async def test_think_shows_sets_and_reaches_every_candidate(store: SqliteStore) -> None:
    config = make_config()
    assert (await think_command(store, config, job(), "")).startswith("Thinking: low (the model's setting)")
    assert "Unknown thinking level 'hard'" in await think_command(store, config, job(), "hard")
    assert await think_command(store, config, job(), "HIGH") == "Thinking in this conversation: high."
    assert (await think_command(store, config, job(), "")).startswith("Thinking: high (this conversation's)")
    session = await store.get_session(KEY)
    assert session is not None
    models = candidates(config, "main", session.overrides)
    assert [(candidate.ref, candidate.options.thinking) for candidate in models] == [
        ("fake/m", "high"),
        ("fake/f", "high"),
    ]
    assert models[0].options.price == ModelPrice.model_validate(PRICE)  # the rest of the options stay
    assert [candidate.options.thinking for candidate in candidates(config, "main")] == ["low", "off"]
    await think_command(store, config, job(), "default")
    assert settings_line(await store.get_session(KEY)) == "This conversation's settings: none (the agent's defaults)"


# --- /queue ---------------------------------------------------------------------------------------------------------


def idle_lanes() -> Lanes[Job]:
    async def handler(key: str, batch: list[Job], control: RunControl[Job]) -> None:
        return None

    async def notify(key: str, item: Job, text: str) -> None:
        return None

    return Lanes(handler, fold=fold, notify=notify, principal=lambda job: job.principal)


async def test_queue_sets_the_lanes_mode_stores_it_and_a_new_start_restores_it(store: SqliteStore) -> None:
    lanes = idle_lanes()
    assert await queue_command(store, make_config(), lanes, job(), "") == (
        "Queue mode: collect (the default). Modes: collect, followup, steer, interrupt."
    )
    assert "Unknown queue mode 'later'" in await queue_command(store, make_config(), lanes, job(), "later")
    assert await queue_command(store, make_config(), lanes, job(), "steer") == "Queue mode in this conversation: steer."
    assert lanes.mode(KEY) == "steer" and lanes.mode("another") == "collect"
    shown = await queue_command(store, make_config(), lanes, job(), "")
    assert shown.startswith("Queue mode: steer (this conversation's)")
    await store.set_overrides("k2", "main", model="fake/big")  # no queue mode: nothing to restore
    restarted = idle_lanes()
    assert await restore_queue_modes(store, restarted) == 1
    assert restarted.mode(KEY) == "steer" and restarted.mode("k2") == "collect"
    assert "back to the default: collect" in await queue_command(store, make_config(), lanes, job(), "default")
    assert lanes.mode(KEY) == "collect"


# --- /usage ---------------------------------------------------------------------------------------------------------


async def test_usage_shows_the_sessions_tokens_cost_and_for_owners_today(store: SqliteStore, clock: FakeClock) -> None:
    config = make_config()
    clock.now = NOW - 11 * 3600  # yesterday, 23:00 UTC: not today
    await store.ensure_session("old", "main")
    await store.touch_session("old", model="fake/m", usage=tokens(1_000_000, 0))
    clock.now = NOW
    await store.ensure_session(KEY, "main")
    await store.touch_session(KEY, model="fake/m", usage=tokens(10_000, 1_000, read=6_000, write=2_000))
    await store.touch_session(KEY, model="other/x", usage=tokens(100, 10))
    await store.ensure_session("k2", "main")
    await store.touch_session("k2", model="fake/big", usage=tokens(1_000_000, 1_000_000))
    assert start_of_day(NOW, "UTC") == NOW - 10 * 3600

    answer = await usage_command(store, config, job(owner=False), NOW)
    assert answer == (
        "This conversation: 10,100 tokens in (cache: 6,000 read, 2,000 written), 1,010 out, in 2 runs\n"
        "estimated cost: $0.0303 (priced models only)\n"
        "no price configured for other/x"
    )
    owner = await usage_command(store, config, job(owner=True), NOW)
    assert owner.startswith(answer + "\nToday (UTC), all conversations: 1,010,100 tokens in")
    assert "in 3 runs\nestimated cost: $3.03 (priced models only)" in owner  # 0.0303 + 1 + 2; yesterday left out

    clock.advance(1)
    await store.reset_session(KEY)  # /new: the session's count starts again
    assert (await usage_command(store, config, job(owner=False), NOW + 1)) == "This conversation: no runs yet"


# --- the command list -----------------------------------------------------------------------------------------------


def test_the_new_commands_are_parsed_listed_and_in_the_menu() -> None:
    for name in ("model", "think", "queue", "usage", "subagents"):
        assert name in COMMANDS and f"/{name}" in HELP and name in dict(COMMAND_MENU)
        assert parse_command(f"/{name} x") is not None
    assert "the settings below stay" in HELP
