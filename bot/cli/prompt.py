"""`bot prompt`: the system prompt and the tool schemas exactly as a run under `bot run` would send them to the model
(the tools only the running gateway adds included, and named)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from agent.loop import Dispatch, Turn, build_request
from agent.messages import Message
from agent.prompt import read_bootstrap
from agent.providers.config import sees_images
from bot.app import App
from bot.cli.gateway_tools import ONLY_UNDER_RUN_NOTE, gateway_only, gateway_registry
from bot.runs.assemble import SetupError, choose_model, model_refs, policy_for, system_prompt
from channels.base import CONSOLE, OWNERS, Capabilities

# Previewing needs the provider's kind and model options, not its key: pretend every well-known key is set.
_ANY_KEY = {name: "(preview)" for name in ("OPENROUTER_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_API_KEY")}


async def preview(app: App, agent: str, channel: str) -> str:
    """Render what the model receives for a direct message from an owner on `channel` under `bot run`."""
    config = app.config
    notes: list[str] = []
    model: str | None = None
    try:
        model = model_refs(config, agent)[0]
        choice = choose_model(config, model, environ=_ANY_KEY)
    except SetupError as error:
        notes.append(f"# {error}; showing the OpenAI-compatible form")
        choice = None
    capabilities = CONSOLE if channel == "console" else Capabilities()
    key = f"agent:{agent}:main"
    run = app.decisions.run_info(agent, key, channel=channel, principal=OWNERS, capabilities=capabilities, model=model)
    run = run.model_copy(update={"skills": (await asyncio.to_thread(app.skills, agent)).eligible})
    policy = policy_for(config, gateway_registry(app), run)
    bootstrap = await read_bootstrap(Path(run.workspace) if run.workspace else None)
    if choice is None:
        from agent.providers.config import ProviderConfig

        provider = app.build_provider("preview", ProviderConfig(kind="openai", base_url="http://127.0.0.1"))
        dispatch: Dispatch = "native"
        model_id = "-"
    else:
        provider = app.build_provider(choice.provider_name, choice.provider)
        dispatch = choice.options.tool_dispatch
        model_id = choice.model_id
    try:
        turn = Turn(
            provider=provider,
            model=model_id,
            system=system_prompt(run, policy, is_group=False, bootstrap=bootstrap),
            run=run,
            tools=policy.kept,
            dispatch=dispatch,
        )
        no_messages: list[Message] = []
        request = build_request(turn, dispatch, no_messages)
    finally:
        await provider.aclose()
    dialect = provider.dialect(model_id)
    lines = [*notes, f"# agent {agent}, model {model or '(none)'}, {dispatch} tool calls, {dialect} schemas"]
    only = gateway_only(app)
    if kept := [tool.name for tool in policy.kept if tool.name in only]:
        lines.append(f"# tools {ONLY_UNDER_RUN_NOTE}: {', '.join(kept)}")
    if choice is not None:
        sees, why = sees_images(choice.model_id, choice.options)
        lines.append(f"# images: {'shown to the model' if sees else 'named only, not shown'} ({why})")
    lines += ["=== system ===", request.system, f"=== tools ({len(request.tools)}) ==="]
    lines += [json.dumps(spec.model_dump(), ensure_ascii=False, indent=2) for spec in request.tools]
    return "\n".join(lines) + "\n"
