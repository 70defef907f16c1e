"""Bounded state: finished journal rows, sent outbox entries, settled approvals, ended job runs and old usage rows
pruned on a schedule."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from bot.store import RetentionStore

__all__ = ["DAY", "keep_pruning", "prune_once"]

log = logging.getLogger(__name__)

DAY = 86_400.0


async def prune_once(store: RetentionStore, retention_days: float) -> dict[str, int]:
    """Delete what finished more than `retention_days` ago (never anything unfinished), then give the space back to
    the file system; how many of each kind were deleted."""
    age = retention_days * DAY
    pruned = {
        "inbound": await store.prune_inbound(age),
        "outbox": await store.prune_outbox(age),
        "approvals": await store.prune_approvals(age),
        "job_runs": await store.prune_job_runs(age),
        "usage": await store.prune_usage(age),
        "subagents": await store.prune_subagents(age),
    }
    await store.release_space()  # without it the database file keeps its size, however much was deleted
    return pruned


async def keep_pruning(
    store: RetentionStore,
    retention_days: float,
    *,
    every: float = DAY,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> None:
    """Prune now and then every `every` seconds until cancelled; a failed pass is logged and the next one tries."""
    while True:
        try:
            pruned = await prune_once(store, retention_days)
            if any(pruned.values()):
                log.info("pruned state older than %g days: %s", retention_days, pruned)
        except Exception:
            log.exception("pruning the state failed; trying again later")
        await sleep(every)
