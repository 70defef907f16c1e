"""The sandbox `exec` and `process` commands run in: bubblewrap (or docker), only the workspace writable, no network;
and the shield everything else the bot runs (an owner's command, an MCP server) runs under: apart from the bot."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import secrets
import shutil
import signal
import subprocess
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "ETC_FILES",
    "NETWORK_ETC_FILES",
    "SYSTEM_DIRS",
    "BotFolders",
    "Launch",
    "SandboxSettings",
    "bwrap_argv",
    "docker_argv",
    "is_sandboxed",
    "launch",
    "process_limit_enforced",
    "sandbox_environment",
    "sandbox_for",
    "sandbox_problem",
    "sandbox_problem_sync",
    "shield",
    "shield_argv",
    "shield_problem",
]

SandboxMode = Literal["off", "non-main", "all"]
SandboxBackend = Literal["bwrap", "docker"]

CONSOLE_CHANNEL = "console"  # `bot chat`: only the machine's user can type into it
SANDBOX_UID = 1000  # the uid and gid commands run as inside the sandbox
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
SANDBOX_HOSTNAME = "sandbox"
SHELL = "/bin/sh"
# Where the helper programs must come from: folders the sandbox mounts, so the path is the same inside.
SYSTEM_PATH = "/usr/bin:/bin:/usr/sbin:/sbin"
PROBE_TIMEOUT = 10.0
# Asking the docker daemon whether it is there: a daemon slower than this to say its version is as good as down
# for a command that waits on it, and `bot config check` should not hang on one.
DOCKER_PROBE_TIMEOUT = 5.0
NAME_PREFIX = "switchboard-sandbox-"
RELEASE_POLL_SECONDS = 0.02
RELEASE_SECONDS = 2.0  # how long an ended sandbox's processes get to be gone before its cgroup is left behind

# Mounted read-only: the folders programs are made of. A symlink (usrmerge: /bin -> usr/bin) stays a symlink.
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# The few files of /etc programs need (users' names, the dynamic linker, time zone, alternatives, CA certificates),
# each bound read-only when it exists. Nothing else of /etc (no keys, no shadow, no ssl/private).
ETC_FILES = (
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/timezone",
    "/etc/alternatives",
    "/etc/mime.types",
    "/etc/ssl/certs",
    "/etc/ssl/openssl.cnf",
    "/etc/ca-certificates",
    "/etc/ca-certificates.conf",
    "/etc/pki/tls/certs",
    "/etc/pki/ca-trust/extracted",
)
# Only with `network: true`: name resolution.
NETWORK_ETC_FILES = (
    "/etc/resolv.conf",
    "/etc/hosts",
    "/etc/host.conf",
    "/etc/gai.conf",
    "/etc/protocols",
    "/etc/services",
)


class SandboxSettings(BaseModel):
    """`agents[].sandbox`: which runs' commands are sandboxed, by what, and their limits."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: SandboxMode = Field(
        default="non-main",
        description="Which runs' commands are sandboxed: `non-main`, every run except an owner's direct messages and "
        "the local console (`bot chat`), which run shielded from the bot instead; `all`, every run; `off`, none.",
    )
    backend: SandboxBackend = Field(
        default="bwrap",
        description="`bwrap`: bubblewrap, the workspace and read-only system folders in namespaces of their own; "
        "`docker`: `docker run --rm` of `image` with the same mounts. When it is missing, sandboxed commands are "
        "refused, never run bare.",
    )
    network: bool = Field(
        default=False,
        description="Whether sandboxed commands reach the network (the host's, with /etc/resolv.conf and /etc/hosts); "
        "false: no network at all.",
    )
    image: str = Field(
        default="debian:bookworm-slim", min_length=1, description="The image sandboxed commands run in; docker only."
    )
    max_processes: int = Field(
        default=256, ge=4, description="Processes one sandbox may run at once (a fork bomb stops there); at least 4."
    )
    max_file_mb: int = Field(default=1024, ge=1, description="The largest file a command may write, in MiB.")
    cpu_seconds: int = Field(default=600, ge=1, description="Seconds of CPU time each process of a command may use.")


def is_sandboxed(settings: SandboxSettings, *, channel: str, is_owner: bool, peer_kind: str | None) -> bool:
    """Whether a run's commands are sandboxed: `all` always, `off` never, `non-main` unless the run is an owner's
    direct message or the local console (`bot chat`, which only the machine's user can type into). A run without a
    known chat (peer_kind None) on another channel counts as not direct: sandboxed."""
    if settings.mode != "non-main":
        return settings.mode == "all"
    if channel == CONSOLE_CHANNEL:
        return False
    return not (is_owner and peer_kind == "direct")


def sandbox_for(
    settings: SandboxSettings, *, channel: str, is_owner: bool, peer_kind: str | None
) -> SandboxSettings | None:
    """The settings to run this run's commands under, or None when they run unsandboxed (`RunInfo.sandbox`)."""
    return settings if is_sandboxed(settings, channel=channel, is_owner=is_owner, peer_kind=peer_kind) else None


def sandbox_environment(base: Mapping[str, str], workspace: str) -> dict[str, str]:
    """The environment inside the sandbox: the scrubbed one, with paths that exist in there."""
    env = dict(base)
    env.update(
        HOME=workspace,
        PWD=workspace,
        PATH=SANDBOX_PATH,
        TMPDIR="/tmp",
        SHELL=SHELL,
        USER=SANDBOX_HOSTNAME,
        LOGNAME=SANDBOX_HOSTNAME,
    )
    return env


# --- the backends' command lines ---------------------------------------------------------------------------------


def _system_mounts() -> list[str]:
    args: list[str] = []
    for folder in SYSTEM_DIRS:
        path = Path(folder)
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), folder]
        elif path.is_dir():
            args += ["--ro-bind", folder, folder]
    return args


def _etc_mounts(network: bool) -> list[str]:
    args: list[str] = []
    for name in ETC_FILES + (NETWORK_ETC_FILES if network else ()):
        if os.path.exists(name):  # a symlink is followed: its target may be in a folder the sandbox lacks
            args += ["--ro-bind", name, name]
    return args


def _limits(settings: SandboxSettings, prlimit: str) -> list[str]:
    """`prlimit` run first inside the sandbox, so RLIMIT_NPROC counts only the sandbox's processes."""
    return [
        prlimit,
        f"--nproc={settings.max_processes}",
        f"--fsize={settings.max_file_mb * 1024 * 1024}",
        f"--cpu={settings.cpu_seconds}",
        "--",
    ]


def bwrap_argv(
    settings: SandboxSettings,
    command: str,
    workspace: str,
    env: Mapping[str, str],
    *,
    bwrap: str = "bwrap",
    prlimit: str = "/usr/bin/prlimit",
) -> list[str]:
    """The bubblewrap command line that runs `/bin/sh -c command` in the sandbox; `env` is set inside, nothing else.

    The workspace keeps its absolute path. Order matters: /tmp is a fresh tmpfs before the workspace is bound, so a
    workspace under /tmp is still there."""
    argv = [bwrap, "--unshare-all", "--unshare-user"]
    if settings.network:
        argv.append("--share-net")
    argv += ["--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--hostname", SANDBOX_HOSTNAME]
    argv += ["--die-with-parent", "--new-session", "--clearenv"]
    for name, value in sorted(env.items()):
        argv += ["--setenv", name, value]
    argv += _system_mounts() + _etc_mounts(settings.network)
    argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    argv += ["--bind", workspace, workspace, "--chdir", workspace, "--"]
    return argv + _limits(settings, prlimit) + [SHELL, "-c", command]


def docker_argv(
    settings: SandboxSettings,
    command: str,
    workspace: str,
    env: Mapping[str, str],
    *,
    name: str,
    docker: str = "docker",
) -> list[str]:
    """The `docker run` command line with the same boundaries: only the workspace mounted (read-write, same path), a
    read-only root, a private /tmp, no network unless allowed, an unprivileged user and the same limits."""
    fsize = settings.max_file_mb * 1024 * 1024
    argv = [docker, "run", "--rm", "-i", "--name", name, "--network", "bridge" if settings.network else "none"]
    argv += ["--read-only", "--tmpfs", "/tmp", "--user", f"{SANDBOX_UID}:{SANDBOX_UID}", "--hostname", SANDBOX_HOSTNAME]
    argv += ["--cap-drop", "ALL", "--security-opt", "no-new-privileges", "--init"]
    argv += ["--pids-limit", str(settings.max_processes)]
    argv += ["--ulimit", f"fsize={fsize}:{fsize}", "--ulimit", f"cpu={settings.cpu_seconds}:{settings.cpu_seconds}"]
    argv += ["-v", f"{workspace}:{workspace}", "-w", workspace]
    for key, value in sorted(env.items()):
        argv += ["-e", f"{key}={value}"]
    return [*argv, settings.image, SHELL, "-c", command]


# --- the process limit when the bot is root: a pids cgroup --------------------------------------------------------
# The kernel never applies RLIMIT_NPROC to processes of uid 0, and the sandbox's uid maps to the bot's: run as root,
# only a pids cgroup stops a fork bomb. One is made per command when the machine lets us (cgroup v1's pids hierarchy,
# or cgroup v2 with the pids controller already enabled at the top); the command joins it before bwrap starts.


def _mounts() -> list[tuple[str, str, str, set[str]]]:
    """(root within the hierarchy, mount point, fs type, super options) of every cgroup mount."""
    found = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            fields = line.split()
            if " - " not in line or len(fields) < 5:
                continue
            after = line.split(" - ", 1)[1].split()
            if len(after) >= 3 and after[0] in ("cgroup", "cgroup2"):
                found.append((fields[3], fields[4], after[0], set(after[2].split(","))))
    return found


def _own_cgroup(v1_controller: str | None) -> str | None:
    """This process's cgroup path in the v1 hierarchy holding `v1_controller`, or in the v2 one (None)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if (v1_controller is None and controllers == "") or v1_controller in controllers.split(","):
                return path
    return None


@functools.lru_cache(maxsize=1)
def _pids_parent() -> Path | None:
    """The folder sandbox cgroups are made in, if this process may make them there."""
    for root, mount, kind, options in _mounts():
        if kind == "cgroup" and "pids" in options:
            own = _own_cgroup("pids")
            if own is not None and (own + "/").startswith(root.rstrip("/") + "/"):
                parent = Path(mount) / own[len(root.rstrip("/")) :].lstrip("/")
                if os.access(parent, os.W_OK):
                    return parent
    for _, mount, kind, _ in _mounts():
        if kind == "cgroup2":
            with contextlib.suppress(OSError):
                enabled = (Path(mount) / "cgroup.subtree_control").read_text().split()
                if "pids" in enabled and os.access(mount, os.W_OK):
                    return Path(mount)
    return None


class _PidsCgroup:
    """One command's cgroup: at most `max_processes` processes in it and below."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def make(cls, max_processes: int) -> _PidsCgroup | None:
        parent = _pids_parent()
        if parent is None:
            return None
        path = parent / (NAME_PREFIX + secrets.token_hex(6))
        try:
            path.mkdir()
        except OSError:
            return None
        made = cls(path)
        try:
            (path / "pids.max").write_text(str(max_processes))
        except OSError:
            made.remove()
            return None
        return made

    @property
    def procs(self) -> Path:
        return self.path / "cgroup.procs"

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            for pid in self.procs.read_text().split():
                with contextlib.suppress(ProcessLookupError, PermissionError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)

    def remove(self) -> bool:
        try:
            self.path.rmdir()
        except FileNotFoundError:
            return True
        except OSError:
            return False
        return True

    async def release(self) -> None:
        """Kill what is left in it and remove it, once its processes are gone (bounded; an empty folder may stay)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + RELEASE_SECONDS
        while True:
            self.kill()
            if self.remove() or loop.time() > deadline:
                return
            await asyncio.sleep(RELEASE_POLL_SECONDS)


def process_limit_enforced() -> bool:
    """Whether `max_processes` holds for bwrap sandboxes: the bot is not root (RLIMIT_NPROC applies), or it can make
    pids cgroups."""
    return os.geteuid() != 0 or _pids_parent() is not None


# --- availability -------------------------------------------------------------------------------------------------


def _install_hint(backend: SandboxBackend) -> str:
    if backend == "bwrap":
        return "install it (apt-get install bubblewrap) or set agents[].sandbox.mode: off"
    return "install docker and start its daemon, use backend: bwrap, or set agents[].sandbox.mode: off"


_DOCKER_DOWN_HINT = (
    "start the daemon (systemctl start docker) and let the bot's user reach its socket (the docker group), "
    "use backend: bwrap, or set agents[].sandbox.mode: off"
)


class _Failed(NamedTuple):
    """Why a probe failed: `started` False when it could not even be started or did not end in time (then `why` is
    the OS error or the wait)."""

    started: bool
    why: str


def _probe(argv: list[str], timeout: float = PROBE_TIMEOUT) -> _Failed | None:
    """Run a trivial command once; None when it worked."""
    try:
        done = subprocess.run(argv, capture_output=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return _Failed(False, f"no answer within {timeout:g} s")
    except OSError as error:
        return _Failed(False, str(error))
    if done.returncode == 0:
        return None
    said = done.stderr.decode(errors="replace").strip().splitlines()
    return _Failed(True, said[-1] if said else f"exit code {done.returncode}")


@functools.lru_cache(maxsize=16)
def _probe_bwrap(bwrap: str) -> str | None:
    """Run a trivial sandbox once: bwrap may be installed where it cannot create namespaces (some containers)."""
    argv = [bwrap, "--unshare-all", "--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
    argv += ["--die-with-parent", *_system_mounts(), "--proc", "/proc", "--dev", "/dev", "--", SHELL, "-c", "true"]
    failed = _probe(argv)
    if failed is None:
        return None
    if not failed.started:
        return f"bubblewrap (bwrap) cannot run here ({failed.why}); set agents[].sandbox.mode: off to run unsandboxed"
    return (
        f"bubblewrap (bwrap) cannot create its namespaces here ({failed.why}); allow user namespaces, "
        "or set agents[].sandbox.mode: off"
    )


def _probe_docker(docker: str) -> str | None:
    """Ask the daemon for its version: the client alone runs nothing, and every `docker run` fails while the daemon
    is down or its socket is not ours. Not cached, unlike bwrap's probe: a daemon comes and goes while the bot runs."""
    failed = _probe([docker, "version", "--format", "{{.Server.Version}}"], DOCKER_PROBE_TIMEOUT)
    if failed is None:
        return None
    return f"the docker daemon is not reachable ({failed.why}): {_DOCKER_DOWN_HINT}"


def sandbox_problem_sync(settings: SandboxSettings) -> str | None:
    """Why sandboxed commands cannot run now (the backend is missing or broken, docker's daemon down), or None. The
    bwrap probe is cached."""
    if settings.backend == "docker":
        docker = shutil.which("docker")
        if docker is None:
            return f"docker is not installed: {_install_hint('docker')}"
        return _probe_docker(docker)
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return f"bubblewrap (bwrap) is not installed: {_install_hint('bwrap')}"
    if shutil.which("prlimit", path=SYSTEM_PATH) is None:
        return "prlimit (util-linux) is not installed; the sandbox sets its limits with it: apt-get install util-linux"
    return _probe_bwrap(bwrap)


async def sandbox_problem(settings: SandboxSettings) -> str | None:
    """`sandbox_problem_sync` off the event loop (the first bwrap check, and every docker check, runs a process)."""
    return await asyncio.to_thread(sandbox_problem_sync, settings)


# --- starting a command -------------------------------------------------------------------------------------------

Release = Callable[[], Awaitable[None]]


async def _nothing() -> None:
    return None


@dataclass(frozen=True)
class Launch:
    """How to start one sandboxed command, and what to clean up once it has ended and been killed."""

    argv: list[str]
    release: Release = _nothing


def _docker_remover(docker: str, name: str) -> Release:
    async def remove() -> None:
        """The container outlives a killed `docker run` client: remove it by name (bounded, best effort)."""
        with contextlib.suppress(OSError):
            process = await asyncio.create_subprocess_exec(
                docker, "rm", "-f", name, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
            )
            try:
                async with asyncio.timeout(PROBE_TIMEOUT):
                    await process.wait()
            except TimeoutError:
                process.kill()
                await process.wait()

    return remove


def launch(settings: SandboxSettings, command: str, workspace: str, env: Mapping[str, str]) -> Launch:
    """The command line for `command` in the sandbox (call `sandbox_problem` first: the backend must be there)."""
    inside = sandbox_environment(env, workspace)
    if settings.backend == "docker":
        docker = shutil.which("docker") or "docker"
        name = NAME_PREFIX + secrets.token_hex(6)
        argv = docker_argv(settings, command, workspace, inside, name=name, docker=docker)
        return Launch(argv, _docker_remover(docker, name))
    bwrap = shutil.which("bwrap") or "bwrap"
    prlimit = shutil.which("prlimit", path=SYSTEM_PATH) or "/usr/bin/prlimit"
    argv = bwrap_argv(settings, command, workspace, inside, bwrap=bwrap, prlimit=prlimit)
    cgroup = _PidsCgroup.make(settings.max_processes)
    if cgroup is None:
        return Launch(argv)
    # The host's shell joins the cgroup, then becomes bwrap: everything the command starts is counted.
    joined = [SHELL, "-c", 'echo $$ > "$0" && exec "$@"', str(cgroup.procs), *argv]
    return Launch(joined, cgroup.release)


# --- outside the sandbox: the host's files, without the bot's own --------------------------------------------------
# An owner's unsandboxed command (and every stdio MCP server) still is not the bot: it runs in a PID namespace of its
# own (the bot's /proc and environment are not there, and nothing it starts outlives it), without capabilities, with
# the bot's folders hidden and pinned where they are.


@dataclass(frozen=True)
class BotFolders:
    """The bot's own folders, which nothing it runs may see or move: the config's folder (the config, `.env` and
    whatever else the bot reads from there) and the state directory. The folder a process is given to work in (an
    agent's workspace, an MCP server's `cwd`) stays in sight when it lies inside the config's folder, never when it
    lies inside the state or holds part of it."""

    config: str | None = None
    state: str | None = None

    def hidden(self) -> list[str]:
        """The folders to cover, as real paths; one inside another is covered with it, so none is listed."""
        found = sorted({os.path.realpath(path) for path in (self.config, self.state) if path is not None})
        return [path for path in found if os.path.isdir(path) and not any(_inside(path, other) for other in found)]

    def shows(self, folder: str) -> bool:
        """Whether `folder`, inside the config's folder, is bound back into sight for a process working there."""
        real = os.path.realpath(folder)
        if self.config is None or not _inside(real, os.path.realpath(self.config)):
            return False
        state = os.path.realpath(self.state) if self.state is not None else None
        return state is None or not (_inside(real, state) or _inside(state, real) or real == state)

    def hides(self, folder: str) -> bool:
        """Whether a process working in `folder` finds it covered (empty, or not there at all)."""
        real = os.path.realpath(folder)
        covered = any(real == path or _inside(real, path) for path in self.hidden())
        return covered and not self.shows(folder)


def _inside(path: str, folder: str) -> bool:
    """Whether `path` lies strictly inside `folder` (both real, absolute paths)."""
    return path != folder and path.startswith(folder.rstrip("/") + "/")


def _ancestors(path: str) -> list[str]:
    """Every folder above `path` but the root, outermost first."""
    parents = [str(parent) for parent in Path(path).parents if str(parent) != "/"]
    return parents[::-1]


def shield_argv(argv: Sequence[str], cwd: str, hide: BotFolders, *, bwrap: str = "bwrap") -> list[str]:
    """The bubblewrap command line that runs `argv` in `cwd` on the host's files, with the bot's folders covered (an
    empty read-only tmpfs over each), a PID namespace and a /dev of its own, and no capabilities.

    Covering alone is not enough: a command that renames a hidden folder, or any folder above it, carries the real
    one away and can put its own in its place, where the bot reads it next. So every folder above a hidden one is
    bound onto itself first: rename(2) of a mount point fails (EBUSY), and without capabilities (dropped even when
    the bot is root) the command cannot unmount it; a namespace it makes itself gets the mounts locked. A raw disk
    read (root owns the block devices) is the other way around the cover: hence a /dev without them."""
    out = [bwrap, "--bind", "/", "/", "--unshare-pid", "--die-with-parent", "--cap-drop", "ALL"]
    hidden = hide.hidden()
    pinned: list[str] = []
    for path in hidden:
        pinned += [parent for parent in _ancestors(path) if parent not in pinned]
    for parent in pinned:
        out += ["--bind", parent, parent]
    for path in hidden:
        out += ["--tmpfs", path]
    out += ["--dev", "/dev", "--proc", "/proc"]
    if hide.shows(cwd):  # the default workspaces lie in the config's folder
        real = os.path.realpath(cwd)
        out += ["--bind", real, real]
    for path in hidden:
        out += ["--remount-ro", path]
    return [*out, "--chdir", os.path.realpath(cwd), "--", *argv]


@functools.lru_cache(maxsize=4)
def _probe_shield(bwrap: str) -> str | None:
    failed = _probe(shield_argv(["true"], "/", BotFolders(), bwrap=bwrap))
    if failed is None:
        return None
    if not failed.started:
        return f"bubblewrap (bwrap) cannot run here ({failed.why})"
    return f"bubblewrap (bwrap) cannot create a PID namespace here ({failed.why})"


def shield_problem_sync() -> str | None:
    """Why commands cannot run shielded from the bot here (bubblewrap missing or unable), or None; cached."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bubblewrap (bwrap) is not installed: install it (apt-get install bubblewrap)"
    return _probe_shield(bwrap)


async def shield_problem() -> str | None:
    """`shield_problem_sync` off the event loop."""
    return await asyncio.to_thread(shield_problem_sync)


def shield(argv: Sequence[str], cwd: str, hide: BotFolders) -> Launch:
    """How to start `argv` shielded from the bot (call `shield_problem` first)."""
    return Launch(shield_argv(argv, cwd, hide, bwrap=shutil.which("bwrap") or "bwrap"))
