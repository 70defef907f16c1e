"""Three real `bot run` processes serving one bot from one PostgreSQL database (`state: {backend: postgres, url: …}`),
each with its own state folder, all on the same fake Telegram token and the same fake LLM: 1,000 DMs from 100 users
answered once each and in order per chat; the Telegram poller SIGKILLed mid-run (of 400), losing nothing and repeating
at most the replies it was sending at that instant, its polling taken over by another process; an approval card shown
by the process running the turn and clicked through the poller; a cron job firing once across the three.

Which process asks for updates is read from the fake's side: every getUpdates arrives on a TCP connection, and the
connection's client port belongs to exactly one of the processes (/proc/net/tcp gives the socket, /proc/<pid>/fd
its owner)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import signal
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from fakes.llm import FakeLLM, Reply, ToolCallSpec
from fakes.telegram import FakeTelegram
from helpers import EchoLLM, PollWatch, eventually, launch_bot

from bot.schedules import Job
from bot.store.postgres import PostgresStore

STARTED = "channel telegram account main started"
PROCESSES = 3
FIRST_USER = 70_000
USERS = 100
PER_USER = 10
KILLED_PER_USER = 4  # the poller-killed test: 400 DMs are enough to kill it mid-run (its answers at 120)
OWNERS = [4242 + number for number in range(6)]
TAKE_OVER_LIMIT = 15.0  # seconds from the poller's SIGKILL to another process's getUpdates (the bound)
BURST_WAIT = 600.0  # generous: reached only when something is broken (or the machine is far slower than expected)


def config(folder: Path, llm: FakeLLM, tg: FakeTelegram, url: str, **extra: Any) -> dict[str, Any]:
    """One process's bindings.yaml: its own workspace and state folder, the shared database, token and model."""
    return {
        "defaults": {"model": "fake/m", "workspace_root": str(folder / "ws")},
        "providers": {"fake": {"kind": "openai", "base_url": llm.openai_base_url}},
        "owners": [f"telegram:{owner}" for owner in OWNERS],
        "state": {"backend": "postgres", "url": url},
        "session": {"queue": {"mode": "followup"}},  # every DM its own turn and its own answer
        "channels": {"telegram": {"accounts": {"main": {
            "token": tg.token, "api_base_url": tg.url, "poll_timeout": 1, "streaming": "off", "dm_policy": "open",
        }}}},
        **extra,
    }  # fmt: skip


# --- the three processes ------------------------------------------------------------------------------------------


@dataclass
class Cluster:
    folders: list[Path]
    processes: list[asyncio.subprocess.Process]
    watch: PollWatch

    @property
    def pids(self) -> list[int]:
        return [process.pid for process in self.processes]

    def folder_of(self, pid: int) -> Path:
        return self.folders[self.pids.index(pid)]

    def log(self, pid: int) -> str:
        return (self.folder_of(pid) / "bot.log").read_text(errors="replace")

    def logs(self) -> str:
        return "\n".join(f"--- {folder.name} ---\n{(folder / 'bot.log').read_text(errors='replace')[-3000:]}"
                         for folder in self.folders)  # fmt: skip


@contextlib.asynccontextmanager
async def cluster(
    tmp_path: Path, llm: FakeLLM, tg: FakeTelegram, url: str, count: int = PROCESSES, **extra: Any
) -> AsyncIterator[Cluster]:
    """`count` `bot run` processes (folders p0, p1, …), started together; at the end each one still running gets
    SIGTERM and must exit 0 (it is killed after 30 s, or when the test failed)."""
    folders = [tmp_path / f"p{number}" for number in range(count)]
    for folder in folders:
        folder.mkdir()
    launched = await asyncio.gather(
        *(launch_bot(config(folder, llm, tg, url, **extra), folder, STARTED) for folder in folders),
        return_exceptions=True,
    )
    processes = [process for process in launched if isinstance(process, asyncio.subprocess.Process)]
    running = Cluster(folders, processes, PollWatch(tg, [process.pid for process in processes]))
    try:
        for outcome in launched:
            if isinstance(outcome, BaseException):
                raise outcome
        running.watch.start()
        yield running
        for process in processes:
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
        codes = [await asyncio.wait_for(process.wait(), 30) for process in processes]
        assert all(code in (0, -signal.SIGKILL) for code in codes), f"exit codes {codes}\n{running.logs()}"
    finally:
        await running.watch.stop()
        for process in processes:
            if process.returncode is None:
                process.kill()
                await process.wait()


# --- the database: what the processes recorded --------------------------------------------------------------------


def query(url: str, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(url) as connection:
        return [tuple(row) for row in connection.execute(sql, params).fetchall()]


def settled(url: str) -> bool:
    """Every journal row finished and every reply sent."""
    [(unfinished,)] = query(url, "SELECT count(*) FROM inbound WHERE status IN ('pending', 'running')")
    [(unsent,)] = query(url, "SELECT count(*) FROM outbox WHERE status = 'pending'")
    return bool(unfinished == unsent == 0)


def claims(url: str) -> Counter[int | None]:
    """How many journal rows each process (by pid) claimed."""
    rows = query(url, "SELECT p.pid FROM inbound i LEFT JOIN processes p ON p.id = i.claimed_by")
    return Counter(pid for (pid,) in rows)


# --- 1,000 DMs ----------------------------------------------------------------------------------------------------


def message(user: int, number: int) -> str:
    return f"u{user} m{number}"


async def send_burst(tg: FakeTelegram, per_user: int = PER_USER) -> None:
    """`per_user` DMs from each of 100 users, interleaved: every user's first, then every user's second, …"""
    for number in range(per_user):
        for user in range(FIRST_USER, FIRST_USER + USERS):
            await tg.private_message(message(user, number), user_id=user, name=f"user{user}")


def wrong(tg: FakeTelegram, per_user: int = PER_USER) -> str:
    """What the chats whose answers are wrong got, in full (empty when none is wrong)."""
    return "".join(f"\nchat {user}: {texts}" for user, texts in wrong_answers(tg, per_user).items())


def sent_again(tg: FakeTelegram, per_user: int) -> list[int]:
    """The wrong chats whose answers are right once an answer repeated right after itself is dropped: a reply sent
    again, the mark of a process killed after Telegram took the reply and before it recorded that (at least once)."""
    found = []
    for user, texts in wrong_answers(tg, per_user).items():
        once = [text for index, text in enumerate(texts) if index == 0 or texts[index - 1] != text]
        if once == [f"answer to {message(user, number)}" for number in range(per_user)]:
            found.append(user)
    return found


def answered(tg: FakeTelegram) -> int:
    return sum(len(tg.sent.get(user, [])) for user in range(FIRST_USER, FIRST_USER + USERS))


def wrong_answers(tg: FakeTelegram, per_user: int = PER_USER) -> dict[int, list[str]]:
    """The chats whose answers are not exactly one per DM, in the order the DMs were sent."""
    wrong = {}
    for user in range(FIRST_USER, FIRST_USER + USERS):
        wanted = [f"answer to {message(user, number)}" for number in range(per_user)]
        if tg.sent.get(user, []) != wanted:
            wrong[user] = tg.sent.get(user, [])
    return wrong


async def test_1000_dms_from_100_users_are_answered_once_each_and_in_order_per_chat(
    tmp_path: Path, fake_telegram: FakeTelegram, postgres_url: str
) -> None:
    tg = fake_telegram
    began = time.monotonic()
    async with EchoLLM() as llm, cluster(tmp_path, llm, tg, postgres_url) as bots:
        await send_burst(tg)
        await tg.wait_for(lambda: answered(tg) >= USERS * PER_USER, "1,000 answers", timeout=BURST_WAIT)
        await eventually(lambda: settled(postgres_url), "the journal to settle")
        print(f"\n1,000 DMs through {PROCESSES} processes in {time.monotonic() - began:.1f} s (with the starts);"
              f" journal rows claimed per pid: {dict(claims(postgres_url))};"
              f" getUpdates per pid: {dict(bots.watch.pollers())}")  # fmt: skip
        assert not wrong(tg), wrong(tg)
        pollers = [pid for pid in bots.watch.pollers() if pid is not None]  # None: a connection not mapped in time
        assert len(pollers) == 1, f"more than one process polled: {bots.watch.pollers()}"
    assert not wrong(tg), wrong(tg)  # nothing more after the stop either


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


# --- an approval across processes ---------------------------------------------------------------------------------


def approval_cards(tg: FakeTelegram, chat: int) -> list[dict[str, Any]]:
    return [call for call in tg.calls("sendMessage") if call["chat_id"] == chat and "reply_markup" in call]


def allow_once(call: dict[str, Any]) -> str:
    markup = call["reply_markup"]
    markup = json.loads(markup) if isinstance(markup, str) else markup
    [data] = [b["callback_data"] for row in markup["inline_keyboard"] for b in row if b["text"] == "Allow once"]
    return str(data)


def card_id(tg: FakeTelegram, chat: int, data: str) -> int:
    approval = data.split(":")[1]
    [found] = [mid for (cid, mid), stored in tg.messages.items() if cid == chat and approval in stored.visible]
    return found


def turn_runner(bots: Cluster, owner: int) -> list[int]:
    """The pids whose own log shows a model run in the owner's DM session (`run run_… (agent:main:telegram:…`)."""
    run = re.compile(rf"run run_\w+ \(agent:main:telegram:direct:{owner},")
    return [pid for pid in bots.pids if run.search(bots.log(pid))]


async def test_an_approval_shown_by_one_process_and_clicked_through_another_runs_the_command_once(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram, postgres_url: str
) -> None:
    tg = fake_telegram
    ran = tmp_path / "ran.txt"
    for owner in OWNERS:  # each owner asks for its own command; the model's script follows each conversation
        command = ToolCallSpec("exec", {"command": f"echo {owner} >> {ran}"})
        fake_llm.script_for(f"job {owner}", Reply.tool_calls(command), f"Ran it for {owner}.")
    async with cluster(tmp_path, fake_llm, tg, postgres_url) as bots:
        poller = await bots.watch.poller()
        for owner in OWNERS:
            await tg.private_message(f"job {owner}: run the command", user_id=owner, name=f"Owner{owner}")
        clicked: list[int] = []
        clicked_at = time.monotonic()

        async def click_what_is_shown() -> bool:
            """Allow each card as it comes (a process runs only so many turns at once: later turns wait for a slot)."""
            for owner in OWNERS:
                if owner not in clicked and approval_cards(tg, owner):
                    data = allow_once(approval_cards(tg, owner)[0])
                    await tg.callback_query(data, message_id=card_id(tg, owner, data), chat_id=owner, user_id=owner)
                    clicked.append(owner)
            return len(clicked) == len(OWNERS)

        await eventually(click_what_is_shown, "every approval card to be shown and clicked", timeout=120)
        for owner in OWNERS:
            await tg.wait_sent(owner, 2)
        await eventually(lambda: settled(postgres_url), "the journal to settle")
        runners = {owner: turn_runner(bots, owner) for owner in OWNERS}
        receivers = bots.watch.pollers(since=clicked_at)
        crossed = [owner for owner, pids in runners.items() if pids and pids != [poller]]
        print(f"\npoller pid {poller}; the turn's process per owner: {runners}; getUpdates after the clicks: "
              f"{dict(receivers)}; approvals crossing processes: {len(crossed)} of {len(OWNERS)}")  # fmt: skip
        assert set(receivers) <= {poller, None}, f"the clicks may have gone to another poller: {receivers}"
        assert all(len(pids) == 1 for pids in runners.values()), runners  # each turn ran in one process
        assert crossed, f"every turn ran in the poller {poller}: no approval crossed processes ({runners})"
        decided = query(postgres_url, "SELECT status, decision, count(*) FROM approvals GROUP BY status, decision")
        assert decided == [("allowed", "allow-once", len(OWNERS))]
    assert sorted(ran.read_text().split()) == sorted(str(owner) for owner in OWNERS)  # each command once
    for owner in OWNERS:
        assert tg.sent[owner][1:] == [f"Ran it for {owner}."], tg.sent[owner]  # the card, then the answer, once
        assert len(approval_cards(tg, owner)) == 1


# --- a cron job ---------------------------------------------------------------------------------------------------


def soon(seconds: float) -> str:
    return datetime.fromtimestamp(time.time() + seconds, UTC).isoformat(timespec="seconds")


async def add_job(url: str, job_id: str, at: str, message: str, deliver: str) -> None:
    """A one-shot job, as `bot cron add` records it: it fires at `at`, counted from now (its creation)."""
    async with await PostgresStore.open(url) as store:
        await store.save_job(Job(id=job_id, at=at, message=message, deliver=deliver).model_dump(mode="json"), "test")


async def test_a_cron_job_fires_once_across_the_three_processes(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram, postgres_url: str
) -> None:
    tg = fake_telegram
    owner = OWNERS[0]
    deliver = f"telegram/main:direct:{owner}"
    fake_llm.script_for("job early", "Early.", "Early again?")
    fake_llm.script_for("job later", "Later.", "Later again?")
    async with cluster(tmp_path, fake_llm, tg, postgres_url):
        # Made once all three run, due a moment later: every scheduler sees both ticks come.
        await add_job(postgres_url, "early", soon(2), "job early: say early", deliver)
        await add_job(postgres_url, "later", soon(4), "job later: say later", deliver)
        due = time.time() + 4

        def ended() -> bool:
            rows = query(postgres_url, "SELECT status FROM job_runs")
            return len(rows) >= 2 and all(status not in ("requested", "running") for (status,) in rows)

        await eventually(ended, "both runs to be recorded", timeout=60)
        # No process says when its scheduler passed a moment: three passes each (one a second) past the later tick,
        # in real time, is what shows that none of the three fires it again.
        await eventually(lambda: time.time() > due + 3, "every scheduler to be past the later tick")
        await eventually(lambda: settled(postgres_url), "the journal to settle")
        print(f"\nruns: {query(postgres_url, 'SELECT job_id, status, detail FROM job_runs ORDER BY id')}")
    runs = query(postgres_url, "SELECT job_id, status FROM job_runs ORDER BY job_id")
    assert runs == [("early", "ok"), ("later", "ok")]
    assert sorted(tg.sent[owner]) == ["Early.", "Later."]
