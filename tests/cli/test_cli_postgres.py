"""The owners' commands work on the state the bot keeps: with `state: {backend: postgres}` that is the database, for
every process of a cluster at once, and no state.db is made beside the config."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from click.testing import CliRunner
from configs import config_dict

from bot.cli.main import cli
from bot.store import ApprovalRecord, PairingRecord
from bot.store.postgres import PostgresStore


def bindings(tmp_path: Path, url: str) -> Path:
    path = tmp_path / "bindings.yaml"
    config = config_dict(tmp_path, "http://127.0.0.1:9/v1", state={"backend": "postgres", "url": url})  # no model call
    path.write_text(json.dumps(config))
    return path


async def allowed(url: str) -> bool:
    async with await PostgresStore.open(url) as store:
        return await store.is_allowed_sender("telegram", "main", "77")


def test_pairing_is_listed_approved_and_revoked_in_the_database(tmp_path: Path, postgres_url: str) -> None:
    config = str(bindings(tmp_path, postgres_url))

    async def ask() -> PairingRecord:
        async with await PostgresStore.open(postgres_url) as store:
            return await store.request_pairing("telegram", "main", "77", "Stranger", ttl=3600, max_pending=3)

    request = asyncio.run(ask())

    listed = CliRunner().invoke(cli, ["pairing", "list", "--config", config])
    assert listed.exit_code == 0, listed.output
    assert f"telegram/main  {request.code}  Stranger (77)" in listed.output

    approved = CliRunner().invoke(cli, ["pairing", "approve", "telegram", request.code, "--config", config])
    assert approved.exit_code == 0 and "Approved Stranger: the bot tells them" in approved.output
    assert asyncio.run(allowed(postgres_url))

    async def unsent() -> list[str]:
        async with await PostgresStore.open(postgres_url) as store:
            return [
                record.payload["text"] for record in await store.unsent_outbox() if record.target["peer"]["id"] == "77"
            ]

    assert asyncio.run(unsent()) == ["You're approved: I'm listening now."]  # for the bot that serves telegram/main

    revoked = CliRunner().invoke(cli, ["pairing", "revoke", "telegram", "77", "--config", config])
    assert revoked.exit_code == 0, revoked.output
    assert not asyncio.run(allowed(postgres_url))
    assert not (tmp_path / "state").exists()  # nothing went to SQLite


def test_an_approval_waiting_in_the_database_is_listed_and_decided(tmp_path: Path, postgres_url: str) -> None:
    config = str(bindings(tmp_path, postgres_url))

    async def ask() -> None:
        async with await PostgresStore.open(postgres_url) as store:
            now = store.db.clock()
            await store.create_approval(
                ApprovalRecord(
                    id="abc123", agent="main", session_key="agent:main:main", command="rm -rf build", cwd="/tmp",
                    approvers=["telegram:1"], created=now, expires=now + 600, status="pending",
                )
            )  # fmt: skip

    async def decided() -> ApprovalRecord | None:
        async with await PostgresStore.open(postgres_url) as store:
            return await store.get_approval("abc123")

    asyncio.run(ask())

    listed = CliRunner().invoke(cli, ["approvals", "list", "--config", config])
    assert listed.exit_code == 0 and "abc123  pending" in listed.output and "rm -rf build" in listed.output
    denied = CliRunner().invoke(cli, ["approvals", "deny", "abc1", "--config", config])
    assert denied.exit_code == 0, denied.output
    record = asyncio.run(decided())
    assert record is not None and (record.status, record.decided_by) == ("denied", "cli")
    assert CliRunner().invoke(cli, ["cron", "list", "--config", config]).exit_code == 0
    assert not (tmp_path / "state").exists()
