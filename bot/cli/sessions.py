"""`bot sessions list|show`: the owner's view of every agent's sessions and what was said in one, from the shell;
the same capped data the session tools read, shown with control and invisible characters escaped."""

from __future__ import annotations

import json
import sys
import unicodedata
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

import click

from bot.cli.common import CONFIG_OPTION, STATE_OPTION, load_or_exit, state_dir_for

if TYPE_CHECKING:
    from bot.scheduled.session_book import StoredSessions

__all__ = ["escaped", "sessions"]

_T = TypeVar("_T")
# Escaped in what is printed: controls (a terminal's escape sequences), format characters (bidi controls, zero-width
# ones), private use, surrogates, unassigned code points, line and paragraph separators.
_HIDDEN = frozenset({"Cc", "Cf", "Co", "Cs", "Cn", "Zl", "Zp"})
_KINDS = ("main", "direct", "group", "channel", "cron", "subagent", "other")  # tools.sessions.SESSION_KINDS


def escaped(text: str) -> str:
    """`text` safe for a terminal: every hidden character but newline and tab written as `\\xNN`, `\\uNNNN` or
    `\\UNNNNNNNN`."""
    parts: list[str] = []
    for char in text:
        if char in "\n\t" or unicodedata.category(char) not in _HIDDEN:
            parts.append(char)
        elif ord(char) < 0x100:
            parts.append(f"\\x{ord(char):02x}")
        elif ord(char) < 0x10000:
            parts.append(f"\\u{ord(char):04x}")
        else:
            parts.append(f"\\U{ord(char):08x}")
    return "".join(parts)


def _with_book(config_path: str, state_dir: str | None, use: Callable[[StoredSessions], Awaitable[_T]]) -> _T:
    import asyncio
    import time

    from bot.gateway.state import open_state, transcripts_for
    from bot.scheduled.session_book import StoredSessions

    config = load_or_exit(config_path)
    state = state_dir_for(config_path, state_dir)

    async def go() -> _T:
        store = await open_state(config, state)  # SQLite in `state`, or the PostgreSQL database of `state.url`
        try:
            return await use(StoredSessions(store, config, transcripts_for(config, store, state), time.time))
        finally:
            await store.close()

    try:
        return asyncio.run(go())
    except (ValueError, LookupError) as error:
        click.echo(f"bot sessions: {escaped(str(error))}", err=True)
        sys.exit(1)


@click.group()
def sessions() -> None:
    """Conversations: every agent's sessions, and what was said in one."""


@sessions.command("list")
@CONFIG_OPTION
@STATE_OPTION
@click.option("--agent", default=None, help="Only this agent's sessions.")
@click.option("--kind", "kinds", multiple=True, type=click.Choice(_KINDS), help="Only sessions of this kind (repeat).")
@click.option("--active", type=click.FloatRange(min=0, min_open=True), default=None, help="Used in the last MINUTES.")
@click.option("--limit", type=click.IntRange(1, 100), default=20, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="One JSON array of the sessions, as sessions_list shows them.")
def sessions_list(
    config_path: str,
    state_dir: str | None,
    agent: str | None,
    kinds: tuple[str, ...],
    active: float | None,
    limit: int,
    as_json: bool,
) -> None:
    """Show the latest sessions of every agent, newest first."""
    found = _with_book(
        config_path,
        state_dir,
        lambda book: book.sessions(None, kinds=list(kinds) or None, agent=agent, active_minutes=active, limit=limit),
    )
    if as_json:
        click.echo(json.dumps(found, indent=2, ensure_ascii=False))
        return
    if not found:
        click.echo("No sessions.")
    for session in found:
        tokens = session["tokens"]
        click.echo(
            escaped(
                f"{session['key']}  {session['kind']:<8} {session['updated']}  {session['model'] or '-'}"
                f"  {tokens['input']}/{tokens['output']} tokens  last chat {session['last_chat'] or '-'}"
            )
        )


@sessions.command("show")
@CONFIG_OPTION
@STATE_OPTION
@click.argument("session_key")
@click.option("--limit", type=click.IntRange(1, 100), default=20, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="One JSON object: the session and its messages.")
def sessions_show(config_path: str, state_dir: str | None, session_key: str, limit: int, as_json: bool) -> None:
    """Show the latest messages of the session SESSION_KEY (capped as sessions_history caps them)."""
    history = _with_book(config_path, state_dir, lambda book: book.read(None, session_key, limit=limit))
    if as_json:
        click.echo(json.dumps(history.model_dump(mode="json"), indent=2))  # ASCII: every hidden character escaped
        return
    click.echo(escaped(f"{history.session_key}  agent {history.agent}  {history.kind}"))
    for note in history.notes:
        click.echo(f"({note})")
    if not history.messages:
        click.echo("No messages.")
    for message in history.messages:
        # Continuation lines are indented, so that no message can pass for the start of another.
        body = escaped(message.text).replace("\n", "\n    ")
        click.echo(f"[{message.role}] {body}")
