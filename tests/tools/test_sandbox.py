"""The sandbox of exec and process: which runs get it, its command lines, and each boundary proved with real bubblewrap
(files outside the workspace, the network, the bot's environment and processes, a fork bomb, a missing backend)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from configs import config_dict, telegram
from fakes.llm import FakeLLM, Reply, ToolCallSpec
from fakes.telegram import FakeTelegram
from helpers import bot_run, eventually
from leaks import descendants

from bot.config.loading import parse_config
from bot.runs.assemble import policy_for
from routing import Peer
from tools import sandbox as sandbox_module
from tools.base import RunInfo, ToolContext, ToolResult, invoke
from tools.builtins import NoChats, builtin_registry
from tools.exec import Authorization, ExecTool, ProcessTable, ProcessTool
from tools.sandbox import (
    ETC_FILES,
    NETWORK_ETC_FILES,
    SYSTEM_DIRS,
    SandboxSettings,
    bwrap_argv,
    docker_argv,
    is_sandboxed,
    process_limit_enforced,
    sandbox_for,
    sandbox_problem_sync,
)

SESSION = "agent:main:telegram:group:-100"
SECRET = "top-secret-do-not-leak"
PYTHON = shutil.which("python3", path="/usr/bin:/bin")


class Authorizer:
    """Allows every command and records what it was asked."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def __call__(self, command: str, ctx: ToolContext) -> Authorization:
        self.asked.append(command)
        return Authorization(allowed=True, status="allowed")


@pytest.fixture(autouse=True)
async def nothing_left_running() -> AsyncIterator[None]:
    """Every process a test starts has ended once it is over (what is left is killed, and fails the test)."""
    before = {p.pid for p in descendants()}
    yield
    try:
        await eventually(lambda: not {p.pid for p in descendants()} - before, "the test's processes to end")
    finally:
        for pid in {p.pid for p in descendants()} - before:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def bwrap_works() -> None:
    problem = sandbox_problem_sync(SandboxSettings())
    assert problem is None, f"{problem} (`make test` installs bubblewrap)"


@pytest.fixture
async def processes() -> AsyncIterator[ProcessTable]:
    table = ProcessTable()
    yield table
    await table.close()


class Layout:
    """A config folder as the bot has it: the config, the state directory, two agents' workspaces, and a file of the
    test outside all of them."""

    def __init__(self, root: Path) -> None:
        self.config_dir = root / "bot"
        self.state = self.config_dir / "state"
        self.workspace = self.config_dir / "workspaces" / "main"
        self.other = self.config_dir / "workspaces" / "other"
        for folder in (self.state, self.workspace, self.other):
            folder.mkdir(parents=True)
        self.secrets = {
            "config": self.config_dir / "bindings.yaml",
            "state": self.state / "sessions.sqlite",
            "other agent": self.other / "notes.md",
            "outside": root / "outside.txt",
        }
        for path in self.secrets.values():
            path.write_text(SECRET)


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    return Layout(tmp_path)


def context(workspace: Path, settings: SandboxSettings | None = None) -> ToolContext:
    sandbox = settings or SandboxSettings(mode="all")
    return ToolContext(RunInfo(agent="main", session_key=SESSION, workspace=str(workspace), sandbox=sandbox))


async def run(
    command: str, workspace: Path, processes: ProcessTable, settings: SandboxSettings | None = None, **args: Any
) -> tuple[ToolResult, dict[str, Any]]:
    tool = ExecTool(Authorizer(), processes)
    result = await invoke(tool, "call_1", {"command": command, **args}, context(workspace, settings))
    assert isinstance(result.details, dict)
    return result, result.details


def sandbox_cgroups() -> list[Path]:
    parent = sandbox_module._pids_parent()
    return [] if parent is None else sorted(parent.glob(sandbox_module.NAME_PREFIX + "*"))


# --- which runs are sandboxed --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "channel", "is_owner", "peer_kind", "sandboxed"),
    [
        ("non-main", "telegram", True, "direct", False),  # the owner's DM: the main session
        ("non-main", "telegram", True, "group", True),
        ("non-main", "discord", True, "channel", True),
        ("non-main", "telegram", False, "direct", True),  # someone else's DM
        ("non-main", "slack", True, None, True),  # no known chat: not a DM
        ("non-main", "console", True, "direct", False),  # `bot chat`: the machine's user
        ("all", "telegram", True, "direct", True),
        ("all", "console", True, "direct", True),
        ("off", "telegram", False, "group", False),
    ],
)
def test_which_runs_are_sandboxed(
    mode: Any, channel: str, is_owner: bool, peer_kind: str | None, sandboxed: bool
) -> None:
    settings = SandboxSettings(mode=mode)
    assert is_sandboxed(settings, channel=channel, is_owner=is_owner, peer_kind=peer_kind) is sandboxed
    chosen = sandbox_for(settings, channel=channel, is_owner=is_owner, peer_kind=peer_kind)
    assert chosen == (settings if sandboxed else None)


def test_the_default_is_non_main_bwrap_without_network() -> None:
    config = parse_config("agents: [{id: main}]")
    assert config.agent("main").sandbox == SandboxSettings()
    assert (SandboxSettings().mode, SandboxSettings().backend, SandboxSettings().network) == (
        "non-main",
        "bwrap",
        False,
    )
    custom = parse_config(
        "agents: [{id: main, sandbox: {mode: all, backend: docker, network: true, max_processes: 64}}]"
    )
    assert custom.agent("main").sandbox.max_processes == 64


def test_an_unknown_sandbox_key_is_a_config_error() -> None:
    with pytest.raises(Exception, match=r"agents\[0\]\.sandbox\.netwrk"):
        parse_config("agents: [{id: main, sandbox: {netwrk: true}}]")


# --- the command lines ---------------------------------------------------------------------------------------------


def mounts(argv: list[str]) -> dict[str, str]:
    """destination -> how it is mounted (ro-bind, bind, symlink, tmpfs, proc, dev)."""
    found: dict[str, str] = {}
    i = 0
    while i < len(argv) and argv[i] != "--":
        option = argv[i].removeprefix("--")
        if option in ("ro-bind", "bind", "symlink"):
            found[argv[i + 2]] = option
            i += 3
        elif option in ("tmpfs", "proc", "dev"):
            found[argv[i + 1]] = option
            i += 2
        else:
            i += 1
    return found


def test_bwrap_mounts_only_system_folders_a_few_etc_files_and_the_workspace(tmp_path: Path) -> None:
    ws = str(tmp_path / "ws")
    argv = bwrap_argv(SandboxSettings(), "true", ws, {"PATH": "/usr/bin", "LANG": "C.UTF-8"})
    found = mounts(argv)
    assert found.pop(ws) == "bind"  # the only writable host folder, at its own path
    assert (found.pop("/tmp"), found.pop("/proc"), found.pop("/dev")) == ("tmpfs", "proc", "dev")
    for destination, how in found.items():
        assert destination in SYSTEM_DIRS or destination in ETC_FILES, destination
        assert how in ("ro-bind", "symlink")
    assert "/usr" in found
    assert not set(found) & set(NETWORK_ETC_FILES)
    assert argv.index("/tmp") < argv.index(ws)  # the workspace is bound over the fresh /tmp, not hidden by it
    assert argv[argv.index("--chdir") + 1] == ws
    for flag in ("--unshare-all", "--unshare-user", "--die-with-parent", "--new-session", "--clearenv"):
        assert flag in argv
    assert "--share-net" not in argv
    assert argv[-3:] == ["/bin/sh", "-c", "true"]
    setenv = {argv[i + 1]: argv[i + 2] for i, arg in enumerate(argv) if arg == "--setenv"}
    assert setenv == {"PATH": "/usr/bin", "LANG": "C.UTF-8"}


def test_bwrap_with_network_shares_it_and_gets_name_resolution(tmp_path: Path) -> None:
    argv = bwrap_argv(SandboxSettings(network=True), "true", str(tmp_path), {})
    assert "--share-net" in argv
    present = [name for name in NETWORK_ETC_FILES if os.path.exists(name)]
    assert set(present) <= set(mounts(argv))


def test_the_limits_are_set_inside_the_sandbox(tmp_path: Path) -> None:
    settings = SandboxSettings(max_processes=40, max_file_mb=2, cpu_seconds=30)
    argv = bwrap_argv(settings, "true", str(tmp_path), {}, prlimit="/usr/bin/prlimit")
    inside = argv[argv.index("--") + 1 :]
    assert inside == [
        "/usr/bin/prlimit", "--nproc=40", f"--fsize={2 * 1024 * 1024}", "--cpu=30", "--", "/bin/sh", "-c", "true",
    ]  # fmt: skip


def test_docker_has_the_same_boundaries(tmp_path: Path) -> None:
    """Only the command line is checked: there is no docker daemon to run it with here."""
    ws = str(tmp_path)
    settings = SandboxSettings(backend="docker", image="alpine:3", max_processes=50, max_file_mb=1, cpu_seconds=9)
    argv = docker_argv(settings, "echo hi", ws, {"HOME": ws}, name="sb-1")
    text = " ".join(argv)
    assert argv[:3] == ["docker", "run", "--rm"]
    for part in (
        "--network none", "--read-only", "--tmpfs /tmp", "--user 1000:1000", "--pids-limit 50", f"-v {ws}:{ws}",
        f"-w {ws}", "--ulimit fsize=1048576:1048576", "--ulimit cpu=9:9", "--cap-drop ALL", f"-e HOME={ws}",
        "--name sb-1",
    ):  # fmt: skip
        assert part in text
    assert argv[-4:] == ["alpine:3", "/bin/sh", "-c", "echo hi"]
    assert "--network bridge" in " ".join(
        docker_argv(settings.model_copy(update={"network": True}), "x", ws, {}, name="n")
    )


# --- real bubblewrap: the boundaries -------------------------------------------------------------------------------


@pytest.mark.usefixtures("bwrap_works")
async def test_files_outside_the_workspace_are_neither_readable_nor_writable(
    layout: Layout, processes: ProcessTable
) -> None:
    reads = "; ".join(f"cat '{path}'; ls -A '{path.parent}'" for path in layout.secrets.values())
    writes = "; ".join(
        f"echo changed > '{path}'; echo new > '{path.parent}/new-file'" for path in layout.secrets.values()
    )
    home = Path.home()
    _, details = await run(f"{reads}; {writes}; ls -A '{home}' || echo no-home; echo done", layout.workspace, processes)
    assert details["output"].endswith("done\n")
    assert SECRET not in details["output"]
    for path in layout.secrets.values():
        assert path.read_text() == SECRET  # unchanged on the host
        assert not (path.parent / "new-file").exists()
    if not layout.workspace.is_relative_to(home):  # else bwrap makes the folders on the way to the workspace
        assert "no-home" in details["output"]


@pytest.mark.usefixtures("bwrap_works")
async def test_the_workspace_is_writable_and_the_host_sees_the_result(layout: Layout, processes: ProcessTable) -> None:
    result, details = await run(
        "pwd; echo made > out.txt; mkdir -p sub && echo deep > sub/f", layout.workspace, processes
    )
    assert not result.is_error, details
    assert details["output"] == f"{layout.workspace}\n"  # the same path as on the host
    assert details["sandbox"] == {"network": False}
    assert (layout.workspace / "out.txt").read_text() == "made\n"
    assert (layout.workspace / "sub" / "f").read_text() == "deep\n"
    assert sandbox_cgroups() == []  # the command's cgroup, if it had one, is gone


@pytest.mark.usefixtures("bwrap_works")
async def test_only_system_folders_are_there_and_read_only(layout: Layout, processes: ProcessTable) -> None:
    _, details = await run("ls /; ls /etc; touch /usr/x || echo read-only", layout.workspace, processes)
    names = set(details["output"].split())
    assert "read-only" in names
    assert not names & {"home", "root", "work", "var", "srv", "opt", "mnt", "shadow", "gshadow", "sudoers", "hostname"}


@pytest.mark.skipif(PYTHON is None, reason="needs python3 in /usr/bin or /bin")
@pytest.mark.usefixtures("bwrap_works")
@pytest.mark.parametrize("network", [False, True])
async def test_a_local_server_is_reachable_only_with_network(
    layout: Layout, processes: ProcessTable, network: bool
) -> None:
    heard: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        heard.append(await reader.read(100))
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    connect = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=10).sendall(b'knock')"
    try:
        result, details = await run(
            f'{PYTHON} -c "{connect}"', layout.workspace, processes, SandboxSettings(network=network, mode="all")
        )
        if network:
            assert not result.is_error, details
            await eventually(lambda: heard == [b"knock"], "the server to hear the knock")
        else:
            assert result.is_error
            assert "Connection refused" in details["output"] or "unreachable" in details["output"]
            assert heard == []
    finally:
        server.close()
        await server.wait_closed()


@pytest.mark.usefixtures("bwrap_works")
async def test_the_bots_environment_and_processes_are_invisible(
    layout: Layout, processes: ProcessTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SWITCHBOARD_TEST_TOKEN", SECRET)
    monkeypatch.setenv("LANG", SECRET)  # even an allowed variable's value is only what the bot hands over
    me = os.getpid()
    command = f"env; echo ---; cat /proc/1/cmdline; echo; echo ---; ls /proc; cat /proc/{me}/environ; hostname"
    _, details = await run(command, layout.workspace, processes)
    env_part, pid1, proc_part = details["output"].split("---\n")
    assert "SWITCHBOARD_TEST_TOKEN" not in details["output"]
    env = dict(line.split("=", 1) for line in env_part.splitlines())
    assert env["HOME"] == str(layout.workspace)
    assert env["PATH"] == sandbox_module.SANDBOX_PATH
    assert "bwrap" in pid1  # pid 1 is the sandbox's own init, not the machine's
    pids = [int(name) for name in proc_part.split() if name.isdigit()]
    assert me not in pids
    assert len(pids) <= 4  # bwrap's init, the shell, ls: nothing of the host
    assert "environ: No such file" in details["output"]
    assert details["output"].rstrip().endswith("sandbox")


@pytest.mark.usefixtures("bwrap_works")
async def test_limits_apply_inside(layout: Layout, processes: ProcessTable) -> None:
    settings = SandboxSettings(mode="all", max_file_mb=1, cpu_seconds=77, max_processes=99)
    command = "grep -E 'Max (cpu time|file size|processes)' /proc/self/limits; head -c 3000000 /dev/zero > big"
    result, details = await run(command, layout.workspace, processes, settings)
    assert result.is_error  # the write was stopped
    limits = {line[:26].strip(): line[26:].split()[:2] for line in details["output"].splitlines()[:3]}
    assert limits == {
        "Max cpu time": ["77", "77"],
        "Max file size": ["1048576", "1048576"],
        "Max processes": ["99", "99"],
    }
    assert (layout.workspace / "big").stat().st_size <= 1024 * 1024


@pytest.mark.usefixtures("bwrap_works")
async def test_a_fork_bomb_is_contained(layout: Layout, processes: ProcessTable) -> None:
    if not process_limit_enforced():
        pytest.skip("running as root without a pids cgroup: the process limit cannot hold, so no bomb is started")
    settings = SandboxSettings(mode="all", max_processes=32)
    bomb = "bomb() { bomb & bomb; }; bomb"  # every process forks endlessly
    result, details = await run(bomb, layout.workspace, processes, settings, timeout=60)
    assert result.is_error
    assert details["status"] in ("error", "timeout")
    assert "fork" in details["output"].lower()  # forks were refused: the limit held
    assert sandbox_cgroups() == []
    _, after = await run("echo still fine", layout.workspace, processes, settings)
    assert after["output"] == "still fine\n"


@pytest.mark.usefixtures("bwrap_works")
async def test_a_sandboxed_background_command_is_listed_read_and_killed(
    layout: Layout, processes: ProcessTable
) -> None:
    ctx = context(layout.workspace)
    started = await invoke(
        ExecTool(Authorizer(), processes),
        "c1",
        {"command": "echo up > up.txt; exec sleep 600", "background": True},
        ctx,
    )
    assert isinstance(started.details, dict) and started.details["status"] == "running", started.details
    assert started.details["sandbox"] == {"network": False}
    await eventually(lambda: (layout.workspace / "up.txt").exists(), "the background command to start")
    tool = ProcessTool(processes)
    killed = await invoke(tool, "c2", {"action": "kill", "id": started.details["id"]}, ctx)
    assert isinstance(killed.details, dict) and killed.details["status"] == "killed"
    await eventually(lambda: sandbox_cgroups() == [], "the sandbox's cgroup to be removed")


# --- a missing backend ---------------------------------------------------------------------------------------------


@pytest.fixture
def fake_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "bin"
    folder.mkdir()
    monkeypatch.setenv("PATH", str(folder))
    return folder


DAEMON_DOWN = "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?"


def failing_program(folder: Path, name: str, said: str) -> None:
    """A program `name` in `folder` that says `said` on stderr and fails, whatever it is asked."""
    fake = folder / name
    fake.write_text(f"#!/bin/sh\necho '{said}' >&2\nexit 1\n")
    fake.chmod(0o755)


@pytest.mark.parametrize(
    ("backend", "said", "message"),
    [
        ("bwrap", None, "bubblewrap (bwrap) is not installed: install it (apt-get install bubblewrap)"),
        ("docker", None, "docker is not installed"),
        ("bwrap", "bwrap: no namespaces for you",
         "bubblewrap (bwrap) cannot create its namespaces here (bwrap: no namespaces for you)"),
        ("docker", DAEMON_DOWN, f"the docker daemon is not reachable ({DAEMON_DOWN}): start the daemon"),
    ],
)  # fmt: skip
async def test_without_a_working_backend_commands_are_refused_never_run_unsandboxed(
    layout: Layout, processes: ProcessTable, fake_path: Path, backend: Any, said: str | None, message: str
) -> None:
    if said is not None:  # the program is there, and fails
        failing_program(fake_path, backend, said)
    authorize = Authorizer()
    tool = ExecTool(authorize, processes)
    marker = layout.workspace / "ran"
    result = await invoke(
        tool,
        "c",
        {"command": f"touch {marker}"},
        context(layout.workspace, SandboxSettings(mode="all", backend=backend)),
    )
    assert result.is_error
    assert isinstance(result.details, dict)
    assert message in result.details["error"]
    assert "mode: off" in result.details["error"]
    assert authorize.asked == []  # nobody is asked to approve what cannot run
    assert not marker.exists()


def test_config_check_warns_about_a_missing_backend(tmp_path: Path) -> None:
    config = tmp_path / "bindings.yaml"
    config.write_text(
        "agents:\n  - id: main\n  - id: quiet\n    sandbox: {mode: 'off'}\n"
        "defaults: {model: local/m}\nproviders: {local: {kind: openai, base_url: 'http://127.0.0.1:9/v1'}}\n"
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    env = {key: value for key, value in os.environ.items() if not key.startswith("SWITCHBOARD")} | {"PATH": str(empty)}
    done = subprocess.run(
        [sys.executable, "-m", "bot", "config", "check", "--config", str(config)],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (
        f"warning: {config}: agents[0].sandbox: agent 'main': its sandboxed commands will be refused: " in done.stderr
    )
    assert "bubblewrap (bwrap) is not installed" in done.stderr
    assert "quiet" not in done.stderr  # its sandbox is off


# --- docker: the daemon is asked, not only the client found --------------------------------------------------------


def docker_up(folder: Path) -> Path:
    """A docker client on PATH whose daemon answers (it says a server version to `docker version`), writing what it
    was asked to `asked`: it stands in for a docker engine, which the machine running the tests need not have."""
    fake, asked = folder / "docker", folder / "asked"
    fake.write_text(f'#!/bin/sh\necho "$*" >> {asked}\n[ "$1" = version ] && echo 27.3.1 && exit 0\nexit 1\n')
    fake.chmod(0o755)
    return asked


def test_a_docker_client_whose_daemon_answers_is_a_working_backend(fake_path: Path) -> None:
    asked = docker_up(fake_path)

    assert sandbox_problem_sync(SandboxSettings(backend="docker")) is None
    assert asked.read_text() == "version --format {{.Server.Version}}\n"  # the daemon was asked, briefly


def test_a_real_docker_client_without_a_daemon_is_not_a_working_backend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real client, pointed at a socket nobody listens on: what a machine with docker installed and its daemon
    stopped has."""
    if shutil.which("docker") is None:
        pytest.skip("no docker client installed here: the stand-in daemon tests above cover the check")
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'nobody.sock'}")

    problem = sandbox_problem_sync(SandboxSettings(backend="docker"))

    assert problem is not None and problem.startswith("the docker daemon is not reachable (")
    assert "nobody.sock" in problem and "systemctl start docker" in problem, problem


def docker_down_environment(tmp_path: Path) -> dict[str, str]:
    """The CLI's environment with a docker client on PATH whose daemon is down."""
    folder = tmp_path / "bin"
    folder.mkdir()
    failing_program(folder, "docker", DAEMON_DOWN)
    environ = {key: value for key, value in os.environ.items() if not key.startswith("SWITCHBOARD")}
    return environ | {"PATH": f"{folder}:{environ.get('PATH', '')}"}


def docker_config(tmp_path: Path) -> Path:
    config = tmp_path / "bindings.yaml"
    config.write_text(
        "agents:\n  - id: main\n    sandbox: {mode: all, backend: docker}\n"
        "defaults: {model: local/m}\nproviders: {local: {kind: openai, base_url: 'http://127.0.0.1:9/v1'}}\n"
    )
    return config


@pytest.mark.parametrize("command", ["config check", "doctor"])
def test_config_check_and_doctor_say_when_the_docker_daemon_is_down(tmp_path: Path, command: str) -> None:
    config = docker_config(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "bot", *command.split(), "--config", str(config)],
        capture_output=True, text=True, env=docker_down_environment(tmp_path), timeout=60, check=False,
    )  # fmt: skip
    said = done.stdout + done.stderr

    assert (
        "agents[0].sandbox: agent 'main': its sandboxed commands will be refused: the docker daemon is not "
        f"reachable ({DAEMON_DOWN}): start the daemon (systemctl start docker)" in " ".join(said.split())
    ), said


# --- the tools.sandbox policy layer --------------------------------------------------------------------------------


@pytest.fixture
def policy_config() -> Iterator[Any]:
    yield parse_config("agents: [{id: main}]\ntools:\n  sandbox: {deny: [web_fetch, read]}\n")


@pytest.mark.parametrize(
    ("is_owner", "peer", "sandboxed"),
    [(True, Peer("direct", "1"), False), (True, Peer("group", "-100"), True), (False, Peer("direct", "2"), True)],
)
def test_the_sandbox_policy_layer_applies_to_sandboxed_runs(
    policy_config: Any, is_owner: bool, peer: Peer, sandboxed: bool
) -> None:
    settings = policy_config.agent("main").sandbox
    run = RunInfo(
        agent="main",
        session_key=SESSION,
        channel="telegram",
        sender_is_owner=is_owner,
        sandbox=sandbox_for(settings, channel="telegram", is_owner=is_owner, peer_kind=peer.kind),
    )
    result = policy_for(policy_config, builtin_registry(messenger=NoChats()), run, peer=peer)
    gone = {item.name: item.layer for item in result.removed}
    if sandboxed:
        assert (gone["web_fetch"], gone["read"]) == ("sandbox", "sandbox")
    else:
        assert "web_fetch" in result.names and "read" in result.names


# --- through the gateway: a real `bot run` --------------------------------------------------------------------------

OWNER = 4242
STARTED = "channel telegram account main started"


def bot_config(tmp_path: Path, llm: FakeLLM, tg: FakeTelegram) -> dict[str, Any]:
    account = telegram(tg, streaming="off", dm_policy="open", group_policy="open", require_mention=False)
    return config_dict(
        tmp_path, llm, account, agents=[{"id": "main", "exec": {"security": "full", "ask": "off"}}],
        owners=[f"telegram:{OWNER}"],
    )  # fmt: skip


def exec_results(llm: FakeLLM) -> list[dict[str, Any]]:
    """The exec results the model got, in order."""
    found = []
    for request in llm.requests:
        message = request.body["messages"][-1]
        if message["role"] == "tool":
            found.append(json.loads(message["content"]))
    return found


@pytest.mark.usefixtures("bwrap_works")
async def test_the_gateway_sandboxes_group_chats_but_not_the_owners_dm(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    probe = "cat /proc/1/cmdline | tr '\\0' ' '; echo; test -e /var/lib && echo host-files-$((1 + 1)); hostname"
    call = Reply.tool_calls(ToolCallSpec("exec", {"command": probe}))
    fake_llm.script(call, "done in the DM", call, "done in the group")
    async with bot_run(bot_config(tmp_path, fake_llm, fake_telegram), tmp_path, STARTED):
        await fake_telegram.private_message("look around", user_id=OWNER, name="Owner")
        await eventually(lambda: len(exec_results(fake_llm)) == 1, "the DM's command to run")
        await fake_telegram.group_message("look around", user_id=OWNER, name="Owner")
        await eventually(lambda: len(exec_results(fake_llm)) == 2, "the group's command to run")
    in_dm, in_group = exec_results(fake_llm)
    # The owner's DM keeps the host's files (shielded from the bot in a PID namespace of its own, see test_shield.py)
    assert "sandbox" not in in_dm and "host-files-2" in in_dm["output"]
    assert not in_dm["output"].rstrip().endswith("sandbox")
    assert in_group["sandbox"] == {"network": False}
    assert "bwrap" in in_group["output"] and in_group["output"].rstrip().endswith("sandbox")
    assert "host-files-2" not in in_group["output"]
