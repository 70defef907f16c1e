"""Block Kit for a message: its text as section blocks and its buttons as actions blocks, within Slack's limits."""

from __future__ import annotations

import logging
from typing import Any

from channels.base import Button

log = logging.getLogger("channels.slack")  # one logger for the channel, whichever module logs

MAX_BLOCKS = 50
MAX_SECTION_TEXT = 3000
MAX_ACTIONS_PER_BLOCK = 25
MAX_BUTTON_LABEL = 75
MAX_BUTTON_VALUE = 2000


def _button(button: Button, row: int, column: int) -> dict[str, Any]:
    label = button.label if len(button.label) <= MAX_BUTTON_LABEL else button.label[: MAX_BUTTON_LABEL - 1] + "…"
    if len(button.value) > MAX_BUTTON_VALUE:
        raise ValueError(f"button value is {len(button.value)} characters; Slack allows {MAX_BUTTON_VALUE}")
    element: dict[str, Any] = {
        "type": "button",
        "action_id": f"sb:{row}:{column}",  # unique within the message, as Slack requires
        "text": {"type": "plain_text", "text": label or " ", "emoji": True},
        "value": button.value,
    }
    # Slack has two styles; "success" reads as the affirmative one, "secondary" is the default look.
    style = {"primary": "primary", "success": "primary", "danger": "danger"}.get(button.style)
    if style:
        element["style"] = style
    return element


def build_blocks(mrkdwn: str, buttons: list[list[Button]]) -> list[dict[str, Any]]:
    """Section blocks for the text (≤3000 characters each) and one actions block per button row, never more than
    50 blocks: rows are packed together (25 buttons a block) when there are too many, and what still does not fit
    is dropped with a warning."""
    sections = [
        {"type": "section", "text": {"type": "mrkdwn", "text": mrkdwn[start : start + MAX_SECTION_TEXT]}}
        for start in range(0, len(mrkdwn), MAX_SECTION_TEXT)
        if mrkdwn[start : start + MAX_SECTION_TEXT].strip()
    ]
    rows = [[_button(button, r, c) for c, button in enumerate(row)] for r, row in enumerate(buttons) if row]
    actions = [row[start : start + MAX_ACTIONS_PER_BLOCK] for row in rows for start in range(0, len(row), 25)]
    if len(sections) + len(actions) > MAX_BLOCKS:
        flat = [element for row in rows for element in row]
        actions = [flat[start : start + MAX_ACTIONS_PER_BLOCK] for start in range(0, len(flat), MAX_ACTIONS_PER_BLOCK)]
    room = MAX_BLOCKS - len(actions)
    if room < 1 or len(sections) > room:
        log.warning("slack: a message with %d text and %d button blocks cut to %d", len(sections), len(actions), 50)
        actions = actions[: MAX_BLOCKS - 1]
        sections = sections[: MAX_BLOCKS - len(actions)]
    return [*sections, *({"type": "actions", "elements": elements} for elements in actions)]
