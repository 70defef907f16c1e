"""What a turn costs (issue 14): each request starts with the bytes of the one before, so a provider can serve the
prefix from its cache; the clock and the sender travel on each message instead of in the system prompt; the
cache figures the provider reports reach `/status`."""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from configs import config_of
from fakes.llm import FakeLLM, RecordedRequest, Reply, ToolCallSpec
from helpers import FakeClock

from bot import App, Config, ConfigError, parse_config
from channels import AccountSettings, MemoryChannel
from routing import Peer
from tools.fs import ReadTool

WED_14_03 = datetime(2026, 11, 25, 14, 3, 27, tzinfo=UTC).timestamp()
GROUP = Peer("group", "-100")


def config(
    llm: FakeLLM, tmp_path: Path, kind: str = "openai", *, agents: list[dict[str, Any]] | None = None, **settings: Any
) -> Config:
    """A bot on the fake LLM with `ann` as its owner; `settings` go to `defaults`, except `models` (the provider's)."""
    base_url = llm.openai_base_url if kind == "openai" else llm.url
    provider = {"providers": {"fake": {"kind": kind, "models": settings.pop("models", {})}}}
    return config_of(tmp_path, base_url, provider, defaults=settings, owners=["memory:ann"], agents=agents or [])


@pytest.fixture
def chat() -> MemoryChannel:
    """A chat where anyone may write, in direct chats and in groups without mentioning the bot."""
    return MemoryChannel(settings=AccountSettings(dm_policy="open", group_policy="open", require_mention=False))


async def serve(app: App, chat: MemoryChannel, *said: tuple[str, str, Peer | None], clock: FakeClock) -> None:
    """Say each (text, sender, peer) one minute after the one before, each answered before the next."""
    async with app.running():
        for text, sender, peer in said:
            await chat.say(text, sender=sender, sender_name=sender.title(), peer=peer)
            await chat.replies()
            clock.advance(60)


def user_text(request: RecordedRequest) -> str:
    content = request.body["messages"][-1]["content"]
    return content if isinstance(content, str) else "".join(part.get("text", "") for part in content)


def system_text(request: RecordedRequest) -> str:
    body = request.body
    if "system" in body:
        system = body["system"]
        return system if isinstance(system, str) else "".join(block["text"] for block in system)
    return str(body["messages"][0]["content"])


async def test_a_dm_starts_with_when_it_was_sent_and_the_prompt_names_only_the_zone(
    fake_llm: FakeLLM, chat: MemoryChannel, tmp_path: Path
) -> None:
    fake_llm.script(Reply.text("Morning!"))
    clock = FakeClock(WED_14_03)
    app = App((config(fake_llm, tmp_path, timezone="UTC")), tmp_path / "state", adapters=[chat], clock=clock)
    await serve(app, chat, ("good morning", "ann", None), clock=clock)

    [request] = fake_llm.requests
    assert user_text(request) == "[Wed 2026-11-25 14:03 UTC] good morning"
    system = system_text(request)
    assert "Times are in the UTC time zone." in system
    assert "2026-11-25" not in system and "14:03" not in system and "Wednesday" not in system


async def test_an_agent_s_time_zone_writes_its_stamps(fake_llm: FakeLLM, chat: MemoryChannel, tmp_path: Path) -> None:
    fake_llm.script(Reply.text("Guten Tag!"))
    clock = FakeClock(WED_14_03)
    parsed = config(fake_llm, tmp_path, timezone="UTC", agents=[{"id": "main", "timezone": "Europe/Berlin"}])
    app = App(parsed, tmp_path / "state", adapters=[chat], clock=clock)
    await serve(app, chat, ("hallo", "ann", None), clock=clock)

    [request] = fake_llm.requests
    assert user_text(request) == "[Wed 2026-11-25 15:03 CET] hallo"
    assert "Times are in the Europe/Berlin time zone." in system_text(request)


def test_an_unknown_time_zone_is_a_config_error_naming_its_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config("defaults:\n  model: fake/m\n  timezone: Europe/Berln\n", "bindings.yaml")
    message = str(caught.value)
    assert "bindings.yaml:3" in message and "defaults.timezone" in message and "Europe/Berlin" in message


async def test_group_lines_name_each_sender_and_mark_owners_while_the_system_prompt_stays_the_same(
    fake_llm: FakeLLM, chat: MemoryChannel, tmp_path: Path
) -> None:
    fake_llm.script(Reply.text("Hi Ann."), Reply.text("Hi Bo."), Reply.text("Hi again."))
    clock = FakeClock(WED_14_03)
    app = App((config(fake_llm, tmp_path, timezone="UTC")), tmp_path / "state", adapters=[chat], clock=clock)
    said = [("hello", "ann", GROUP), ("hey there", "bo", GROUP), ("me again", "ann", GROUP)]
    await serve(app, chat, *said, clock=clock)

    first, second, third = fake_llm.requests
    assert user_text(first) == '[Wed 2026-11-25 14:03 UTC] "Ann" (owner): hello'
    assert user_text(second) == '[Wed 2026-11-25 14:04 UTC] "Bo": hey there'
    assert system_text(first) == system_text(third)
    # A non-owner's run works in their own folder (`memory.scope: sender`): the one line that differs.
    workspace = tmp_path / "ws" / "main"
    assert system_text(second).replace(str(workspace / "senders" / "memory-bo"), str(workspace)) == system_text(first)


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_each_request_starts_with_the_bytes_of_the_one_before(
    fake_llm: FakeLLM, chat: MemoryChannel, tmp_path: Path, kind: str
) -> None:
    # Three turns with a tool call each: six requests, the clock a minute on for every message.
    (tmp_path / "ws" / "main").mkdir(parents=True)
    (tmp_path / "ws" / "main" / "notes.md").write_text("Buy milk.")
    read = ToolCallSpec("read", {"path": "notes.md"})
    for answer in ("Milk.", "Still milk.", "Yes, milk."):
        fake_llm.script(Reply.tool_calls(read), Reply.text(answer))
    clock = FakeClock(WED_14_03)
    app = App((config(fake_llm, tmp_path, kind)), tmp_path / "state", adapters=[chat], clock=clock)
    said = [("what is on my list?", "ann", None), ("and now?", "ann", None), ("sure?", "ann", None)]
    await serve(app, chat, *said, clock=clock)

    bodies = [request.raw for request in fake_llm.requests]
    assert len(bodies) == 6
    for before, after in itertools.pairwise(bodies):
        kept = history_end(before, kind)
        assert after.startswith(kept), f"{kept[-200:]!r}\n is not where\n{after[len(kept) - 200 : len(kept)]!r}"


def history_end(raw: bytes, kind: str) -> bytes:
    """The bytes of a request up to the end of its history: without the closing brackets of the messages list and
    the body, and for Anthropic without the cache marker on the last message, which moves on to the newest one."""
    body = raw.removesuffix(b"]}")
    marker = b',"cache_control":{"type":"ephemeral"}'
    if kind == "anthropic":
        assert marker in body[-200:], "the last message carries a cache breakpoint"
        body = body[: body.rindex(marker)]
    return body


async def test_status_shows_the_cache_figures_the_provider_reported(
    fake_llm: FakeLLM, chat: MemoryChannel, tmp_path: Path
) -> None:
    fake_llm.script(
        Reply.text("One.", usage=(2000, 10), cache_write=1800), Reply.text("Two.", usage=(2100, 12), cache_read=1800)
    )
    clock = FakeClock(WED_14_03)
    app = App((config(fake_llm, tmp_path, "anthropic")), tmp_path / "state", adapters=[chat], clock=clock)
    async with app.running():
        for text in ("one", "two", "/status"):
            await chat.say(text, sender="ann")
            [reply] = await chat.replies()
    assert "Tokens used: 4,100 in, 22 out; cache: 1,800 read (44% hit rate), 1,800 written" in reply.text
    markers = [json.dumps(request.body).count('"cache_control"') for request in fake_llm.requests]
    assert markers == [2, 2]  # the tools and system prompt, and the newest message


@pytest.mark.parametrize("dispatch", ["native", "xml"])
async def test_each_tool_s_description_reaches_the_model_once(
    fake_llm: FakeLLM, chat: MemoryChannel, tmp_path: Path, dispatch: str
) -> None:
    fake_llm.script(Reply.text("Hello."))
    parsed = config(fake_llm, tmp_path, models={"m": {"tool_dispatch": dispatch}})
    clock = FakeClock(WED_14_03)
    app = App(parsed, tmp_path / "state", adapters=[chat], clock=clock)
    await serve(app, chat, ("hi", "ann", None), clock=clock)

    [request] = fake_llm.requests
    described = ReadTool.description
    in_schemas = [tool["function"]["description"] for tool in request.body.get("tools", [])].count(described)
    in_prompt = system_text(request).count(described)
    assert (in_schemas, in_prompt) == ((1, 0) if dispatch == "native" else (0, 1))
    assert ("parameters: {" in system_text(request)) == (dispatch == "xml")
