"""What agents and tools may know of a channel: its capabilities (the full adapter interface comes with the gateway)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

Markup = Literal["plain", "markdown", "telegram-html", "discord-markdown", "slack-mrkdwn"]


class Capabilities(BaseModel):
    """What a channel can show and do; the message tool's schema and the system prompt are built from it."""

    model_config = ConfigDict(frozen=True)

    buttons: bool = False
    edit: bool = False
    delete: bool = False
    reactions: bool = False
    threads: bool = False
    polls: bool = False
    max_text_length: int = 4000
    markup: Markup = "plain"
    streaming: bool = False


CONSOLE = Capabilities(max_text_length=1_000_000, markup="markdown", streaming=True)
