"""The tools a run under `bot run` gets, for the commands that show them without a running gateway (`bot tools`,
`bot prompt`, `bot config show`): the gateway's job book, session book and spawner stood in for, so that `cron`, the
session tools and the subagent tools are listed with their real schemas, and never run here."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, cast

from channels.base import Principal
from tools.builtins import NoChats, nobody_to_ask
from tools.exec import ProcessTable
from tools.registry import ToolRegistry, ToolSetup

if TYPE_CHECKING:
    from bot.app import App
    from routing import Peer
    from tools.cron import JobBook
    from tools.policy import PolicyResult
    from tools.sessions import SessionBook
    from tools.subagents import Spawner

__all__ = ["ONLY_UNDER_RUN_NOTE", "gateway_only", "gateway_policy", "gateway_registry"]

ONLY_UNDER_RUN_NOTE = "only under `bot run`, not in `bot chat` (the running gateway adds them)"


class _NotRunning:
    """Stands in for the gateway's job book, session book and spawner where no gateway runs: every call fails."""

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        async def refuse(*args: object, **kwargs: object) -> Any:
            raise LookupError(f"{name}: only a running gateway (`bot run`) has this")

        return refuse


def gateway_registry(app: App) -> ToolRegistry:
    """Every tool a gateway run may get: the App's, wired to no chat and no approver, with `cron`, the session tools
    and the subagent tools as the gateway adds them (their books stood in for: listed, never run)."""
    stand_in = _NotRunning()
    setup = ToolSetup(
        NoChats(), nobody_to_ask, ProcessTable(), jobs=cast("JobBook", stand_in),
        sessions=cast("SessionBook", stand_in), subagents=cast("Spawner", stand_in),
    )  # fmt: skip
    return app.registry(setup)


def gateway_only(app: App) -> tuple[str, ...]:
    """The names of the tools a gateway run has and `bot chat`'s runs lack, in the registry's order: `message` (no
    chat to send to), `cron`, the session tools and the subagent tools."""
    plain = {tool.name for tool in app.registry(ToolSetup(None, nobody_to_ask, ProcessTable()))}
    return tuple(tool.name for tool in gateway_registry(app) if tool.name not in plain)


def gateway_policy(app: App, agent: str, channel: str, *, peer: Peer | None = None, owner: bool = True) -> PolicyResult:
    """What `App.policy` gives, over `gateway_registry`: the tools a run of `agent` on `channel` under `bot run`
    may use, and why each other tool is left out."""
    from bot.runs.assemble import policy_for

    run = app.decisions.run_info(
        agent, "-", channel=channel, principal=Principal(owner=owner), peer_kind=peer.kind if peer else None,
        model=app.decisions.first_model(agent),
    )  # fmt: skip
    return policy_for(app.config, gateway_registry(app), run, peer=peer)
