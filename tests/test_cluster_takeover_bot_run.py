"""Three real `bot run` processes on one PostgreSQL database (see test_cluster_bot_run.py): the Telegram poller
SIGKILLed mid-way through 400 DMs loses nothing, repeats at most the replies it was sending at that instant, and its
polling is taken over by another process within the bound."""

from __future__ import annotations

import re
import signal
import time
from datetime import datetime
from pathlib import Path

from fakes.telegram import FakeTelegram
from helpers import EchoLLM, eventually
from test_cluster_bot_run import (
    BURST_WAIT,
    USERS,
    answered,
    claims,
    cluster,
    message,
    send_burst,
    settled,
    wrong,
    wrong_answers,
)

KILLED_PER_USER = 4  # 400 DMs are enough to kill the poller mid-run (at 120 answers)
TAKE_OVER_LIMIT = 15.0  # seconds from the poller's SIGKILL to another process's getUpdates (the bound)


def sent_again(tg: FakeTelegram, per_user: int) -> list[int]:
    """The wrong chats whose answers are right once an answer repeated right after itself is dropped: a reply sent
    again, the mark of a process killed after Telegram took the reply and before it recorded that (at least once)."""
    found = []
    for user, texts in wrong_answers(tg, per_user).items():
        once = [text for index, text in enumerate(texts) if index == 0 or texts[index - 1] != text]
        if once == [f"answer to {message(user, number)}" for number in range(per_user)]:
            found.append(user)
    return found


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
        await tg.wait_for(lambda: answered(tg) >= 120, "120 answers", timeout=BURST_WAIT)
        killed_at, killed_wall = time.monotonic(), time.time()
        bots.processes[bots.pids.index(poller)].send_signal(signal.SIGKILL)
        await bots.processes[bots.pids.index(poller)].wait()
        at_kill = answered(tg)
        first_at, successor = await bots.watch.successor(poller, killed_at, timeout=60)
        take_over = first_at - killed_at
        await tg.wait_for(lambda: answered(tg) >= USERS * KILLED_PER_USER, "400 answers", timeout=BURST_WAIT)
        await eventually(lambda: settled(postgres_url), "the journal to settle")
        # The successor's own log: when it says it was elected and began polling, relative to the kill.
        said = [log_time(stamp) - killed_wall for stamp in POLLING_LINE.findall(bots.log(successor))]
        logged = [seconds for seconds in said if seconds > 0]
        before, after = bots.watch.pollers(until=killed_at), bots.watch.pollers(since=first_at)
        print(f"\nSIGKILL of the poller (pid {poller}) after {at_kill} answers; pid {successor} polled"
              f" {take_over:.2f} s later (its log says {logged[:1]} s); getUpdates per pid before/after: {dict(before)}"
              f" / {dict(after)}; journal rows per pid: {dict(claims(postgres_url))}")  # fmt: skip
        assert at_kill < USERS * KILLED_PER_USER  # killed while answers were being produced
        assert take_over < TAKE_OVER_LIMIT
        assert logged and logged[0] < TAKE_OVER_LIMIT, f"no 'polling (elected)' in {successor}'s log after the kill"
        assert set(before) <= {poller, None}, f"more than one process polled before the kill: {before}"
        assert set(after) <= {successor, None}, f"more than one process polls after the take-over: {after}"
        assert_only_the_replies_in_flight_repeated(tg, KILLED_PER_USER)
    assert_only_the_replies_in_flight_repeated(tg, KILLED_PER_USER)  # nothing more after the stop either


def assert_only_the_replies_in_flight_repeated(tg: FakeTelegram, per_user: int) -> None:
    """Every DM answered, each chat in order; the one thing a SIGKILL may leave is a reply the killed process was
    sending at that instant, which Telegram took before the process could record it: the next process sends it
    again (the Bot API has no idempotency key; never losing it is the side chosen). Each chat sends one reply at a
    time, so a chat shows at most one such repeat, right after the original."""
    again = sent_again(tg, per_user)
    assert set(wrong_answers(tg, per_user)) == set(again), f"not just a repeated reply: {wrong(tg, per_user)}"
    assert all(len(tg.sent[user]) == per_user + 1 for user in again), {user: tg.sent[user] for user in again}
