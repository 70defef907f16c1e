"""Three real `bot run` processes on one PostgreSQL database (see test_cluster_bot_run.py): the Telegram poller
SIGKILLed mid-way through 300 DMs loses nothing, repeats at most the replies it was sending at that instant, and its
polling is taken over by another process within the bound.

"The replies it was sending at that instant" is measured, not assumed: the poller is frozen (SIGSTOP) before the
SIGKILL, so while it is frozen the outbox rows still pending are the ones it had not recorded as sent, and no other
process can send its chats (it holds their locks). Of those, the ones the fake Telegram got on the frozen process's
connections are the replies in flight: sent, not recorded. Only they may appear a second time."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import time
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path

from fakes.telegram import FakeTelegram
from helpers import EchoLLM, connections_to, eventually
from test_cluster_bot_run import (
    BURST_WAIT,
    FIRST_USER,
    USERS,
    Cluster,
    answered,
    claims,
    cluster,
    message,
    query,
    send_burst,
    settled,
)

KILLED_PER_USER = 3  # 300 DMs are enough to kill the poller mid-run (at 100 answers)
TAKE_OVER_LIMIT = 15.0  # seconds from the poller's SIGKILL to another process's getUpdates (the bound)

Reply = tuple[int, str]  # (chat, text)


# --- which replies were in flight at the kill ---------------------------------------------------------------------


def pending_replies(url: str) -> set[Reply]:
    """The messages recorded to be sent and not yet marked sent, as (chat, text)."""
    rows = query(url, "SELECT target, payload FROM outbox WHERE status = 'pending' AND kind = 'send'")
    return {(int(json.loads(target)["peer"]["id"]), json.loads(payload)["text"]) for target, payload in rows}


def sent_on(tg: FakeTelegram, ports: set[int]) -> set[Reply]:
    """The replies the fake Telegram got on any of these client ports (one process's connections)."""
    calls = [call for call in tg.requests if call.method == "sendMessage" and call.port in ports]
    return {(int(call.params["chat_id"]), str(call.params["text"])) for call in calls}


async def freeze_and_kill(bots: Cluster, pid: int, tg: FakeTelegram, url: str) -> tuple[set[int], set[Reply]]:
    """SIGSTOP `pid`, read what it holds (its connections to the fake Telegram, the replies still pending), SIGKILL
    it. Frozen, it records nothing more and its chats stay locked, so what is read is the state at its death."""
    process = bots.processes[bots.pids.index(pid)]
    process.send_signal(signal.SIGSTOP)
    telegram_port = int(tg.url.rsplit(":", 1)[1])
    open_now = await asyncio.to_thread(connections_to, telegram_port, [pid])
    ports = set(open_now) | {port for port, owner in bots.watch.owner.items() if owner == pid}
    pending = await asyncio.to_thread(pending_replies, url)
    process.send_signal(signal.SIGKILL)
    await process.wait()
    return ports, pending


def in_flight(tg: FakeTelegram, ports: set[int], pending: set[Reply]) -> set[Reply]:
    """The replies sent and not recorded at the kill: pending then, and received by the fake on the killed process's
    connections (asked once the test is over: a request it wrote just before the freeze is read by the fake later)."""
    return pending & sent_on(tg, ports)


# --- the check ------------------------------------------------------------------------------------------------------


def repeating(tg: FakeTelegram) -> list[int]:
    """The chats that got some reply more than once."""
    return [user for user, texts in tg.sent.items() if len(texts) != len(set(texts))]


def answer(user: int, number: int) -> str:
    return f"answer to {message(user, number)}"


def without_allowed_repeats(texts: list[str], allowed: set[str]) -> list[str]:
    """`texts` less the second copy of each allowed reply, where it comes right after the first (the next process
    sends the chat's unsent replies in order, the one in flight first)."""
    kept: list[str] = []
    repeated: set[str] = set()
    for text in texts:
        if kept and kept[-1] == text and text in allowed and text not in repeated:
            repeated.add(text)
            continue
        kept.append(text)
    return kept


def unexplained(sent: Mapping[int, list[str]], flying: set[Reply], per_user: int) -> dict[int, list[str]]:
    """The chats whose answers are not one per DM in order once each reply in flight at the kill may appear a
    second time: a repeat of any other reply, a third copy, a loss or a swap leaves its chat here."""
    wrong = {}
    for user in range(FIRST_USER, FIRST_USER + USERS):
        texts = sent.get(user, [])
        allowed = {text for chat, text in flying if chat == user}
        if without_allowed_repeats(texts, allowed) != [answer(user, number) for number in range(per_user)]:
            wrong[user] = texts
    return wrong


def assert_only_the_replies_in_flight_repeated(tg: FakeTelegram, flying: set[Reply], per_user: int) -> None:
    """Every DM answered, each chat in order; the one thing a SIGKILL may leave is a reply the killed process was
    sending at that instant, which Telegram took before the process could record it: the next process sends it
    again (the Bot API has no idempotency key; never losing it is the side chosen)."""
    wrong = unexplained(tg.sent, flying, per_user)
    assert not wrong, f"beyond the replies in flight at the kill ({sorted(flying)}): {wrong}"


# --- the poller killed mid-run ------------------------------------------------------------------------------------


POLLING_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*telegram main: polling \(elected\)", re.MULTILINE)


def log_time(stamp: str) -> float:
    """A text log line's time (the local zone, as logging writes it) as seconds since the epoch."""
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()


async def test_the_poller_sigkilled_mid_run_loses_nothing_repeats_at_most_its_replies_in_flight_and_is_taken_over(
    tmp_path: Path, fake_telegram: FakeTelegram, postgres_url: str
) -> None:
    tg = fake_telegram
    async with EchoLLM() as llm, cluster(tmp_path, llm, tg, postgres_url) as bots:
        poller = await bots.watch.poller()
        await send_burst(tg, KILLED_PER_USER)
        await tg.wait_for(lambda: answered(tg) >= 100, "100 answers", timeout=BURST_WAIT)
        killed_at, killed_wall = time.monotonic(), time.time()
        ports, pending = await freeze_and_kill(bots, poller, tg, postgres_url)
        at_kill = answered(tg)
        first_at, successor = await bots.watch.successor(poller, killed_at, timeout=60)
        take_over = first_at - killed_at
        await tg.wait_for(lambda: answered(tg) >= USERS * KILLED_PER_USER, "300 answers", timeout=BURST_WAIT)
        await eventually(lambda: settled(postgres_url), "the journal to settle")
        # The successor's own log: when it says it was elected and began polling, relative to the kill.
        said = [log_time(stamp) - killed_wall for stamp in POLLING_LINE.findall(bots.log(successor))]
        logged = [seconds for seconds in said if seconds > 0]
        before, after = bots.watch.pollers(until=killed_at), bots.watch.pollers(since=first_at)
        flying = in_flight(tg, ports, pending)
        print(f"\nSIGKILL of the poller (pid {poller}) after {at_kill} answers; pid {successor} polled"
              f" {take_over:.2f} s later (its log says {logged[:1]} s); getUpdates per pid before/after: {dict(before)}"
              f" / {dict(after)}; journal rows per pid: {dict(claims(postgres_url))}; replies pending at the kill:"
              f" {len(pending)}, in flight: {sorted(flying)}; chats with a repeat: {repeating(tg)}")  # fmt: skip
        assert at_kill < USERS * KILLED_PER_USER  # killed while answers were being produced
        assert take_over < TAKE_OVER_LIMIT
        assert logged and logged[0] < TAKE_OVER_LIMIT, f"no 'polling (elected)' in {successor}'s log after the kill"
        assert set(before) <= {poller, None}, f"more than one process polled before the kill: {before}"
        assert set(after) <= {successor, None}, f"more than one process polls after the take-over: {after}"
        assert_only_the_replies_in_flight_repeated(tg, flying, KILLED_PER_USER)
    assert_only_the_replies_in_flight_repeated(tg, flying, KILLED_PER_USER)  # nothing more after the stop either


# --- the check fails on what a resending bug sends ------------------------------------------------------------------


def every_answer_once(per_user: int) -> dict[int, list[str]]:
    users = range(FIRST_USER, FIRST_USER + USERS)
    return {user: [answer(user, number) for number in range(per_user)] for user in users}


def test_the_repeat_check_allows_the_reply_in_flight_and_fails_a_bug_resending_every_chats_last_reply() -> None:
    """The check fed, without a cluster, what two runs would leave when the poller dies with each chat answered
    twice: one honest (the one reply in flight then sent again), one with a bug that sends every chat's last reply
    again after the take-over. The check before this one accepted both: it dropped any reply repeated right after
    itself, in any number of chats."""
    flying = {(FIRST_USER, answer(FIRST_USER, 1))}  # one chat's second answer was on its way at the kill
    honest = every_answer_once(KILLED_PER_USER)
    honest[FIRST_USER].insert(2, answer(FIRST_USER, 1))
    buggy = {user: [*texts[:2], texts[1], *texts[2:]] for user, texts in every_answer_once(KILLED_PER_USER).items()}
    lost = {**honest, FIRST_USER + 1: honest[FIRST_USER + 1][:-1]}

    assert unexplained(honest, flying, KILLED_PER_USER) == {}
    assert set(unexplained(buggy, flying, KILLED_PER_USER)) == set(range(FIRST_USER + 1, FIRST_USER + USERS))
    assert set(unexplained(lost, flying, KILLED_PER_USER)) == {FIRST_USER + 1}
