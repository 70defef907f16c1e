"""Everything one agent run needs, built from the config: the model and its provider, tools, and prompt."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path

from agent.events import Emit
from agent.loop import Turn
from agent.messages import UserMessage
from agent.prompt import build_system_prompt
from agent.providers.base import Provider
from agent.providers.config import THINKING_LEVELS, sees_images, split_model
from agent.runner import ModelCandidate
from bot.config.settings import Config
from routing import Peer
from routing.errors import SwitchboardError
from tools.base import RunInfo
from tools.hooks import Hooks
from tools.owner_files import SKILLS_FOLDER
from tools.policy import PolicyResult, Selection, select_tools
from tools.registry import ToolRegistry
from tools.skills import SHIPPED_SKILLS, SkillReport, SkillSearch, SkillSource, find_skills

log = logging.getLogger(__name__)


class SetupError(SwitchboardError):
    """A run cannot start: no model configured, or its provider is missing. The message says what to do."""


def model_refs(config: Config, agent_id: str) -> list[str]:
    """The agent's model, then its fallbacks, without repeats; SetupError when none is configured."""
    primary = config.model_for(agent_id)
    if primary is None:
        raise SetupError(f"agent {agent_id!r} has no model: set defaults.model or agents[].model in bindings.yaml")
    return list(dict.fromkeys([primary, *config.fallbacks_for(agent_id)]))


def session_models(config: Config, agent_id: str) -> list[str]:
    """The models `/model` may switch one of the agent's sessions to: its model, its fallbacks, then
    `agents[].models`, without repeats; SetupError when it has no model."""
    return list(dict.fromkeys([*model_refs(config, agent_id), *config.agent(agent_id).models]))


def session_refs(config: Config, agent_id: str, model: str | None) -> list[str]:
    """The models a session's run tries, in order: the session's own `model` (set with `/model`) then the agent's
    fallbacks, or the agent's when it has none (or one the config no longer offers)."""
    if model is None or model not in session_models(config, agent_id):
        return model_refs(config, agent_id)
    return list(dict.fromkeys([model, *config.fallbacks_for(agent_id)]))


def choose_model(config: Config, ref: str, environ: Mapping[str, str] | None = None) -> ModelCandidate:
    """Resolve `provider/model-id` against the providers section (or the environment)."""
    provider_name, model_id = split_model(ref)
    try:
        provider = config.provider(provider_name, os.environ if environ is None else environ)
    except KeyError as error:
        raise SetupError(str(error.args[0])) from None
    return ModelCandidate(ref, provider_name, model_id, provider, provider.model_options(model_id))


def candidates(config: Config, agent_id: str, overrides: Mapping[str, str] | None = None) -> list[ModelCandidate]:
    """The models a run may use, in order; one whose provider is missing is left out (and logged). `overrides` are
    the session's own settings (`/model`, `/think`): its model goes first, its thinking level replaces each model's.

    SetupError when none is usable, with the reasons."""
    overrides = overrides or {}
    found, problems = [], []
    for ref in session_refs(config, agent_id, overrides.get("model")):
        try:
            candidate = choose_model(config, ref)
        except SetupError as error:
            problems.append(str(error))
            continue
        thinking = overrides.get("thinking")
        if thinking in THINKING_LEVELS:
            options = candidate.options.model_copy(update={"thinking": thinking})
            candidate = dataclasses.replace(candidate, options=options)
        found.append(candidate)
    if not found:
        raise SetupError("; ".join(problems))
    for problem in problems:
        log.warning("agent %s: fallback left out: %s", agent_id, problem)
    return found


def policy_for(
    config: Config,
    registry: ToolRegistry,
    run: RunInfo,
    *,
    peer: Peer | None = None,
) -> PolicyResult:
    """The tools this run may use, and why each other tool was left out; the `tools.sandbox` layer applies exactly
    when the run's commands are sandboxed (`run.sandbox`)."""
    by_group = config.tools is not None and config.tools.by_group  # only `tools.by_group` tells chats apart
    peer_kind, peer_id = (peer.kind, peer.id if by_group else None) if peer else (None, None)
    fields = (
        run.sender_is_owner, run.agent, run.model, run.channel, peer_kind, peer_id, run.sandbox is not None,
        run.depth, config.subagents.max_depth,
    )  # fmt: skip
    key = (id(config), fields, tuple(map(id, registry)))  # the Selection is made only when it is not known yet
    known = _POLICIES.get(key)
    if known is not None and known[0] is config:
        return known[1]
    if len(_POLICIES) >= POLICIES_KEPT:
        _POLICIES.clear()
    provider, model = split_model(run.model) if run.model else (None, None)
    selection = Selection(
        is_owner=run.sender_is_owner,
        agent=run.agent,
        provider=provider,
        model=model,
        channel=run.channel,
        peer_kind=peer_kind,
        peer_id=peer_id,
        sandboxed=run.sandbox is not None,
        depth=run.depth,
        max_depth=config.subagents.max_depth,
    )
    policy = select_tools(registry, selection, config.tools, config.agent(run.agent).tools)
    _POLICIES[key] = (config, policy)  # the config held, so that its id is not reused while the entry is kept
    return policy


# The policies decided lately: select_tools is pure, so the same config, selection and tools (the very objects: an
# MCP server that reconnects brings new ones) give the same result; kept apart from the run, as a result is shared.
POLICIES_KEPT = 512
_POLICIES: dict[tuple[int, tuple[object, ...], tuple[int, ...]], tuple[Config, PolicyResult]] = {}


def skill_report(config: Config, agent_id: str, protected: Sequence[str]) -> SkillReport:
    """Every skill folder the agent's runs could use, each offered or with why not: the workspace's `skills/`,
    then `skills.dirs`, then the shipped skills, narrowed by `agents[].skills`. `protected` are the bot's own
    files (bot.config.settings.own_files), which no skill folder may hold. Reads folders: call it off the event loop."""
    search = SkillSearch(
        skill_folders(config, agent_id),
        allow=config.agent(agent_id).skills,
        has_config=config.has_setting,
        protected=protected,
    )
    return find_skills(search)


def skill_folders(config: Config, agent_id: str) -> list[tuple[SkillSource, Path]]:
    """The folders the agent's skills are looked for in, in precedence order: the workspace's `skills/`, then
    `skills.dirs`, then the shipped skills."""
    folders: list[tuple[SkillSource, Path]] = [("workspace", config.workspace(agent_id) / SKILLS_FOLDER)]
    folders += [("dirs", folder) for folder in config.skill_dirs()]
    folders.append(("shipped", SHIPPED_SKILLS))
    return folders


def system_prompt(run: RunInfo, policy: PolicyResult, *, is_group: bool, bootstrap: list[tuple[str, str]]) -> str:
    """The system prompt for this run, with the workspace's `bootstrap` files (agent.prompt.read_bootstrap) and
    the run's skills when it may `read` them; tool schemas travel separately, or in the XML section the loop
    adds."""
    can_read = any(tool.name == "read" for tool in policy.kept)
    return build_system_prompt(
        agent=run.agent, run=run, has_tools=bool(policy.kept), bootstrap=bootstrap, is_group=is_group,
        skills=run.skills if can_read else (),
    )  # fmt: skip


def build_turn(
    config: Config,
    registry: ToolRegistry,
    run: RunInfo,
    candidate: ModelCandidate,
    provider: Provider,
    *,
    run_id: str,
    peer: Peer | None,
    bootstrap: list[tuple[str, str]],
    hooks: Hooks,
    emit: Emit,
    cancel: asyncio.Event,
    steer: Callable[[], Awaitable[list[UserMessage]]] | None = None,
) -> Turn:
    """The Turn for one attempt with `candidate` in the run `run_id`: its tools after policy, its prompt, its
    dispatch and limits."""
    turn_run = run.model_copy(update={"model": candidate.ref})
    policy = policy_for(config, registry, turn_run, peer=peer)
    return Turn(
        provider=provider,
        model=candidate.model_id,
        system=system_prompt(
            turn_run, policy, is_group=peer is not None and peer.kind != "direct", bootstrap=bootstrap
        ),
        run=turn_run,
        tools=list(policy.kept),  # the policy may be shared with other runs (policy_for)
        hooks=hooks,
        dispatch=candidate.options.tool_dispatch,
        sees_images=sees_images(candidate.model_id, candidate.options)[0],
        max_tool_iterations=config.defaults.max_tool_iterations,
        max_tokens=candidate.options.max_tokens or 4096,
        emit=emit,
        cancel=cancel,
        steer=steer,
        run_id=run_id,
    )
