"""MCP servers as tools, against real MCP servers written with the SDK's MCPServer (FastMCP in mcp 1.x) in
tests/mcp_servers/: on stdio and over streamable HTTP and SSE on 127.0.0.1; their tools named `<server>__<tool>`,
filtered, normalized and policed like any tool; results wrapped as untrusted content; a server that crashes, hangs,
never starts or changes its tools; `bot mcp list` and `bot tools`; and a tool called in a real `bot run` turn."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from configs import config_dict, telegram
from fakes.llm import FakeLLM, Reply, ToolCallSpec
from fakes.telegram import FakeTelegram
from helpers import WAIT, bot_run, eventually

from bot.config.checks import secrets_of
from bot.config.errors import ConfigError
from bot.config.loading import parse_config
from tools.base import ImageBlock, RunInfo, ToolContext, ToolResult, invoke
from tools.builtins import builtin_registry
from tools.mcp.manager import McpManager, render_status
from tools.mcp.server import BACKOFF_START
from tools.mcp.settings import McpServerSettings
from tools.policy import Selection, ToolsConfig, select_tools
from tools.registry import ToolRegistry
from tools.sandbox import BotFolders
from tools.schema import tool_schema

SERVERS = Path(__file__).resolve().parent.parent / "mcp_servers"
SHIELDED = BotFolders()  # the shield a bot starts its stdio servers under, here with no folders of a bot to hide
OWNER = 4242
STARTED = "channel telegram account main started"
NAME_RULE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
UNTRUSTED = re.compile(r'<<<EXTERNAL_UNTRUSTED_CONTENT id="\w+" source="([^"]*)">>>\n(.*)\n<<<END_EXTERNAL', re.S)


def stdio(script: str, **settings: Any) -> McpServerSettings:
    return McpServerSettings(command=sys.executable, args=[str(SERVERS / script)], **settings)


@contextlib.asynccontextmanager
async def serving(
    servers: dict[str, McpServerSettings],
    *,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    hide: BotFolders | None = SHIELDED,
    base_dir: Path = SERVERS,
    **more: Any,
) -> AsyncIterator[tuple[McpManager, ToolRegistry]]:
    """The servers started (each running or failed once), their tools in a registry beside the built-in ones; each
    stdio server under the shield, as a bot starts it."""
    manager = McpManager(servers, base_dir=base_dir, sleep=sleep, hide=hide, **more)
    registry = builtin_registry()
    manager.reserve(registry.names())
    registry.attach(manager)
    async with manager.running(settle=True):
        yield manager, registry


async def call(registry: ToolRegistry, name: str, arguments: dict[str, Any] | None = None) -> ToolResult:
    tool = registry.get(name)
    assert tool is not None, f"{name} is not offered; the tools are {registry.names()}"
    return await invoke(tool, "call-1", arguments or {}, ToolContext(RunInfo(agent="main", session_key="s")))


def fenced(text: str) -> tuple[str, str]:
    """(source, text) of the untrusted content in `text`: whom the fence names, and what the server said."""
    found = UNTRUSTED.search(text)
    assert found is not None, text
    return found.group(1), found.group(2)


def unwrapped(result: ToolResult) -> tuple[str, str]:
    """fenced() of a tool result's content (or error)."""
    payload = json.loads(result.text)
    return fenced(payload["content" if not result.is_error else "error"])


def state_of(manager: McpManager, name: str) -> str:
    return next(status.state for status in manager.status() if status.name == name)


# --- tools from a stdio server ----------------------------------------------------------------------------------------


async def test_a_stdio_servers_tools_are_switchboard_tools_with_the_servers_schemas() -> None:
    async with serving({"everything": stdio("everything.py")}) as (manager, registry):
        names = [name for name in registry.names() if name.startswith("everything__")]
        assert names[:3] == ["everything__echo", "everything__environment", "everything__picture"]
        assert registry.names()[: -len(names)] == builtin_registry().names()  # the built-ins first, untouched
        echo = registry["everything__echo"]
        assert registry.groups_of(echo) == {"group:mcp", "mcp:everything"}
        assert echo.description == "[MCP server everything] Say `text` back."
        for dialect in ("openai", "anthropic", "gemini"):
            assert tool_schema(echo, dialect) == {
                "type": "object",
                "properties": {"text": {"type": "string"}},
                "required": ["text"],
            }

        result = await call(registry, "everything__echo", {"text": "hello"})
        assert not result.is_error
        assert unwrapped(result) == ("MCP server everything, tool echo", "echo: hello")
        assert [status.state for status in manager.status()] == ["running"]


async def test_results_text_images_resources_errors_and_a_forged_fence() -> None:
    async with serving({"everything": stdio("everything.py")}) as (_, registry):
        picture = await call(registry, "everything__picture")
        assert unwrapped(picture)[1] == "a red pixel\n\n[image 1: image/png, shown after this text]"
        [image] = [block for block in picture.content if isinstance(block, ImageBlock)]
        assert image.mime_type == "image/png" and image.data.startswith("iVBOR")

        document = await call(registry, "everything__document")
        assert unwrapped(document)[1] == "[resource memo://notes/1]\nthe meeting is at noon"

        failed = await call(registry, "everything__fail", {"reason": "the disk is full"})
        assert failed.is_error
        source, text = unwrapped(failed)
        assert source == "MCP server everything, tool fail" and "the disk is full" in text
        assert json.loads(failed.text)["status"] == "error"

        injected = unwrapped(await call(registry, "everything__injection"))[1]
        assert "<<<END_EXTERNAL" not in injected and "[[[END_EXTERNAL_UNTRUSTED_CONTENT>>>" in injected

        refused = await call(registry, "everything__echo", {"wrong": 1})  # the server checks the arguments
        assert refused.is_error and "text" in unwrapped(refused)[1]


async def test_a_tool_list_change_is_picked_up() -> None:
    async with serving({"everything": stdio("everything.py")}) as (_, registry):
        assert "everything__extra" not in registry
        await call(registry, "everything__grow", {"name": "extra"})
        await eventually(lambda: "everything__extra" in registry, "the new tool after tools/list_changed")
        assert unwrapped(await call(registry, "everything__extra"))[1] == "extra says hi"


# --- remote servers ---------------------------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def remote_server(flag: str) -> AsyncIterator[str]:
    """everything.py over HTTP in a process of its own on 127.0.0.1; yields its base URL."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(SERVERS / "everything.py"), flag,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), WAIT)
        yield f"http://127.0.0.1:{int(line.split()[1])}"
    finally:
        process.terminate()
        await process.wait()


@pytest.mark.parametrize(("flag", "transport", "path"), [("--http", None, "/mcp"), ("--sse", "sse", "/sse")])
async def test_a_remote_server_with_a_secret_header(flag: str, transport: str | None, path: str) -> None:
    async with remote_server(flag) as base:
        kind = f"\n      transport: {transport}" if transport else ""
        text = f"mcp:\n  servers:\n    web:\n      url: {base}{path}{kind}\n"
        text += "      headers:\n        Authorization: Bearer ${REMOTE_TOKEN}\n"
        config = parse_config(text, environ={"REMOTE_TOKEN": "s3cret-remote-token"})
        assert config.warnings == [] and "Bearer s3cret-remote-token" in secrets_of(config)
        async with serving(config.mcp.servers) as (_, registry):
            assert unwrapped(await call(registry, "web__echo", {"text": "over the wire"}))[1] == "echo: over the wire"
            assert unwrapped(await call(registry, "web__whoami"))[1] == "Bearer s3cret-remote-token"


# --- apart from the bot: the shield, and answers capped ---------------------------------------------------------------


async def test_without_bubblewrap_a_stdio_server_is_not_started_bare(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "started"
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))  # no bwrap to be found
    # A server that would leave a mark if it ever ran (its interpreter is named by its full path).
    code = f"open({str(marker)!r}, 'w').close()"
    servers = {"marker": McpServerSettings(command=sys.executable, args=["-c", code])}
    async with serving(servers, sleep=Sleeps(block_after=1)) as (manager, _):
        [status] = manager.status()
        assert status.state == "failed"
        assert status.error == (
            "cannot start it apart from the bot: bubblewrap (bwrap) is not installed: install it (apt-get install "
            "bubblewrap)"
        )
    assert not marker.exists()


async def test_a_server_sees_its_own_folder_in_the_config_folder_and_nothing_else_of_it(tmp_path: Path) -> None:
    folder = tmp_path / "bot"  # the config's folder: .env, the state, and a folder of the server's own files
    (folder / "servers").mkdir(parents=True)
    (folder / ".env").write_text("GITHUB_TOKEN=ghp_in_dotenv\n")
    (folder / "state").mkdir()
    (folder / "servers" / "prying.py").write_text((SERVERS / "prying.py").read_text())
    servers = {
        "own": McpServerSettings(command=sys.executable, args=["prying.py"], cwd="servers"),
        "beside": McpServerSettings(command=sys.executable, args=["servers/prying.py"]),  # cwd: the config's folder
    }
    hide = BotFolders(config=str(folder), state=str(folder / "state"))
    async with serving(servers, hide=hide, base_dir=folder, sleep=Sleeps(block_after=1)) as (manager, registry):
        assert unwrapped(await call(registry, "own__list_folder", {"path": "."}))[1] == "prying.py"
        assert unwrapped(await call(registry, "own__list_folder", {"path": str(folder)}))[1] == "servers"
        dotenv = unwrapped(await call(registry, "own__read_file", {"path": str(folder / ".env")}))[1]
        assert dotenv == f"cannot read {folder / '.env'}: No such file or directory"
        beside = manager.status()[1]
        assert beside.state == "failed"
        assert beside.error is not None and beside.error.endswith(
            f"(servers/prying.py is in {folder}, the bot's own folder, which MCP servers do not see: put the "
            "server's files in a folder of their own and set its cwd there)"
        )


async def test_a_huge_answer_is_cut_and_says_so_and_only_a_few_images_are_shown() -> None:
    from mcp.types import CallToolResult, ImageContent, TextContent

    from tools.mcp.results import MAX_IMAGES, MAX_TEXT_CHARS, tool_result

    async with serving({"huge": stdio("huge.py")}) as (_, registry):
        result = await call(registry, "huge__dump")
    payload = json.loads(result.text)
    assert payload["truncated"] is True
    assert payload["note"] == "the server's answer was cut at 100,000 of its 3,145,728 characters; ask it for less"
    source, text = fenced(payload["content"])
    assert source == "MCP server huge, tool dump" and len(text) == MAX_TEXT_CHARS and text.startswith("START x")

    pixel = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="  # 1 px
    many = CallToolResult(content=[TextContent(text="six pictures")] + [
        ImageContent(data=pixel, mime_type="image/png") for _ in range(6)
    ])  # fmt: skip
    shown = tool_result("pics__show", "pics", "show", many)
    assert len([block for block in shown.content if isinstance(block, ImageBlock)]) == MAX_IMAGES
    assert json.loads(shown.text)["content"].count("not shown, more than 4 in one answer") == 2
    failed = tool_result(
        "huge__dump", "huge", "dump", CallToolResult(content=[TextContent(text="y" * 200_000)], is_error=True)
    )
    assert failed.is_error and json.loads(failed.text)["error"].endswith(
        "\n(the server's answer was cut at 100,000 of its 200,000 characters; ask it for less)"
    )


# --- servers that misbehave -------------------------------------------------------------------------------------------


class Sleeps:
    """An injected sleep: records each backoff and returns at once, or waits for good after `block_after` of them."""

    def __init__(self, block_after: int | None = None) -> None:
        self.delays: list[float] = []
        self.block_after = block_after

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)
        if self.block_after is not None and len(self.delays) >= self.block_after:
            await asyncio.Event().wait()  # until the server is stopped
        await asyncio.sleep(0)


async def test_a_server_that_crashes_mid_call_gives_an_error_and_is_restarted() -> None:
    sleeps = Sleeps()
    async with serving({"everything": stdio("everything.py")}, sleep=sleeps) as (manager, registry):
        crashed = await call(registry, "everything__crash")
        assert crashed.is_error
        assert "the MCP server everything stopped during the call (it is being restarted)" in crashed.text
        await eventually(lambda: manager.status()[0].restarts == 1, "the restart")
        await eventually(lambda: state_of(manager, "everything") == "running", "the server running again")
        assert sleeps.delays == [BACKOFF_START]
        assert unwrapped(await call(registry, "everything__echo", {"text": "again"}))[1] == "echo: again"


async def test_a_call_past_its_time_limit_is_cancelled_on_the_server(tmp_path: Path) -> None:
    marker = tmp_path / "cancelled"
    async with serving({"everything": stdio("everything.py", timeout_seconds=1)}) as (manager, registry):
        result = await call(registry, "everything__hang", {"marker": str(marker)})
        assert result.is_error
        assert json.loads(result.text)["error"] == (
            "timed out after 1 s; the call was cancelled on the MCP server everything"
        )
        await eventually(marker.exists, "the server to see the cancellation")  # the tool's own cleanup ran
        assert state_of(manager, "everything") == "running"
        assert unwrapped(await call(registry, "everything__echo", {"text": "still here"}))[1] == "echo: still here"


async def test_a_server_that_never_starts_is_left_out_with_one_log_line_and_retried_with_backoff(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sleeps = Sleeps(block_after=3)
    servers = {"broken": stdio("broken.py"), "everything": stdio("everything.py")}
    with caplog.at_level(logging.DEBUG, logger="tools.mcp.server"):
        async with serving(servers, sleep=sleeps) as (manager, registry):
            await eventually(lambda: len(sleeps.delays) == 3, "three tries")
            assert sleeps.delays == [BACKOFF_START, 2 * BACKOFF_START, 4 * BACKOFF_START]
            broken = manager.status()[0]
            assert broken.state == "failed" and broken.tools == ()
            assert broken.error == (
                "the server closed the connection while starting; its last line on stderr: broken: no database is "
                "configured"
            )
            assert unwrapped(await call(registry, "everything__echo", {"text": "fine"}))[1] == "echo: fine"
            assert not [name for name in registry.names() if name.startswith("broken")]
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and "broken" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].startswith("MCP server broken will not start: the server closed")


async def test_a_server_stuck_starting_fails_after_its_startup_limit_and_the_others_work() -> None:
    servers = {"silent": stdio("silent.py", startup_timeout_seconds=0.3), "everything": stdio("everything.py")}
    async with serving(servers, sleep=Sleeps(block_after=1)) as (manager, registry):
        await eventually(lambda: state_of(manager, "silent") == "failed", "the silent server to fail")
        assert manager.status()[0].error == "no answer within 0.3 s (startup_timeout_seconds)"
        assert unwrapped(await call(registry, "everything__echo", {"text": "fine"}))[1] == "echo: fine"


async def test_a_server_whose_variable_is_unset_does_not_start() -> None:
    text = f"mcp:\n  servers:\n    gh:\n      command: {sys.executable}\n      env:\n        GH_TOKEN: ${{GH_TOKEN}}\n"
    config = parse_config(text, environ={})  # not a config error: the rest of the bot runs
    assert config.mcp_unset() == {"gh": ["GH_TOKEN"]}
    async with serving(config.mcp.servers, unset=config.mcp_unset()) as (manager, _):
        [status] = manager.status()
        assert (status.state, status.error) == ("failed", "environment variable ${GH_TOKEN} is not set")


# --- many tools, names and clashes ------------------------------------------------------------------------------------


async def test_a_hundred_tools_filtered_names_kept_valid_and_clashes_reported(caplog: pytest.LogCaptureFixture) -> None:
    async with serving({"many": stdio("many.py")}) as (manager, registry):
        ours = [name for name in registry.names() if name.startswith("many__")]
        assert len(ours) == 103  # 104 listed, one left out
        assert all(NAME_RULE.match(name) for name in ours)
        long_name = next(name for name in ours if "very_long" in name)
        assert len(long_name) == 64 and re.search(r"_[0-9a-f]{8}$", long_name)
        [status] = manager.status()
        assert status.problems == (
            "tool 'dup_name' is not offered: its name here, 'many__dup_name', clashes with the tool 'dup.name' of "
            "the MCP server many",
        )
        assert "many__dup_name" in ours and "many__tool_099" in ours
    assert sum("clashes with" in record.getMessage() for record in caplog.records) == 1

    servers = {"many": stdio("many.py", include=["tool_01*", "tool_02*", "taken"], exclude=["tool_015"])}
    manager = McpManager(servers, base_dir=SERVERS)
    manager.reserve(["many__taken"])  # a tool of ours already has the name
    async with manager.running(settle=True):
        names = [tool.name for tool in manager.current_tools()]
        assert names == [f"many__tool_{n:03d}" for n in range(10, 30) if n != 15]
        assert manager.status()[0].problems == (
            "tool 'taken' is not offered: its name here, 'many__taken', clashes with the tool 'many__taken' of "
            "Switchboard or a plugin",
        )
        assert "left out: tool 'taken' is not offered" in "\n".join(render_status(manager.status()))


async def test_mcp_tools_go_through_the_policy_pipeline() -> None:
    servers = {"everything": stdio("everything.py", include=["echo"]), "many": stdio("many.py", include=["tool_00*"])}
    async with serving(servers) as (_, registry):
        owner = Selection(is_owner=True, agent="main")

        def kept(tools: ToolsConfig, selection: Selection = owner) -> list[str]:
            return [name for name in select_tools(registry, selection, tools).names if "__" in name]

        assert len(kept(ToolsConfig())) == 11
        assert kept(ToolsConfig(deny=["mcp:many"])) == ["everything__echo"]
        assert kept(ToolsConfig(allow=["group:mcp"], deny=["many__tool_00[1-9]"])) == [
            "everything__echo",
            "many__tool_000",
        ]
        assert kept(ToolsConfig(profile="coding")) == []
        assert kept(ToolsConfig(), Selection(is_owner=False, agent="main")) == []  # tools.non_owner denies group:mcp
        result = select_tools(registry, owner, ToolsConfig(deny=["mcp:nosuch", "mcp:many"]))
        assert [(item.where, item.entry) for item in result.unknown] == [("tools.deny", "mcp:nosuch")]

    async with serving({"everything": stdio("everything.py", include=["echo"], agents=["ops"])}) as (_, registry):
        result = select_tools(registry, Selection(is_owner=True, agent="main"))
        [removed] = [item for item in result.removed if item.name == "everything__echo"]
        assert (removed.layer, removed.reason) == ("agent", "only for the agents ops")
        assert "everything__echo" in select_tools(registry, Selection(is_owner=True, agent="ops")).names


# --- the config -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("servers", "expected"),
    [
        ("    GitHub:\n      command: x\n", "bindings.yaml:4: mcp.servers.GitHub: an MCP server's name must be"),
        ("    a__b:\n      command: x\n", "bindings.yaml:4: mcp.servers.a__b: an MCP server's name must be"),
        (
            "    gh:\n      command: x\n      url: http://127.0.0.1/mcp\n",
            "bindings.yaml:4: mcp.servers.gh: give either command (a program spoken to on stdio) or url",
        ),
        ("    gh:\n      args: [a]\n", "bindings.yaml:4: mcp.servers.gh: give either command"),
        (
            "    gh:\n      command: x\n      headers: {A: b}\n",
            "bindings.yaml:4: mcp.servers.gh: headers cannot be set for a stdio server (command)",
        ),
        (
            "    gh:\n      url: ftp://example.org\n",
            "bindings.yaml:5: mcp.servers.gh.url: must be an http:// or https://",
        ),
        ("    gh:\n      command: x\n      timeout_seconds: 0\n", "bindings.yaml:6: mcp.servers.gh.timeout_seconds:"),
        ("    gh:\n      command: x\n      inclde: [a]\n", "bindings.yaml:6: mcp.servers.gh.inclde: unknown key; did"),
        (
            "    gh:\n      command: x\n      agents: [main, opps]\n",
            "bindings.yaml:6: mcp.servers.gh.agents[1]: no agent 'opps'; did you mean 'ops'?",
        ),
    ],
)
def test_config_errors_name_the_file_line_and_key(servers: str, expected: str) -> None:
    text = "agents: [{id: main}, {id: ops}]\nmcp:\n  servers:\n" + servers
    with pytest.raises(ConfigError) as caught:
        parse_config(text)
    assert str(caught.value).startswith(expected), str(caught.value)


def test_a_secret_written_into_the_file_is_warned_about_and_kept_out_of_the_logs() -> None:
    text = "mcp:\n  servers:\n    gh:\n      command: gh-mcp\n      env:\n        GH_TOKEN: ghp_literal_secret\n"
    text += "        LOG_LEVEL: debug\n        GH_HOST: ${HOST_NAME}\n"
    config = parse_config(text, environ={"HOST_NAME": "github.example.org"})
    assert [warning.render("b.yaml") for warning in config.warnings] == [
        "b.yaml:6: mcp.servers.gh.env.GH_TOKEN: a secret written into the file; use ${VAR} instead"
    ]
    assert set(secrets_of(config)) >= {"ghp_literal_secret", "github.example.org"}
    assert "debug" not in secrets_of(config)
    gh = config.mcp.servers["gh"]
    assert (gh.kind, gh.timeout_seconds, gh.agents, gh.where) == ("stdio", 60, None, "gh-mcp")


# --- through the command line and a real `bot run` --------------------------------------------------------------------


async def run_bot_command(*args: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), WAIT * 2)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_bot_mcp_list_and_bot_tools(tmp_path: Path) -> None:
    config = {
        "mcp": {
            "servers": {
                "everything": {"command": sys.executable, "args": [str(SERVERS / "everything.py")], "exclude": ["g*"]},
                "broken": {"command": sys.executable, "args": [str(SERVERS / "broken.py")]},
                "keyed": {"command": sys.executable, "env": {"API_TOKEN": "${MCP_TEST_UNSET_TOKEN}"}},
            }
        }
    }
    path = tmp_path / "bindings.yaml"
    path.write_text(json.dumps(config))
    code, out, err = await run_bot_command("mcp", "list", "--config", str(path))
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == f"everything  running  {sys.executable} {SERVERS / 'everything.py'}"
    assert lines[1] == "  tools (9):" and lines[2] == "    everything__echo"
    assert "everything__grow" not in out
    broken = lines.index(f"broken  failed  {sys.executable} {SERVERS / 'broken.py'}")
    assert lines[broken + 1] == (
        "  why: the server closed the connection while starting; its last line on stderr: broken: no database is "
        "configured"
    )
    assert lines[broken + 2 :] == [
        f"keyed  failed  {sys.executable}",
        "  why: environment variable ${MCP_TEST_UNSET_TOKEN} is not set",
    ]

    code, out, err = await run_bot_command("tools", "--config", str(path))
    assert code == 0, err
    assert "  everything__echo" in out.splitlines() and "broken__" not in out


def bot_config(tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram) -> dict[str, Any]:
    python = sys.executable
    return config_dict(
        tmp_path, fake_llm, telegram(fake_telegram, token="${TG_TOKEN}"), owners=[f"telegram:{OWNER}"],
        mcp={"servers": {
            # never answers while starting: the bot serves its chats all the same
            "silent": {"command": python, "args": [str(SERVERS / "silent.py")], "startup_timeout_seconds": 600},
            "broken": {"command": python, "args": [str(SERVERS / "broken.py")]},
            "everything": {  # a relative script, found in its cwd
                "command": python, "args": ["everything.py"], "cwd": str(SERVERS), "env": {"GREETING": "hi"},
            },
        }},
    )  # fmt: skip


async def test_a_tool_called_in_a_real_bot_run_turn(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg = fake_telegram
    secrets = {"TG_TOKEN": tg.token, "DEPLOY_SECRET_KEY": "do-not-leak-this-value"}
    async with bot_run(bot_config(tmp_path, fake_llm, tg), tmp_path, STARTED, env=secrets):
        log = tmp_path / "bot.log"
        await eventually(lambda: "MCP server everything running (10 tools)" in log.read_text(), "the MCP server")
        fake_llm.script(
            Reply.tool_calls(
                ToolCallSpec("everything__echo", {"text": "ping"}), ToolCallSpec("everything__environment", {})
            ),
            "Done.",
        )
        await tg.private_message("use the tools", user_id=OWNER, name="Owner")
        assert await tg.wait_sent(OWNER, 1) == ["Done."]
        offered = [tool["function"]["name"] for tool in fake_llm.requests[0].body["tools"]]
        assert "everything__echo" in offered and not [n for n in offered if n.startswith(("silent", "broken"))]
        results = [m for m in fake_llm.requests[1].body["messages"] if m["role"] == "tool"]
        echo, environment = (json.loads(m["content"])["content"] for m in results)
        assert fenced(echo) == ("MCP server everything, tool echo", "echo: ping")
        seen = json.loads(fenced(environment)[1])
        assert seen["GREETING"] == "hi" and "PATH" in seen
        assert not {"TG_TOKEN", "DEPLOY_SECRET_KEY"} & set(seen)
        assert tg.token not in environment and "do-not-leak-this-value" not in environment
        text = log.read_text()
        assert "MCP server silent running" not in text  # still starting: it delayed nothing
        assert text.count("MCP server broken will not start") == 1
