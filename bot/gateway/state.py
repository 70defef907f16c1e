"""The state store a config asks for: `state.db` in the state directory (SQLite, the default), or the PostgreSQL
database of `state.url`. Every command that opens the state goes through here."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from agent.transcripts import FileTranscripts, Transcripts
from bot.store import Clock, Store

if TYPE_CHECKING:
    from bot.config.settings import Config

__all__ = ["open_state", "transcripts_for"]


async def open_state(config: Config, state_dir: Path, *, clock: Clock = time.time) -> Store:
    """Open (creating or migrating) the store `config.state` names; StoreError when it cannot be used."""
    if config.state.backend == "postgres":
        from bot.store.postgres import PostgresStore  # psycopg, only for a config that asks for it

        assert config.state.url is not None  # StateConfig requires it
        return await PostgresStore.open(config.state.url, clock=clock)
    from bot.store import SqliteStore

    state_dir.mkdir(parents=True, exist_ok=True)
    return await SqliteStore.open(state_dir, clock=clock)


def transcripts_for(config: Config, store: Store, state_dir: Path) -> Transcripts:
    """Where the transcripts of `store`'s sessions are kept: beside the sessions in PostgreSQL (`state.backend:
    postgres`, `store` from open_state), else as files in `state_dir`."""
    if config.state.backend == "postgres":
        from bot.store.postgres import PostgresStore
        from bot.store.postgres.transcripts import PgTranscripts

        assert isinstance(store, PostgresStore)  # open_state opened it
        return PgTranscripts(store.db)
    return FileTranscripts(state_dir)
