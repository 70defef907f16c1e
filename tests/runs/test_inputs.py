"""RunInputs keeps what a run reads from its agent's folders and reads again exactly when a file or folder it came
from changes: a bootstrap file edited, a skill added or edited, a sender's folder replaced by a link, a reload."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from configs import config_of

from bot.config import Config
from bot.runs.assemble import skill_report
from bot.runs.inputs import RunInputs
from tools.base import RunInfo
from tools.provenance import ScopeError
from tools.skills import SHIPPED_SKILLS, SkillReport


class Reads:
    """A RunInputs over `config`, counting the skills reports it makes (each is a read off the event loop)."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.made = 0
        self.inputs = RunInputs(self._skills, lambda: self.config)

    def _skills(self, config: Config, agent: str) -> SkillReport:
        self.made += 1
        return skill_report(config, agent, ())

    def read(self, run: RunInfo) -> tuple[list[tuple[str, str]], list[str]]:
        _, bootstrap, skills = asyncio.run(self.inputs.read([], run, 4))
        return bootstrap, sorted(skill.description for skill in skills.eligible)


def owner_run(workspace: Path) -> RunInfo:
    return RunInfo(agent="main", session_key="s", sender_is_owner=True, workspace=str(workspace))


def stranger_run(workspace: Path, name: str = "Ann", sender: str = "7") -> RunInfo:
    folder = workspace / "senders" / f"telegram-{sender}"
    return RunInfo(
        agent="main", session_key="s", channel="telegram", sender_id=sender, sender_name=name,
        workspace=str(folder), agent_workspace=str(workspace),
    )  # fmt: skip


def write_skill(folder: Path, description: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "SKILL.md").write_text(f"---\nname: {folder.name}\ndescription: {description}\n---\nSteps.\n")


def test_unchanged_folders_are_read_once_and_each_change_is_read_again(tmp_path: Path) -> None:
    reads = Reads(config_of(tmp_path, "http://127.0.0.1:9/v1"))
    workspace = reads.config.workspace("main")
    run = owner_run(workspace)
    first = reads.read(run)
    assert reads.read(run) == first and reads.read(run) == first
    assert reads.made == 1

    (workspace / "AGENTS.md").write_text("Be brief.")
    bootstrap, _ = reads.read(run)
    assert bootstrap == [("AGENTS.md", "Be brief.")]
    (workspace / "AGENTS.md").write_text("Be very brief, always.")  # the same folder, the file's content
    assert reads.read(run)[0] == [("AGENTS.md", "Be very brief, always.")]

    write_skill(workspace / "skills" / "deploy", "Deploys the site.")
    assert "Deploys the site." in reads.read(run)[1]
    write_skill(workspace / "skills" / "deploy", "Deploys the site, then checks it.")  # edited in place
    assert "Deploys the site, then checks it." in reads.read(run)[1]
    (workspace / "skills" / "later").mkdir()
    reads.read(run)
    write_skill(workspace / "skills" / "later", "Added to a folder that was there.")  # the folder list is the same
    assert "Added to a folder that was there." in reads.read(run)[1]
    made = reads.made
    reads.read(run)
    assert reads.made == made  # and kept again once nothing changes


def test_a_reload_reads_everything_again(tmp_path: Path) -> None:
    reads = Reads(config_of(tmp_path, "http://127.0.0.1:9/v1"))
    run = owner_run(reads.config.workspace("main"))
    reads.read(run)
    reads.read(run)
    reads.config = config_of(tmp_path, "http://127.0.0.1:9/v1", agents=[{"id": "main", "skills": ["none-*"]}])
    assert reads.read(run)[1] == []  # the new allow list applies at once
    assert reads.made == 2


def test_a_senders_folder_replaced_by_a_link_is_refused_on_the_next_run(tmp_path: Path) -> None:
    reads = Reads(config_of(tmp_path, "http://127.0.0.1:9/v1"))
    workspace = reads.config.workspace("main")
    run = stranger_run(workspace)
    reads.read(run)
    reads.read(run)
    assert reads.made == 1
    folder = Path(run.workspace or "")
    assert folder.is_dir()
    folder.rmdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, folder)
    with pytest.raises(ScopeError):
        reads.read(run)


def test_a_new_sender_gets_a_folder_on_the_event_loop_and_the_agents_files_are_not_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads = Reads(config_of(tmp_path, "http://127.0.0.1:9/v1"))
    workspace = reads.config.workspace("main")
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "AGENTS.md").write_text("Be brief.")
    first = reads.read(stranger_run(workspace))
    trips: list[object] = []
    real = asyncio.to_thread

    async def counted(func: Any, /, *args: Any, **kwargs: Any) -> Any:
        trips.append(func)
        return await real(func, *args, **kwargs)

    monkeypatch.setattr(asyncio, "to_thread", counted)
    for sender in ("8", "9"):
        run = stranger_run(workspace, f"Guest {sender}", sender)
        assert reads.read(run) == first
        assert Path(run.workspace or "").is_dir()
        assert (workspace / ".switchboard" / "senders" / f"telegram-{sender}.json").is_file()
    assert reads.made == 1 and trips == []  # one skills report for the agent; each folder made without a thread
    (workspace / "AGENTS.md").write_text("Be very brief.")
    assert reads.read(stranger_run(workspace, "Guest 10", "10"))[0] == [("AGENTS.md", "Be very brief.")]
    assert len(trips) == 1 and reads.made == 1  # an edited file is read again, off the event loop


def test_a_sender_who_changes_their_name_is_recorded_again(tmp_path: Path) -> None:
    reads = Reads(config_of(tmp_path, "http://127.0.0.1:9/v1"))
    workspace = reads.config.workspace("main")
    reads.read(stranger_run(workspace, "Ann"))
    records = list(workspace.rglob("telegram-7.json"))
    assert records, "the sender's record is written"
    record = records[0]
    assert "Ann" in record.read_text()
    reads.read(stranger_run(workspace, "Annie"))
    assert "Annie" in record.read_text()
    record.unlink()  # gone (a person removed it): the next run writes it again
    reads.read(stranger_run(workspace, "Annie"))
    assert record.is_file()
    record.write_text('{"channel": "tel')  # a new sender's record is made in place: a crash can leave it cut short
    reads.read(stranger_run(workspace, "Annie", "7"))
    assert json.loads(record.read_text())["name"] == "Annie"
    assert [path.name for path in record.parent.iterdir()] == [record.name]  # no temporary file left behind


def test_the_shipped_skills_are_not_stamped_at_each_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """They are files of the installed package, which change with its code: a run stats its own folders only. They
    are still offered (found by the report, which reads them with everything else)."""
    reads = Reads(config_of(tmp_path, "http://127.0.0.1:9/v1"))
    run = owner_run(reads.config.workspace("main"))
    _, skills = reads.read(run)
    assert skills, "the shipped skills are offered"
    looked_at: list[str] = []
    real_stat = os.stat

    def stat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        looked_at.append(str(path))
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", stat)
    assert reads.read(run)[1] == skills
    assert reads.made == 1
    assert looked_at, "the run's own folders are stamped"
    assert not [path for path in looked_at if path.startswith(str(SHIPPED_SKILLS))]


def test_a_missing_bootstrap_file_costs_no_stat_once_its_folder_has_settled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads = Reads(config_of(tmp_path, "http://127.0.0.1:9/v1"))
    workspace = reads.config.workspace("main")
    run = owner_run(workspace)
    workspace.mkdir(parents=True)
    (workspace / "SOUL.md").write_text("Kind.")
    settled = time.time_ns() - 10_000_000_000
    os.utime(workspace, ns=(settled, settled))  # last changed ten seconds ago
    assert reads.read(run)[0] == [("SOUL.md", "Kind.")]
    looked_at: list[str] = []
    real_stat = os.stat

    def stat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        looked_at.append(os.path.basename(str(path)))
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", stat)
    assert reads.read(run)[0] == [("SOUL.md", "Kind.")]
    assert "SOUL.md" in looked_at and not {"AGENTS.md", "USER.md", "TOOLS.md"} & set(looked_at)
    monkeypatch.undo()
    (workspace / "AGENTS.md").write_text("Be brief.")  # the folder's stamp changes with it
    assert reads.read(run)[0] == [("AGENTS.md", "Be brief."), ("SOUL.md", "Kind.")]


def test_a_file_added_within_the_same_clock_tick_as_its_folders_last_change_is_seen(tmp_path: Path) -> None:
    """A folder's time moves in the file system's clock ticks: two changes within one leave the same stamp. A
    listing is kept only once the folder has been still for two seconds, so what the second change added is seen."""
    reads = Reads(config_of(tmp_path, "http://127.0.0.1:9/v1"))
    workspace = reads.config.workspace("main")
    run = owner_run(workspace)
    skills = workspace / "skills"
    write_skill(skills / "deploy", "Deploys the site.")
    tick = os.stat(skills).st_mtime_ns
    assert "Deploys the site." in reads.read(run)[1]
    write_skill(skills / "backup", "Backs the site up.")
    os.utime(skills, ns=(tick, tick))  # as if in the same tick: the folder's stamp is what it was
    assert "Backs the site up." in reads.read(run)[1]
    bootstrap_tick = os.stat(workspace).st_mtime_ns
    (workspace / "AGENTS.md").write_text("Be brief.")
    os.utime(workspace, ns=(bootstrap_tick, bootstrap_tick))
    assert reads.read(run)[0] == [("AGENTS.md", "Be brief.")]
