"""Everything one agent run needs, built from the config: the model and its provider, tools, and prompt."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from agent.prompt import ToolLine, build_system_prompt, read_bootstrap
from agent.providers.config import ModelOptions, ProviderConfig, split_model
from bot.config import Config
from routing import Peer
from tools.base import RunInfo
from tools.policy import PolicyResult, Selection, select_tools
from tools.registry import ToolRegistry


class SetupError(Exception):
    """A run cannot start: no model configured, or its provider is missing. The message says what to do."""


@dataclass(frozen=True)
class ModelChoice:
    """One model to call: `ref` as written (`provider/model-id`), the provider's settings, the model's options."""

    ref: str
    provider_name: str
    model_id: str
    provider: ProviderConfig
    options: ModelOptions


def model_refs(config: Config, agent_id: str) -> list[str]:
    """The agent's model, then its fallbacks, without repeats; SetupError when none is configured."""
    primary = config.model_for(agent_id)
    if primary is None:
        raise SetupError(f"agent {agent_id!r} has no model: set defaults.model or agents[].model in bindings.yaml")
    return list(dict.fromkeys([primary, *config.fallbacks_for(agent_id)]))


def choose_model(config: Config, ref: str, environ: Mapping[str, str] | None = None) -> ModelChoice:
    """Resolve `provider/model-id` against the providers section (or the environment)."""
    provider_name, model_id = split_model(ref)
    try:
        provider = config.provider(provider_name, os.environ if environ is None else environ)
    except KeyError as error:
        raise SetupError(str(error.args[0])) from None
    return ModelChoice(ref, provider_name, model_id, provider, provider.model_options(model_id))


def policy_for(
    config: Config,
    registry: ToolRegistry,
    run: RunInfo,
    *,
    peer: Peer | None = None,
    sandboxed: bool = False,
    subagent: bool = False,
) -> PolicyResult:
    """The tools this run may use, and why each other tool was left out."""
    provider, model = split_model(run.model) if run.model else (None, None)
    selection = Selection(
        is_owner=run.sender_is_owner,
        agent=run.agent,
        provider=provider,
        model=model,
        channel=run.channel,
        peer_kind=peer.kind if peer else None,
        peer_id=peer.id if peer else None,
        sandboxed=sandboxed,
        subagent=subagent,
    )
    return select_tools(registry, selection, config.tools, config.agent(run.agent).tools)


async def system_prompt(run: RunInfo, policy: PolicyResult, *, is_group: bool, now: datetime | None = None) -> str:
    """The system prompt for this run (tool schemas travel separately, or in the XML section the loop adds)."""
    bootstrap = await read_bootstrap(Path(run.workspace) if run.workspace else None)
    lines = [ToolLine(tool.name, tool.description) for tool in policy.kept]
    return build_system_prompt(agent=run.agent, run=run, tools=lines, bootstrap=bootstrap, now=now, is_group=is_group)
