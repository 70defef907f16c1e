"""Tool calling for models without native tools: calls written as `<tool_call>` JSON in the answer text."""

from __future__ import annotations

import contextlib
import json
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field

from agent.messages import ToolCall
from agent.providers.base import ToolSpec

_THINK = re.compile(r"<think>.*?(</think>|\Z)", re.DOTALL | re.IGNORECASE)
_CALL = re.compile(r"<tool_call>(.*?)(</tool_call>|\Z)", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$")


def instructions(tools: Sequence[ToolSpec]) -> str:
    """The system-prompt section that teaches the format and lists each tool with its JSON Schema."""
    lines = [
        "## Calling tools",
        "To call a tool, write a block like this, with the arguments as a JSON object matching its schema:",
        '<tool_call>{"name": "TOOL_NAME", "arguments": {"param": "value"}}</tool_call>',
        "You may write several blocks in one answer. Then stop and wait: the results come back as "
        '<tool_result name="TOOL_NAME" status="ok|error"> blocks. Answer without any block when you are done.',
        "",
        "Available tools:",
    ]
    for tool in tools:
        schema = json.dumps(tool.parameters, ensure_ascii=False, separators=(",", ":"))
        lines.append(f"- {tool.name}: {tool.description}\n  parameters: {schema}")
    return "\n".join(lines)


@dataclass
class ParsedAnswer:
    """An answer split into what the user should see, the calls it makes, and the calls that were malformed."""

    text: str
    calls: list[ToolCall] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def parse_answer(text: str) -> ParsedAnswer:
    """Strip `<think>` blocks, pull out `<tool_call>` blocks; a malformed block becomes an error, never dropped."""
    without_thinking = _THINK.sub("", text)
    parsed = ParsedAnswer(text="")
    for number, match in enumerate(_CALL.finditer(without_thinking), start=1):
        body = _FENCE.sub("", match.group(1).strip())
        where = f"tool call #{number}"
        if not match.group(2):
            parsed.errors.append(f"{where} has no closing </tool_call>")
            continue
        try:
            data = json.loads(body)
        except json.JSONDecodeError as error:
            parsed.errors.append(f"{where} is not valid JSON ({error.msg} at column {error.colno}): {body[:200]}")
            continue
        if not isinstance(data, dict) or not isinstance(data.get("name"), str):
            parsed.errors.append(f'{where} must be an object with "name" and "arguments": {body[:200]}')
            continue
        arguments = data.get("arguments", {})
        if isinstance(arguments, str):  # some models double-encode
            with contextlib.suppress(json.JSONDecodeError):
                arguments = json.loads(arguments)
        call = ToolCall(id=f"xml_{secrets.token_hex(4)}", name=data["name"])
        if isinstance(arguments, dict):
            call.arguments = arguments
        else:
            call.arguments_error = f"arguments must be a JSON object, got {type(arguments).__name__}"
        parsed.calls.append(call)
    parsed.text = _CALL.sub("", without_thinking).strip()
    return parsed


def render_result(name: str, ok: bool, text: str) -> str:
    """One result block; a closing tag inside the result is defused so it cannot end the block early."""
    safe = re.sub(r"</\s*tool_result", "<\\/tool_result", text, flags=re.IGNORECASE)
    status = "ok" if ok else "error"
    return f'<tool_result name="{name}" status="{status}">\n{safe}\n</tool_result>'
