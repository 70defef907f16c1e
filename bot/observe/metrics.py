"""The gateway's Prometheus metrics: counters and a histogram updated as things happen, gauges read at each scrape."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, get_args

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics import MetricWrapperBase

from channels.health import ChannelState
from tools.hooks import Block, Hooks, Rewrite, ToolInvocation

if TYPE_CHECKING:
    from agent.messages import Usage
    from tools.base import ToolResult

__all__ = ["Metrics", "Readings", "counted_hooks"]

STATES: tuple[ChannelState, ...] = get_args(ChannelState)
# A turn takes from under a second (a short answer) to minutes (tool calls, an approval waited for).
TURN_BUCKETS = (0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0)

Account = tuple[str, str]  # (channel, account)


@dataclass(frozen=True)
class Readings:
    """What the gauges show, read from the gateway at scrape time."""

    outbox_backlog: int = 0  # outbox entries not sent yet (due or waiting to retry)
    running_turns: int = 0
    queued_items: int = 0  # messages (or folded batches) waiting for their session's next turn
    channels: Mapping[Account, ChannelState] = field(default_factory=dict)

    def unhealthy(self) -> dict[Account, ChannelState]:
        """The channel accounts neither connected nor starting."""
        return {key: state for key, state in self.channels.items() if state not in ("connected", "starting")}


class Metrics:
    """One gateway's metrics in a registry of its own (never the process-wide default: two Apps in one process
    keep separate counts). `render(readings)` is the text `/metrics` answers."""

    def __init__(self) -> None:
        self.registry = registry = CollectorRegistry(auto_describe=True)
        # Each metric's series by their label values: `labels()` checks and locks on every call, several a message.
        self._series: dict[tuple[int, tuple[str, ...]], Any] = {}
        self.messages_in = Counter(
            "switchboard_messages_in", "Messages journaled from the channels.", ["channel", "account"],
            registry=registry,
        )  # fmt: skip
        self.messages_out = Counter(
            "switchboard_messages_out",
            "Outbox entries carried out on a channel (kind: send, message, edit, delete, react, thread).",
            ["channel", "account", "kind"],
            registry=registry,
        )
        self.tokens = Counter(
            "switchboard_model_tokens",
            "Model tokens by kind: input (the whole prompt, cache included), output, cache_read, cache_write.",
            ["agent", "model", "kind"],
            registry=registry,
        )
        self.tool_calls = Counter(
            "switchboard_tool_calls", "Tool calls by outcome (ok or error).", ["tool", "outcome"], registry=registry
        )
        self.approvals = Counter(
            "switchboard_approvals", "Approval requests decided, by decision (or expired).", ["decision"],
            registry=registry,
        )  # fmt: skip
        self.turn_seconds = Histogram(
            "switchboard_turn_duration_seconds", "How long an agent's run took.", ["agent"], buckets=TURN_BUCKETS,
            registry=registry,
        )  # fmt: skip
        self.outbox_backlog = Gauge("switchboard_outbox_backlog", "Outbox entries not sent yet.", registry=registry)
        self.running_turns = Gauge("switchboard_turns_running", "Turns running now.", registry=registry)
        self.queued_items = Gauge(
            "switchboard_turns_queued", "Messages waiting for their session's next turn.", registry=registry
        )
        self.channel_state = Gauge(
            "switchboard_channel_state",
            "1 for a channel account's current state, 0 for the others.",
            ["channel", "account", "state"],
            registry=registry,
        )

    # --- as things happen -------------------------------------------------------------------------------------------

    def received(self, channel: str, account: str) -> None:
        self._of(self.messages_in, channel, account).inc()

    def sent(self, channel: str, account: str, kind: str) -> None:
        self._of(self.messages_out, channel, account, kind).inc()

    def used(self, agent: str, model: str | None, usage: Usage) -> None:
        model = model or "unknown"
        for kind, count in (
            ("input", usage.input_tokens),
            ("output", usage.output_tokens),
            ("cache_read", usage.cache_read_tokens),
            ("cache_write", usage.cache_write_tokens),
        ):
            self._of(self.tokens, agent, model, kind).inc(count)

    def tool_called(self, tool: str, result: ToolResult) -> None:
        self._of(self.tool_calls, tool, "error" if result.is_error else "ok").inc()

    def decided(self, decision: str) -> None:
        self._of(self.approvals, decision).inc()

    def turn_took(self, agent: str, seconds: float) -> None:
        self._of(self.turn_seconds, agent).observe(seconds)

    def _of(self, metric: MetricWrapperBase, *values: str) -> Any:
        """The series of `metric` with these label values (made on first use, as `labels()` makes it)."""
        key = (id(metric), values)
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = metric.labels(*values)
        return series

    # --- at scrape time ---------------------------------------------------------------------------------------------

    def render(self, readings: Readings) -> bytes:
        """The Prometheus text format, the gauges set from `readings` first."""
        self.outbox_backlog.set(readings.outbox_backlog)
        self.running_turns.set(readings.running_turns)
        self.queued_items.set(readings.queued_items)
        for (channel, account), current in readings.channels.items():
            for state in STATES:
                self.channel_state.labels(channel, account, state).set(1 if state == current else 0)
        return generate_latest(self.registry)


def counted_hooks(hooks: Hooks, metrics: Metrics) -> Hooks:
    """`hooks` (consulted at each call, so hooks registered later count too) followed by one that counts each tool
    call by its outcome: one gateway's, leaving the App's own hooks as they are."""
    chained = Hooks(clock=hooks.clock)

    @chained.before_tool_call
    async def app_hooks(call: ToolInvocation) -> Rewrite | Block:
        outcome = await hooks.run_before(call)
        return outcome if isinstance(outcome, Block) else Rewrite(arguments=outcome.arguments)

    @chained.after_tool_call
    async def count(call: ToolInvocation, result: ToolResult, duration: float) -> None:
        await hooks.run_after(call, result, duration)
        metrics.tool_called(call.tool, result)

    return chained
