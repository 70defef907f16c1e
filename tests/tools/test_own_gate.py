"""The agent cannot touch its own gate: no workspace may hold the config file or the state directory (nor lie inside
the state), and the error words each case as it is."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bot.config.checks import own_files, workspace_conflicts
from bot.config.loading import load_config


def bot(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("SWITCHBOARD")}
    return subprocess.run(
        [sys.executable, "-m", "bot", *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=60
    )


def config_with(folder: Path, agent: str) -> Path:
    path = folder / "bindings.yaml"
    local = "defaults: {model: local/m}\nproviders: {local: {kind: openai, base_url: 'http://127.0.0.1:9/v1'}}\n"
    path.write_text(f"agents:\n  - id: main\n    default: true\n{agent}{local}")
    return path


@pytest.mark.parametrize(
    ("agent", "holds"),
    [
        ("    workspace: .\n", "holds the config file"),
        ("    workspace: ./\n", "holds the config file"),
        ("    workspace: ../\n", "holds the config file"),
        ("    workspace: ../\n", "holds the state directory"),
        ("    workspace: state/agent\n", "lies inside the state directory"),
        ("    workspace: state\n", "is the state directory"),
    ],
)
def test_a_workspace_that_holds_the_config_or_the_state_is_refused(tmp_path: Path, agent: str, holds: str) -> None:
    folder = tmp_path / "bot"
    folder.mkdir()
    config = load_config(config_with(folder, agent))
    [issue] = [issue for issue in workspace_conflicts(config, folder / "state") if holds in issue.message]
    assert issue.path == "agents[0].workspace"
    assert issue.line == 4
    assert "give it a folder of its own" in issue.message


def test_a_workspace_reached_through_a_symbolic_link_is_refused_too(tmp_path: Path) -> None:
    (tmp_path / "alias").symlink_to(tmp_path)
    config = load_config(config_with(tmp_path, f"    workspace: {tmp_path / 'alias'}\n"))
    assert [issue.path for issue in workspace_conflicts(config, tmp_path / "state")] == ["agents[0].workspace"] * 2


def test_a_state_directory_chosen_inside_a_workspace_is_refused(tmp_path: Path) -> None:
    config = load_config(config_with(tmp_path, ""))  # the default workspace: workspaces/main
    [issue] = workspace_conflicts(config, tmp_path / "workspaces" / "main" / "state")
    assert "the state directory" in issue.message
    assert issue.path == "defaults.workspace_root"


def test_separate_folders_are_fine(tmp_path: Path) -> None:
    config = load_config(config_with(tmp_path, "    workspace: work\n"))
    assert workspace_conflicts(config, tmp_path / "state") == []


def test_config_check_and_run_refuse_such_a_workspace(tmp_path: Path) -> None:
    config = config_with(tmp_path, "    workspace: .\n")
    for command in (["config", "check"], ["run"], ["chat", "-m", "hi"]):
        result = bot(*command, "--config", str(config), cwd=tmp_path)
        assert result.returncode == 1, (command, result.stderr)
        assert "bindings.yaml:4: agents[0].workspace: agent 'main': the workspace" in result.stderr
        assert "holds the config file" in result.stderr
    assert not (tmp_path / "state").exists()  # nothing was started


def test_config_check_sees_the_state_directory_it_is_given(tmp_path: Path) -> None:
    config = config_with(tmp_path, "    workspace: work\n")
    assert bot("config", "check", "--config", str(config), cwd=tmp_path).returncode == 0
    inside = bot("config", "check", "--config", str(config), "--state-dir", str(tmp_path / "work" / "st"), cwd=tmp_path)
    assert inside.returncode == 1
    assert "holds the state directory" in inside.stderr


# --- a command that names the bot's own files never runs, whoever would approve it ------------------------------


class NoChats:
    def capabilities(self, channel: str, account: str) -> None:
        return None

    def accounts(self) -> list[tuple[str, str]]:
        return []


@pytest.mark.parametrize("security", ["allowlist", "full"])
@pytest.mark.parametrize(
    "command",
    [
        "cat {folder}/bindings.yaml",
        "sed -i s/allowlist/full/ ../../bindings.yaml",
        "echo 'security: full' >> {folder}/bindings.yaml",
        "sqlite3 {folder}/state/state.db 'DELETE FROM approvals'",
        "rm -rf ../../state",
        "cp evil.db {folder}/state/state.db",
    ],
)
async def test_a_command_naming_the_config_or_the_state_is_denied_outright(
    tmp_path: Path, command: str, security: str
) -> None:
    from bot.approvals.gate import Approvals
    from bot.store import SqliteStore
    from tools.base import RunInfo, ToolContext

    folder = tmp_path / "bot"
    folder.mkdir()
    config = load_config(config_with(folder, f"    exec: {{security: {security}, ask: always}}\n"))
    state = folder / "state"
    async with await SqliteStore.open(state) as store:
        gate = Approvals(config, store, NoChats(), own_files=own_files(config, state))  # type: ignore[arg-type]
        workspace = config.workspace("main")
        workspace.mkdir(parents=True)
        run = RunInfo(agent="main", session_key="agent:main:x", workspace=str(workspace), sender_is_owner=True)
        verdict = await gate.authorize(command.format(folder=folder), ToolContext(run))
        assert (verdict.allowed, verdict.status) == (False, "denied")
        assert "the bot's own" in verdict.reason
        assert await store.find_approvals("", pending_only=False) == []  # nobody was even asked
