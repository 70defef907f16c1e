"""The chat commands that change or show one session's own settings and costs: /model, /think, /queue, /usage."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import get_args

from agent.lanes import Lanes, QueueMode
from agent.providers.config import THINKING_LEVELS, ModelPrice
from bot.config.settings import CommandAccess, Config
from bot.runs.assemble import SetupError, choose_model, model_refs, session_models, session_refs
from bot.store import SessionRecord, SessionStore
from bot.store.sessions import ModelUsage, UsageRow
from bot.turns.turn import Job
from channels.health import UNHEALTHY, HealthSnapshot
from tools.clock import zone

__all__ = [
    "QUEUE_MODES",
    "UsageTotal",
    "active_in",
    "cost_of",
    "dollars",
    "model_command",
    "price_of",
    "queue_command",
    "refusal",
    "restore_queue_mode",
    "restore_queue_modes",
    "settings_line",
    "start_of_day",
    "status_lines",
    "think_command",
    "total_usage",
    "usage_command",
]

QUEUE_MODES: tuple[QueueMode, ...] = get_args(QueueMode)
_CLEAR = ("default", "reset")


def refusal(
    name: str, access: CommandAccess, job: Job, session: SessionRecord | None, active: Collection[str] = ()
) -> str | None:
    """Why `job`'s sender may not use `/name` (its `agents[].commands` rule: `access`), or None when they may.
    `own` lets anyone act on what is theirs alone: `/stop` stops only their own answer and messages (the caller
    sees to that); the others change the conversation, so it must be one only they have talked in, and that nobody
    else has a turn running or waiting in (`active`: the principal keys of those)."""
    if job.owner or access == "everyone":
        return None
    if access == "owners":
        return f"Only the bot's owners can use /{name} here."
    mine = {job.principal.key}
    if name == "stop" or ((session is None or set(session.people) <= mine) and set(active) <= mine):
        return None
    return f"/{name} changes this conversation for everyone in it: only the bot's owners can use it here."


def _current_model(config: Config, job: Job, session: SessionRecord | None) -> str:
    overrides = session.overrides if session else {}
    return session_refs(config, job.agent, overrides.get("model"))[0]


async def model_command(store: SessionStore, config: Config, job: Job, args: str) -> str:
    """`/model`: the models this session may use, the current one marked; `/model NAME` switches this session to
    one (kept across restarts and `/new`), `/model default` goes back to the agent's."""
    try:
        allowed = session_models(config, job.agent)
    except SetupError:
        return f"Agent {job.agent} has no model configured."
    session = await store.get_session(job.session_key)
    wanted = args.split()[0] if args.split() else ""
    if not wanted:
        current = _current_model(config, job, session)
        own = bool(session and session.overrides.get("model") == current)
        why = "this conversation's choice" if own else "the agent's model"
        lines = [ref + (f" (current: {why})" if ref == current else "") for ref in allowed]
        return (
            "Models for this conversation:\n" + "\n".join(lines)
            + "\nSwitch with /model NAME; /model default goes back to the agent's."
        )  # fmt: skip
    refused = refusal("model", config.agent(job.agent).commands.model, job, session)
    if refused is not None:
        return refused
    if wanted.lower() in _CLEAR:
        await store.set_overrides(job.session_key, job.agent, model=None)
        return f"This conversation uses the agent's model again: {allowed[0]}."
    ref = _match_model(wanted, allowed)
    if ref is None:
        close = difflib.get_close_matches(wanted, allowed, n=1, cutoff=0.5)
        hint = f" Did you mean {close[0]}?" if close else ""
        return f"No model {wanted!r} for this agent.{hint} Models it may use:\n" + "\n".join(allowed)
    await store.set_overrides(job.session_key, job.agent, model=ref)
    return f"This conversation now uses {ref} (its fallbacks stay the agent's)."


def _match_model(wanted: str, allowed: Sequence[str]) -> str | None:
    """The allowed ref `wanted` names: itself, any case, or its model id alone when that is unambiguous."""
    for ref in allowed:
        if ref.lower() == wanted.lower():
            return ref
    by_id = [ref for ref in allowed if ref.partition("/")[2].lower() == wanted.lower()]
    return by_id[0] if len(by_id) == 1 else None


async def think_command(store: SessionStore, config: Config, job: Job, args: str) -> str:
    """`/think`: this session's thinking level; `/think LEVEL` sets it, `/think default` goes back to the model's."""
    level = args.strip().lower()
    if not level:
        session = await store.get_session(job.session_key)
        own = session.overrides.get("thinking") if session else None
        if own:
            return f"Thinking: {own} (this conversation's). Levels: {', '.join(THINKING_LEVELS)}."
        return f"Thinking: {_model_thinking(config, job, session)} (the model's setting). Levels: " + ", ".join(
            THINKING_LEVELS
        )
    if level not in (*THINKING_LEVELS, *_CLEAR):
        return f"Unknown thinking level {level!r}: use one of {', '.join(THINKING_LEVELS)}, or default."
    refused = refusal("think", config.agent(job.agent).commands.think, job, await store.get_session(job.session_key))
    if refused is not None:
        return refused
    if level in _CLEAR:
        await store.set_overrides(job.session_key, job.agent, thinking=None)
        return "Thinking follows the model's setting again."
    await store.set_overrides(job.session_key, job.agent, thinking=level)
    return f"Thinking in this conversation: {level}."


def _model_thinking(config: Config, job: Job, session: SessionRecord | None) -> str:
    try:
        return choose_model(config, _current_model(config, job, session)).options.thinking
    except SetupError:
        return "off"


async def queue_command(store: SessionStore, config: Config, lanes: Lanes[Job], job: Job, args: str) -> str:
    """`/queue`: this session's queue mode; `/queue MODE` sets it (for the lanes at once, and stored for the next
    start), `/queue default` goes back to the configured one."""
    mode = args.strip().lower()
    modes = ", ".join(QUEUE_MODES)
    if not mode:
        session = await store.get_session(job.session_key)
        why = "this conversation's" if session and session.overrides.get("queue") else "the default"
        return f"Queue mode: {lanes.mode(job.session_key)} ({why}). Modes: {modes}."
    if mode not in (*QUEUE_MODES, *_CLEAR):
        return f"Unknown queue mode {mode!r}: use one of {modes}, or default."
    session = await store.get_session(job.session_key)
    refused = refusal("queue", config.agent(job.agent).commands.queue, job, session, active_in(lanes, job.session_key))
    if refused is not None:
        return refused
    if mode in _CLEAR:
        await store.set_overrides(job.session_key, job.agent, queue=None)
        lanes.set_mode(job.session_key, None)
        return f"Queue mode back to the default: {lanes.mode(job.session_key)}."
    chosen = next(item for item in QUEUE_MODES if item == mode)
    await store.set_overrides(job.session_key, job.agent, queue=chosen)
    lanes.set_mode(job.session_key, chosen)
    return f"Queue mode in this conversation: {chosen}."


def active_in(lanes: Lanes[Job], key: str) -> set[str]:
    """Whom the session's running and waiting turns act for (their principals' keys)."""
    running = lanes.running_for(key)
    return {job.principal.key for job in lanes.pending_items().get(key, [])} | ({running} if running else set())


async def restore_queue_modes(store: SessionStore, lanes: Lanes[Job]) -> int:
    """Give the lanes every session's stored `/queue` mode (at start); how many sessions have one."""
    restored = 0
    for key, overrides in (await store.all_overrides()).items():
        mode = _queue_mode(overrides)
        if mode is not None:
            lanes.set_mode(key, mode)
            restored += 1
    return restored


async def restore_queue_mode(store: SessionStore, lanes: Lanes[Job], key: str) -> None:
    """Give the lanes one session's stored `/queue` mode as it stands now (a session taken over from another
    process of a cluster, where `/queue` may have changed it since this process started)."""
    session = await store.get_session(key)
    lanes.set_mode(key, _queue_mode(session.overrides) if session is not None else None)


def _queue_mode(overrides: dict[str, str]) -> QueueMode | None:
    return next((item for item in QUEUE_MODES if item == overrides.get("queue")), None)


def status_lines(config: Config, job: Job, session: SessionRecord | None, queue: str) -> list[str]:
    """`/status`: the agent, model, session, tokens, `queue` (how its messages wait) and this conversation's own
    settings."""
    refs = model_refs(config, job.agent) if config.model_for(job.agent) else []
    return [
        f"Agent: {job.agent}",
        f"Model: {session.model if session and session.model else (refs[0] if refs else 'none configured')}",
        f"Session: {job.session_key}",
        tokens_line(session),
        f"Queue: {queue}",
        settings_line(session),
    ]


def tokens_line(session: SessionRecord | None) -> str:
    """`/status`'s account of what the session cost: tokens in and out, and how much of the input the provider's
    prompt cache served (its hit rate) and stored."""
    if session is None or not session.input_tokens:
        return f"Tokens used: 0 in, {session.output_tokens if session else 0} out"
    hit = session.cache_read_tokens / session.input_tokens
    return (
        f"Tokens used: {session.input_tokens:,} in, {session.output_tokens:,} out; "
        f"cache: {session.cache_read_tokens:,} read ({hit:.0%} hit rate), {session.cache_write_tokens:,} written"
    )


def settings_line(session: SessionRecord | None) -> str:
    """`/status`'s line about what the chat changed for this session."""
    overrides = session.overrides if session else {}
    parts = [f"{name} {overrides[name]}" for name in ("model", "thinking", "queue") if overrides.get(name)]
    return "This conversation's settings: " + (", ".join(parts) if parts else "none (the agent's defaults)")


# --- /usage ---------------------------------------------------------------------------------------------------------


@dataclass
class UsageTotal:
    """Tokens added up over usage rows, the estimated cost of the priced ones, and the models without a price."""

    runs: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost: float = 0.0
    priced: int = 0  # runs whose model has a price
    unpriced: tuple[str, ...] = ()


def cost_of(row: UsageRow | ModelUsage, price: ModelPrice) -> float:
    """Dollars for one run's row (or one model's runs added up) at `price`."""
    return price.cost(row.input_tokens, row.output_tokens, row.cache_read_tokens, row.cache_write_tokens)


def total_usage(rows: Sequence[UsageRow | ModelUsage], price_of: Callable[[str], ModelPrice | None]) -> UsageTotal:
    """The rows (each a run, or a model's runs added up) added up; `price_of(model ref)` gives each model's price
    (None: none configured)."""
    total = UsageTotal()
    unpriced: dict[str, None] = {}
    for row in rows:
        total.runs += row.runs
        total.input_tokens += row.input_tokens
        total.output_tokens += row.output_tokens
        total.cache_read_tokens += row.cache_read_tokens
        total.cache_write_tokens += row.cache_write_tokens
        price = price_of(row.model) if row.model else None
        if price is None:
            unpriced[row.model or "an unknown model"] = None
            continue
        total.cost += cost_of(row, price)
        total.priced += row.runs
    total.unpriced = tuple(unpriced)
    return total


def dollars(amount: float) -> str:
    """`$1.23`, or more digits for amounts under a cent (`$0.000183`)."""
    if amount >= 1:
        return f"${amount:,.2f}"
    return f"${amount:.4f}" if amount >= 0.01 else f"${amount:.6f}"


def price_of(config: Config) -> Callable[[str], ModelPrice | None]:
    """The price of a model (by its `provider/model` ref) as the config sets it; None when none is set."""

    def price(ref: str) -> ModelPrice | None:
        try:
            return choose_model(config, ref).options.price
        except (SetupError, ValueError):
            return None

    return price


def _describe(total: UsageTotal) -> list[str]:
    if not total.runs:
        return ["no runs yet"]
    lines = [
        f"{total.input_tokens:,} tokens in (cache: {total.cache_read_tokens:,} read, "
        f"{total.cache_write_tokens:,} written), {total.output_tokens:,} out, in {total.runs} "
        f"run{'s' if total.runs != 1 else ''}"
    ]
    if total.priced:
        partly = " (priced models only)" if total.unpriced else ""
        lines.append(f"estimated cost: {dollars(total.cost)}{partly}")
    lines += [f"no price configured for {model}" for model in total.unpriced]
    return lines


def start_of_day(now: float, timezone: str | None) -> float:
    """The moment today began in `timezone` (None: the host's), for `now` (seconds since the epoch)."""
    local = datetime.fromtimestamp(now, zone(timezone))
    return local.replace(hour=0, minute=0, second=0, microsecond=0).timestamp()


async def usage_command(store: SessionStore, config: Config, job: Job, now: float) -> str:
    """`/usage`: this session's tokens since it began (or its last `/new`) and their estimated cost; for owners,
    also today's across every session (today in the agent's time zone)."""
    session = await store.get_session(job.session_key)
    price_of_model = price_of(config)
    rows = await store.usage_by_model(session.created, job.session_key) if session else []
    lines = ["This conversation: " + "\n".join(_describe(total_usage(rows, price_of_model)))]
    if job.owner:
        timezone = config.timezone_for(job.agent)
        today = total_usage(await store.usage_by_model(start_of_day(now, timezone)), price_of_model)
        lines.append(f"Today ({timezone or 'host time'}), all conversations: " + "\n".join(_describe(today)))
    return "\n".join(lines)


def _utc(timestamp: float) -> str:
    return f"{datetime.fromtimestamp(timestamp, UTC):%Y-%m-%d %H:%M} UTC"


def health_lines(channels: Sequence[HealthSnapshot]) -> list[str]:
    """`/status`'s lines for the owners: each channel account, its state and since when (and, when it is down,
    its last error)."""
    lines = []
    for channel in channels:
        line = f"{channel.channel}/{channel.account}: {channel.state} since {_utc(channel.since)}"
        if channel.state in UNHEALTHY and channel.last_error:
            line += f" ({channel.last_error})"
        lines.append(line)
    return lines
