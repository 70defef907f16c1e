"""Prompt caching: how much of each model request is a byte-identical prefix of the request before it.

A 20-turn direct conversation with the owner, one tool call per turn (the agent reads a file, then answers), the
clock a minute on for every message, through the whole bot (App, MemoryChannel, the real provider clients) against
the fake LLM on 127.0.0.1, for each provider kind: Anthropic, an OpenAI model (automatic prefix caching) and an
Anthropic model through an OpenAI-compatible endpoint such as OpenRouter (explicit markers). Each turn makes two
requests (`7a` asks, the model calls the tool; `7b` sends the result back). Per request it prints the body's
bytes, the share of them that is a byte-identical prefix of the previous request, and where the cache breakpoints
are (`system`, `tools`, `m<index>` for a message).

Run with `.venv/bin/python bench/prompt_cache.py [turns]`.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

# Run as a script, this file's folder comes first on sys.path and its name would shadow the package.
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from fakes.llm import FakeLLM, Reply, ToolCallSpec  # noqa: E402

from bot import App, parse_config  # noqa: E402
from channels import MemoryChannel  # noqa: E402

TURNS = 20
TARGET = 0.90  # from turn 2 on, at least this share of every request is the previous request's bytes
START = datetime(2026, 11, 25, 14, 3, tzinfo=UTC).timestamp()
KINDS = {  # label: (provider kind, model id)
    "anthropic": ("anthropic", "claude-sonnet-4-5"),
    "openai": ("openai", "gpt-4.1"),
    "openrouter-claude": ("openai", "anthropic/claude-sonnet-4.5"),
}


@dataclass(frozen=True)
class Row:
    """One request: which turn and call, its size, its share that repeats the previous request, its breakpoints."""

    label: str
    turn: int
    size: int
    shared: float
    breakpoints: list[str]


class _Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def common_prefix(before: bytes, after: bytes) -> int:
    """How many leading bytes two requests share."""
    differs = (index for index, (one, other) in enumerate(zip(before, after, strict=False)) if one != other)
    return next(differs, min(len(before), len(after)))


def breakpoints(body: dict[str, Any]) -> list[str]:
    """Where a request asks the provider to cache: its system prompt, its tools, or message number i."""
    found = []
    system = body.get("system")
    if isinstance(system, list) and any("cache_control" in block for block in system):
        found.append("system")
    if any("cache_control" in tool for tool in body.get("tools") or []):
        found.append("tools")
    for index, message in enumerate(body.get("messages") or []):
        content = message.get("content")
        if isinstance(content, list) and any(isinstance(p, dict) and "cache_control" in p for p in content):
            found.append("system" if message.get("role") == "system" else f"m{index}")
    return found


async def conversation(label: str, turns: int, folder: Path) -> list[Row]:
    """Run the conversation with the provider kind `label` names; one Row per request."""
    kind, model = KINDS[label]
    workspace = folder / label / "ws"
    (workspace / "main").mkdir(parents=True)
    (workspace / "main" / "notes.md").write_text("Shopping: milk, bread, coffee.\n")
    async with FakeLLM() as llm:
        base_url = llm.url if kind == "anthropic" else llm.openai_base_url
        config = {
            "defaults": {"model": f"fake/{model}", "workspace_root": str(workspace), "timezone": "UTC"},
            "providers": {"fake": {"kind": kind, "base_url": base_url, "api_key": "bench"}},
            "owners": ["memory:ann"],
        }
        for turn in range(1, turns + 1):
            call = ToolCallSpec("read", {"path": "notes.md"}, id=f"call_{turn}")
            llm.script(Reply.tool_calls(call), Reply.text(f"Your list for turn {turn}: milk, bread and coffee."))
        clock = _Clock(START)
        chat = MemoryChannel()
        app = App(parse_config(json.dumps(config)), folder / label / "state", adapters=[chat], clock=clock)
        async with app.running():
            for turn in range(1, turns + 1):
                await chat.say(f"Turn {turn}: what is on my shopping list?", sender="ann", sender_name="Ann")
                await chat.replies()
                clock.now += 60
        requests = list(llm.requests)
    rows = []
    for index, request in enumerate(requests):
        shared = common_prefix(requests[index - 1].raw, request.raw) / len(request.raw) if index else 0.0
        label_ = f"{index // 2 + 1}{'ab'[index % 2]}"
        rows.append(Row(label_, index // 2 + 1, len(request.raw), shared, breakpoints(request.body)))
    return rows


def report(label: str, rows: list[Row]) -> bool:
    """Print one provider kind's table; whether every request from turn 2 on met the target."""
    print(f"\n{label}: {KINDS[label][0]} protocol, model {KINDS[label][1]}")
    print(f"{'request':>7} {'bytes':>8} {'prefix of previous':>19}  breakpoints")
    for row in rows:
        share = f"{row.shared:.1%}" if row.label != "1a" else "-"
        print(f"{row.label:>7} {row.size:>8,} {share:>19}  {', '.join(row.breakpoints) or '-'}")
    later = [row.shared for row in rows if row.turn >= 2]
    met = bool(later) and min(later) >= TARGET
    worst = f"{min(later):.1%}" if later else "-"
    print(f"from turn 2 on: lowest share {worst} ({'meets' if met else 'MISSES'} the {TARGET:.0%} target)")
    return met


async def main(turns: int = TURNS) -> int:
    with tempfile.TemporaryDirectory() as folder:
        results = [report(label, await conversation(label, turns, Path(folder))) for label in KINDS]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else TURNS)))
