"""What a run reads from its agent's folders before it starts (the bootstrap files, the skills report, the sender's
folder made ready), kept between runs: while a stat of each file and folder it came from shows nothing changed, a
run reads nothing again and makes no trip off the event loop."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.images import has_images, load_recent_images
from agent.messages import Message
from agent.prompt import load_bootstrap
from bot.config.settings import Config
from bot.runs.assemble import skill_folders
from tools.base import RunInfo
from tools.owner_files import BOOTSTRAP_FILES
from tools.provenance import SENDER_RECORDS, SENDERS_FOLDER, prepare_root, scoped
from tools.skills import SKILL_FILE, SkillReport

__all__ = ["INPUTS_KEPT", "RunInputs", "Stamp", "stamp"]

INPUTS_KEPT = 4_096  # remembered reads (an agent's skills, a workspace's bootstrap files, a sender's folder)
SETTLED_NS = 2_000_000_000  # a folder's listing is kept once its last change is this old (`RunInputs._names`)

Stamp = tuple[int, int, int, int, int] | None  # a path's device, inode, type and mode, size, change time; None: absent


def stamp(path: str | Path, *, follow: bool = True, content: bool = True) -> Stamp:
    """What changes when the file or folder at `path` does: for a folder, an entry added, removed or renamed; for a
    file, its content. Without `follow`, a symbolic link is stamped as itself; without `content`, only what the
    path is (another file or folder in its place, or a link) changes the stamp."""
    try:
        info = os.stat(path, follow_symlinks=follow)
    except (OSError, ValueError):
        return None
    if not content:
        return (info.st_dev, info.st_ino, info.st_mode, 0, 0)
    return (info.st_dev, info.st_ino, info.st_mode, info.st_size, info.st_mtime_ns)


@dataclass(frozen=True)
class _Kept:
    stamps: tuple[Stamp, ...]
    value: object


_Read = tuple[tuple[object, ...], Callable[[], tuple[Stamp, ...]]]  # (what it is kept under, its stamps now)


class RunInputs:
    """A run's inputs (`read`), each remembered with the stamps (`stamp`) of what it came from, taken before it was
    read: a change during the read leaves stamps that no longer match, so the next run reads again.

    `skills(config, agent)` makes an agent's skills report (bot.runs.assemble.skill_report); `config()` is the
    config of the moment: a reload forgets everything kept."""

    def __init__(self, skills: Callable[[Config, str], SkillReport], config: Callable[[], Config]) -> None:
        self._skills = skills
        self._config = config
        self._kept: dict[tuple[object, ...], _Kept] = {}
        self._kept_for: Config | None = None
        self._folders: dict[str, tuple[str, ...]] = {}  # each agent's skill folders (not the shipped ones)
        self._listed: dict[str, tuple[Stamp, list[str]]] = {}  # a folder's names, at the folder's stamp

    async def read(
        self, history: list[Message], run: RunInfo, image_turns: int
    ) -> tuple[list[Message], list[tuple[str, str]], SkillReport]:
        """`history` with the images of its latest `image_turns` user turns (the one being answered among them) read
        back from their files, the bootstrap files of the agent's workspace (even when the run works in a
        non-owner's own folder of it; created on first use, as the workspace is), and the agent's skills report.
        Stats run on the event loop, and so does making a sender's folder ready (a few system calls: a trip to a
        thread and back costs more); reading files, when a stat shows it is needed, does not. ScopeError for a
        run's folder that is not its sender's own (tools.provenance.prepare_root)."""
        config = self._config()
        if config is not self._kept_for or len(self._kept) > INPUTS_KEPT:
            self._kept, self._kept_for, self._folders, self._listed = {}, config, {}, {}
        found, stale = self._fresh(config, run)
        images = any(map(has_images, history))
        if not stale and not images:
            return list(history), found["bootstrap"], found["skills"]
        if stale <= {"folder"} and not images:
            return self._read(config, history, run, image_turns)
        return await asyncio.to_thread(self._read, config, history, run, image_turns)

    def _reads(self, config: Config, run: RunInfo) -> dict[str, _Read]:
        agent = run.agent
        reads: dict[str, _Read] = {"skills": (("skills", agent), lambda: self._skill_stamps(config, agent))}
        agent_workspace = run.agent_workspace or run.workspace
        if agent_workspace:
            reads["bootstrap"] = (("bootstrap", agent_workspace), lambda: self._bootstrap_stamps(agent_workspace))
            who = (run.sender_is_owner, run.channel, run.sender_id, run.sender_name)  # whom its record names
            folder = ("folder", run.workspace, run.agent_workspace, *who)
            reads["folder"] = (folder, lambda: _folder_stamps(run))
        return reads

    def _skill_stamps(self, config: Config, agent: str) -> tuple[Stamp, ...]:
        """Each folder skills are looked for in, each folder in it (itself and as a link) and its SKILL.md, and the
        PATH folders when a skill needs a program (it is offered once the program is installed). The shipped skills
        are files of the installed package, which change with its code: they are not stamped at each run."""
        folders = self._folders.get(agent)
        if folders is None:
            found = skill_folders(config, agent)
            folders = self._folders[agent] = tuple(str(folder) for source, folder in found if source != "shipped")
        stamps: list[Stamp] = []
        for folder in folders:
            stamps.append(folder_stamp := stamp(folder))
            for name in self._names(folder, folder_stamp):
                child = f"{folder}{os.sep}{name}"
                stamps += (stamp(child), stamp(child, follow=False), stamp(f"{child}{os.sep}{SKILL_FILE}"))
        # As the report kept says: after the first report that needs programs, the next run reads once more.
        kept = self._kept.get(("skills", agent))
        if kept is not None and isinstance(kept.value, SkillReport) and kept.value.needs_programs:
            path = os.environ.get("PATH", os.defpath)
            stamps += (stamp(folder) for folder in path.split(os.pathsep) if folder)
        return tuple(stamps)

    def _bootstrap_stamps(self, workspace: str) -> tuple[Stamp, ...]:
        """The workspace folder, and each bootstrap file in it: a file added, removed or renamed changes the folder's
        stamp (or, soon after its last change, the folder is listed again), so a name that is not there costs
        no stat of its own."""
        folder_stamp = stamp(workspace)
        names = self._names(workspace, folder_stamp)
        files = (stamp(os.path.join(workspace, name)) for name in BOOTSTRAP_FILES if name in names)
        return (folder_stamp, *files)

    def _names(self, folder: str, folder_stamp: Stamp) -> list[str]:
        """The names in `folder` (but those that start with a dot), sorted; none when it cannot be listed. A listing
        is kept while the folder's stamp stays the same, once the folder's last change is `SETTLED_NS` old: a
        folder's time moves in the file system's clock ticks (two seconds on FAT), so two changes within one tick
        can leave the same stamp."""
        listed = self._listed.get(folder)
        if listed is not None and listed[0] == folder_stamp:
            return listed[1]
        try:
            with os.scandir(folder) as listing:
                names = sorted(entry.name for entry in listing if not entry.name.startswith("."))
        except OSError:
            return []
        if folder_stamp is not None and folder_stamp[4] < time.time_ns() - SETTLED_NS:
            self._listed[folder] = (folder_stamp, names)
        return names

    def _fresh(self, config: Config, run: RunInfo) -> tuple[dict[str, Any], set[str]]:
        """What is kept for the run and still fresh, by name ("bootstrap": [] when it has no workspace), and the names
        whose stamps changed or that were never read."""
        reads = self._reads(config, run)
        found = self._still_kept(reads, {name: stamps() for name, (_, stamps) in reads.items()})
        return {"bootstrap": []} | found, set(reads) - set(found)

    def _still_kept(self, reads: dict[str, _Read], stamps: dict[str, tuple[Stamp, ...]]) -> dict[str, Any]:
        """The values kept for `reads` whose stamps are still `stamps`, by name."""
        return {
            name: kept.value
            for name, (key, _) in reads.items()
            if (kept := self._kept.get(key)) is not None and kept.stamps == stamps[name]
        }

    def _read(
        self, config: Config, history: list[Message], run: RunInfo, image_turns: int
    ) -> tuple[list[Message], list[tuple[str, str]], SkillReport]:
        agent_workspace = run.agent_workspace or run.workspace
        # prepare_root makes the agent's workspace on its way (a ScopeError leaves the folder unkept: the next run
        # checks again); a run without a folder of its own still gets it made, for its bootstrap files.
        if agent_workspace and prepare_root(run) is None:
            Path(agent_workspace).mkdir(parents=True, exist_ok=True)
        reads = self._reads(config, run)
        before = {name: stamps() for name, (_, stamps) in reads.items()}  # the folders as the check left them
        fresh = self._still_kept(reads, before)
        # What is kept and unchanged is not read again: a new sender of an agent only gets its own folder made ready.
        if "bootstrap" in fresh:
            bootstrap = fresh["bootstrap"]
        else:
            bootstrap = load_bootstrap(Path(agent_workspace)) if agent_workspace else []
        skills = fresh["skills"] if "skills" in fresh else self._skills(config, run.agent)
        assert isinstance(bootstrap, list) and isinstance(skills, SkillReport)
        values: dict[str, object] = {"skills": skills, "bootstrap": bootstrap, "folder": True}
        if self._kept_for is config:
            for name, (key, _) in reads.items():
                if name not in fresh:
                    self._kept[key] = _Kept(before[name], values[name])
        # The turn being answered is the latest of the `image_turns`: the history holds the ones before it.
        return load_recent_images(history, image_turns - 1), bootstrap, skills


def _folder_stamps(run: RunInfo) -> tuple[Stamp, ...]:
    """The run's folder as the last check (tools.provenance.prepare_root) left it: the folders on its way, each as
    itself (another folder in its place, or a symbolic link, which the check refuses, changes its stamp), and its
    sender's record."""
    if not run.workspace:
        return ()
    if not scoped(run):
        return (stamp(run.workspace, follow=False, content=False),)
    assert run.agent_workspace is not None
    name = os.path.basename(os.path.normpath(run.workspace))
    folders = (run.agent_workspace, os.path.join(run.agent_workspace, SENDERS_FOLDER), run.workspace)
    record = os.path.join(run.agent_workspace, SENDER_RECORDS, f"{name}.json")
    return (*(stamp(folder, follow=False, content=False) for folder in folders), stamp(record, follow=False))
