"""`bot chat`, run as a real subprocess against the fake LLM server, for both provider kinds."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
from configs import config_dict
from fakes.llm import FakeLLM, Reply, ToolCallSpec
from helpers import eventually, unstamped

KINDS = ["openai", "anthropic"]
SECRET = "sk-test-0123456789abcdef"


def write_config(path: Path, llm: FakeLLM, kind: str, **extra: Any) -> Path:
    base_url = llm.openai_base_url if kind == "openai" else llm.url
    provider = {"providers": {"fake": {"kind": kind, "api_key": SECRET, "timeout_seconds": 60}}}
    config = config_dict(path, base_url, provider, defaults={"model": "fake/model-a"}) | extra  # `extra` replaces
    file = path / "bindings.yaml"
    file.write_text(json.dumps(config))  # JSON is YAML
    return file


async def bot(*args: str, stdin: str | None = None, cwd: Path | None = None) -> tuple[int, str, str]:
    env = {key: value for key, value in os.environ.items() if not key.endswith("_API_KEY")}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot",
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=cwd,
        env=env,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(stdin.encode() if stdin else None), timeout=60)
    finally:
        if process.returncode is None:  # only when something hung: the test does not leave it running
            process.kill()
            await process.wait()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def user_texts(body: dict[str, Any]) -> list[str]:
    """Every user-authored text in a request body, in order, for either wire format."""
    texts = []
    for message in body["messages"]:
        if message["role"] != "user":
            continue
        content = message["content"]
        if isinstance(content, str):
            texts.append(unstamped(content))
        else:
            texts += [unstamped(block["text"]) for block in content if block.get("type") == "text"]
    return texts


def system_text(body: dict[str, Any]) -> str:
    if "system" in body:
        return "".join(block["text"] for block in body["system"])
    return str(next(message["content"] for message in body["messages"] if message["role"] == "system"))


@pytest.mark.parametrize("kind", KINDS)
async def test_one_message_prints_the_answer(tmp_path: Path, fake_llm: FakeLLM, kind: str) -> None:
    config = write_config(tmp_path, fake_llm, kind)
    fake_llm.script("Hello from the fake model!")
    code, out, err = await bot("chat", "--config", str(config), "-m", "hi there")
    assert (code, out) == (0, "Hello from the fake model!\n"), err
    body = fake_llm.requests[0].body
    assert body["model"] == "model-a"
    assert body["stream"] is True
    assert user_texts(body) == ["hi there"]
    assert "You are main" in system_text(body)
    names = [tool["name"] if kind == "anthropic" else tool["function"]["name"] for tool in body["tools"]]
    # no `message` (no chat to send to from the terminal), no `web_search` (no BRAVE_API_KEY)
    assert names == sorted([
        "session_status", "exec", "process", "read", "write", "edit", "ls", "find", "grep",
        "web_fetch", "memory_write", "memory_search", "memory_get",
    ])  # fmt: skip


@pytest.mark.parametrize("kind", KINDS)
async def test_the_conversation_is_kept_between_invocations(tmp_path: Path, fake_llm: FakeLLM, kind: str) -> None:
    config = write_config(tmp_path, fake_llm, kind)
    fake_llm.script("First answer.", "Second answer.")
    assert (await bot("chat", "--config", str(config), "-m", "one"))[:2] == (0, "First answer.\n")
    assert (await bot("chat", "--config", str(config), "-m", "two"))[:2] == (0, "Second answer.\n")
    second = fake_llm.requests[1].body
    assert user_texts(second) == ["one", "two"]
    assert any(message["role"] == "assistant" for message in second["messages"])
    transcripts = list((tmp_path / "state" / "transcripts").glob("*.jsonl"))
    assert len(transcripts) == 1
    assert len(transcripts[0].read_text().splitlines()) == 4


@pytest.mark.parametrize("kind", KINDS)
async def test_a_tool_call_runs_and_its_result_reaches_the_model(tmp_path: Path, fake_llm: FakeLLM, kind: str) -> None:
    config = write_config(tmp_path, fake_llm, kind)
    fake_llm.script(Reply.tool_calls(ToolCallSpec("session_status", {}, id="call_1")), "You are in a console session.")
    code, out, err = await bot("chat", "--config", str(config), "-m", "where am I?")
    assert (code, out) == (0, "You are in a console session.\n"), err
    sent_back = json.dumps(fake_llm.requests[1].body["messages"])
    assert "agent:main:console:direct:" in sent_back
    assert "call_1" in sent_back


@pytest.mark.parametrize("kind", KINDS)
async def test_a_provider_failure_exits_1_with_one_line_and_no_key(
    tmp_path: Path, fake_llm: FakeLLM, kind: str
) -> None:
    config = write_config(tmp_path, fake_llm, kind)
    fake_llm.script(Reply.error(401, message=f"invalid key {SECRET}"))
    code, out, err = await bot("chat", "--config", str(config), "-m", "hi")
    assert code == 1
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith("bot chat: Sorry")
    assert "fake/model-a key #0: auth: " in err
    assert SECRET not in err


async def test_a_fallback_model_answers_when_the_first_fails(tmp_path: Path, fake_llm: FakeLLM) -> None:
    config = write_config(tmp_path, fake_llm, "openai")
    text = config.read_text().replace(
        '"model": "fake/model-a"', '"model": "fake/model-a", "fallbacks": ["fake/model-b"]'
    )
    config.write_text(text)
    fake_llm.script(Reply.error(500), Reply.error(502), "Answer from model b.")
    code, out, err = await bot("chat", "--config", str(config), "-m", "hi")
    assert (code, out) == (0, "Answer from model b.\n"), err
    # a server error is retried once on the same model, then the fallback answers
    assert [request.body["model"] for request in fake_llm.requests] == ["model-a", "model-a", "model-b"]


async def test_no_reply_prints_nothing(tmp_path: Path, fake_llm: FakeLLM) -> None:
    config = write_config(tmp_path, fake_llm, "anthropic")
    fake_llm.script("NO_REPLY")
    assert await bot("chat", "--config", str(config), "-m", "ok") == (0, "", "")


async def test_a_missing_provider_says_how_to_configure_it(tmp_path: Path) -> None:
    config = tmp_path / "bindings.yaml"
    config.write_text("defaults: {model: openrouter/anthropic/claude-sonnet-4}\n")
    code, out, err = await bot("chat", "--config", str(config), "-m", "hi")
    assert (code, out) == (1, "")
    assert "OPENROUTER_API_KEY" in err


async def test_an_unknown_agent_is_a_usage_error(tmp_path: Path, fake_llm: FakeLLM) -> None:
    config = write_config(tmp_path, fake_llm, "openai")
    code, _, err = await bot("chat", "--config", str(config), "--agent", "nobody", "-m", "hi")
    assert code == 2
    assert "no agent 'nobody'" in err


async def test_interactive_chat_streams_answers_and_keeps_context(tmp_path: Path, fake_llm: FakeLLM) -> None:
    config = write_config(tmp_path, fake_llm, "openai")
    fake_llm.script("Streamed answer one.", "Answer two.")
    code, out, err = await bot("chat", "--config", str(config), stdin="first\nsecond\n/exit\n")
    assert code == 0, err
    assert "Streamed answer one." in out
    assert "Answer two." in out
    assert user_texts(fake_llm.requests[1].body) == ["first", "second"]
    assert "Chatting with main" in err


async def test_bot_tools_lists_kept_and_removed_tools(tmp_path: Path) -> None:
    config = tmp_path / "bindings.yaml"
    config.write_text(
        "agents: [{id: main}, {id: quiet, tools: {profile: minimal, deny: [session_status]}}]\n"
        "tools: {by_group: {'telegram:group:*': {deny: [session_*]}}}\n"
    )
    code, out, _ = await bot("tools", "--config", str(config), "--agent", "main")
    assert code == 0
    assert "session_status" in out.split("removed")[0]
    code, out, _ = await bot("tools", "--config", str(config), "--agent", "quiet")
    assert code == 0
    assert "kept (0)" in out
    assert "session_status" in out and "agent" in out.split("removed")[1]
    code, out, _ = await bot("tools", "--config", str(config), "--channel", "telegram", "--peer", "group:-100")
    assert "kept (19):\n  message *\n  exec\n  process\n  read" in out
    assert "session_status  group" in out.split("removed")[1]


GATEWAY_TOOLS = ["cron", "sessions_list", "sessions_history", "sessions_spawn", "sessions_send", "subagents"]


async def test_bot_tools_and_bot_prompt_list_the_gateways_tools_and_bot_chat_says_it_lacks_them(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    config = write_config(tmp_path, fake_llm, "openai")
    code, out, err = await bot("tools", "--config", str(config))
    assert code == 0, err
    kept = out.split("kept (")[1].split("\n* ")[0].splitlines()[1:]
    marked = [line.split()[0] for line in kept if line.endswith(" *")]
    assert marked == ["message", *GATEWAY_TOOLS]  # what a run under `bot run` gets beyond `bot chat`'s
    assert (
        f"only under `bot run`, not in `bot chat` (the running gateway adds them): message, {', '.join(GATEWAY_TOOLS)}"
        in out
    )

    code, out, err = await bot("prompt", "--config", str(config))
    assert code == 0, err
    names = re.findall(r'^  "name": "(\w+)",$', out.split("=== tools")[1], re.MULTILINE)
    assert set(GATEWAY_TOOLS) <= set(names)  # the schemas the model gets under `bot run`
    assert "# tools only under `bot run`, not in `bot chat`" in out

    fake_llm.script("Hello.")
    code, _, err = await bot("chat", "--config", str(config), stdin="hi\n/help\n/exit\n")
    assert code == 0, err
    said = "Here the agent has no message, cron, sessions_list"
    assert err.count(said) == 2  # in the greeting and in /help
    sent = [tool["function"]["name"] for tool in fake_llm.requests[0].body["tools"]]
    assert not set(GATEWAY_TOOLS) & set(sent) and "read" in sent  # and it is so: the model was offered none
    assert len(fake_llm.requests) == 1  # /help went to nobody but the console


def rows(text: str) -> list[str]:
    """The lines of `text`, each with its runs of spaces (column padding) made one."""
    return [" ".join(line.split()) for line in text.splitlines()]


async def test_bot_tools_explain_shows_the_non_owner_and_subagent_lists_merged_with_their_defaults(
    tmp_path: Path,
) -> None:
    config = tmp_path / "bindings.yaml"
    config.write_text(
        "tools:\n  non_owner: {allow: [cron, write], deny: [web_fetch]}\n  subagent: {only: [read, cron]}\n"
    )
    code, plain, _ = await bot("tools", "--config", str(config), "--not-owner")
    assert code == 0
    assert "merged with its default" not in plain and "write" in plain.split("removed")[0]
    code, out, err = await bot("tools", "--config", str(config), "--not-owner", "--explain")
    assert code == 0, err
    run, layers = out.split("tools.non_owner (runs started by anyone not in owners), merged with its default:\n")
    non_owner, subagent = layers.split("tools.subagent (runs of a child sessions_spawn started), merged with its")
    kept, removed = run.split("removed (")
    assert "write tools.non_owner.allow 'write' lifts tools.non_owner default 'write'" in rows(kept)
    assert "read" in rows(kept)  # what the default gives non-owners stays
    assert {
        "exec non_owner denied by tools.non_owner default 'group:runtime'",
        "edit non_owner denied by tools.non_owner default 'edit'",
        "web_fetch non_owner denied by tools.non_owner.deny 'web_fetch'",
    } <= set(rows(removed))
    assert rows(non_owner)[:3] == [
        "denies: group:runtime, write, edit, memory_write, group:mcp, group:automation, group:sessions (default); "
        "web_fetch (tools.non_owner.deny)",
        "except: cron, write (tools.non_owner.allow)",
        "only: (no limit)",
    ]
    # cron and the session tools exist only in a running gateway: what the layer does to them shows all the same
    assert {
        "cron kept tools.non_owner.allow 'cron' lifts tools.non_owner default 'group:automation'",
        "sessions_send removed denied by tools.non_owner default 'group:sessions'",
    } <= set(rows(non_owner))
    assert rows(subagent)[1:4] == [
        "denies: group:automation (default)",
        "except: (nothing)",
        "only: read, cron (tools.subagent.only)",
    ]
    assert {
        "read kept tools.subagent.only has 'read'",
        "exec removed not in tools.subagent.only",
        "cron removed denied by tools.subagent default 'group:automation'",
    } <= set(rows(subagent))


async def test_bot_prompt_prints_the_system_prompt_and_tool_schemas(tmp_path: Path, fake_llm: FakeLLM) -> None:
    config = write_config(tmp_path, fake_llm, "anthropic")
    (tmp_path / "ws" / "main").mkdir(parents=True)
    (tmp_path / "ws" / "main" / "SOUL.md").write_text("Speak like a lighthouse keeper.")
    code, out, err = await bot("prompt", "--config", str(config))
    assert code == 0, err
    assert "=== system ===" in out
    assert "## SOUL.md\nSpeak like a lighthouse keeper." in out
    assert "anthropic schemas" in out
    assert '"name": "session_status"' in out
    assert "# images: named only, not shown (the default for its name" in out  # "model-a" is no vision family
    assert fake_llm.requests == []


async def test_bot_prompt_and_bot_chat_say_when_a_model_is_shown_images(tmp_path: Path, fake_llm: FakeLLM) -> None:
    config = write_config(tmp_path, fake_llm, "openai", providers={"fake": {
        "kind": "openai", "base_url": fake_llm.openai_base_url, "models": {"model-a": {"input": ["text", "image"]}},
    }})  # fmt: skip
    code, out, err = await bot("prompt", "--config", str(config))
    assert code == 0, err
    assert "# images: shown to the model (its input setting)" in out
    code, _, err = await bot("chat", "--config", str(config), stdin="/exit\n")
    assert code == 0, err
    assert "fake/model-a is shown images (its input setting)" in err


async def test_new_starts_a_fresh_conversation_and_keeps_the_old_transcript(tmp_path: Path, fake_llm: FakeLLM) -> None:
    config = write_config(tmp_path, fake_llm, "anthropic")
    fake_llm.script("One.", "Two.")
    code, _, err = await bot("chat", "--config", str(config), stdin="first\n/new\nsecond\n/exit\n")
    assert code == 0, err
    assert "(new conversation)" in err
    assert user_texts(fake_llm.requests[1].body) == ["second"]
    assert len(list((tmp_path / "state" / "transcripts").glob("*.jsonl"))) == 2


async def test_the_chats_session_commands_work_in_the_console_from_the_same_table(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    extra = {"agents": [{"id": "main", "default": True, "models": ["fake/model-b"]}]}
    config = write_config(tmp_path, fake_llm, "openai", **extra)
    fake_llm.script(Reply.text("Hello.", usage=(40, 5)), "Answered by b.")
    typed = "hi\n/model fake/model-b\n/think high\n/status\n/usage\n/queue steer\n/stop\nagain\n/help\n/exit\n"
    code, _, err = await bot("chat", "--config", str(config), stdin=typed)
    assert code == 0, err
    assert "This conversation now uses fake/model-b" in err  # the same /model as in a chat: the owner may
    assert "Thinking in this conversation: high." in err
    assert "Tokens used: 40 in, 5 out" in err  # /status
    assert "This conversation's settings: model fake/model-b, thinking high" in err
    assert "This conversation: " in err and "all conversations: " in err  # /usage, with the owner's day total
    assert "queue modes are for the chats" in err and "Nothing was running." in err
    assert "/think [off|low|medium|high|default]" in err  # /help: the one command table's text
    assert fake_llm.requests[-1].body["model"] == "model-b"  # the switch held for the next turn
    assert fake_llm.requests[-1].body.get("reasoning_effort") == "high"
    one = await bot("chat", "--config", str(config), "-m", "/model")  # and with -m
    assert one[0] == 0 and "fake/model-b (current: this conversation's choice)" in one[1]


async def test_a_risky_command_in_the_terminal_without_a_tty_is_denied(tmp_path: Path, fake_llm: FakeLLM) -> None:
    config = write_config(tmp_path, fake_llm, "openai")
    fake_llm.script(Reply.tool_calls(ToolCallSpec("exec", {"command": "touch never.txt"})), "I could not.")
    code, out, err = await bot("chat", "--config", str(config), "-m", "make a file")
    assert code == 0, err
    assert out.strip() == "I could not."
    result = json.loads(fake_llm.requests[1].body["messages"][-1]["content"])
    assert result["status"] == "denied" and "no terminal" in result["reason"]
    assert not (tmp_path / "ws" / "main" / "never.txt").exists()


async def test_a_safe_command_runs_in_the_workspace_without_asking(tmp_path: Path, fake_llm: FakeLLM) -> None:
    config = write_config(tmp_path, fake_llm, "openai")
    fake_llm.script(Reply.tool_calls(ToolCallSpec("exec", {"command": "wc -l"})), "Counted.")
    code, _, err = await bot("chat", "--config", str(config), "-m", "count nothing")
    assert code == 0, err
    result = json.loads(fake_llm.requests[1].body["messages"][-1]["content"])
    assert result["status"] == "ok" and result["output"].strip() == "0"


async def test_a_question_stopped_with_ctrl_c_is_not_sent_again_with_the_next(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    """Ctrl-C stops the answer; the stopped question stays in the history, closed as interrupted, and the next
    question is answered on its own (not together with the stopped one)."""
    config = write_config(tmp_path, fake_llm, "openai")
    fake_llm.script(Reply.held("Let me think", then=" about it."), "Answer two.")
    env = {key: value for key, value in os.environ.items() if not key.endswith("_API_KEY")}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "chat", "--config", str(config),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip
    assert process.stdin is not None and process.stderr is not None
    try:
        process.stdin.write(b"first\n")
        await process.stdin.drain()
        await eventually(lambda: len(fake_llm.requests) == 1, "the first question asked")
        await asyncio.sleep(0.3)  # the answer is being written
        process.send_signal(signal.SIGINT)
        err = b""
        async with asyncio.timeout(30):
            while b"(stopped)" not in err:
                line = await process.stderr.readline()
                assert line, f"bot chat ended before it said (stopped): {err.decode()}"
                err += line
        process.stdin.write(b"second\n/exit\n")
        await process.stdin.drain()
        process.stdin.close()
        out, rest = await asyncio.wait_for(process.communicate(), timeout=60)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == 0, rest.decode()
    assert "Answer two." in out.decode()
    assert len(fake_llm.requests) == 2
    messages = fake_llm.requests[1].body["messages"]
    said = [(m["role"], unstamped(m["content"]) if m["role"] == "user" else m["content"]) for m in messages[1:]]
    assert said == [
        ("user", "first"),
        ("assistant", "(stopped: the person interrupted this answer with Ctrl-C)"),
        ("user", "second"),
    ]
