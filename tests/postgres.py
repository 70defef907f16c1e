"""A throwaway PostgreSQL server for the tests (a pytest plugin): `postgres_server` starts one per run (initdb in a
temporary folder, a free port on 127.0.0.1) and `postgres_url` gives each test a fresh database on it."""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

__all__ = ["PostgresServer", "find_postgres_bin", "fresh_database", "postgres_server", "postgres_url"]

START_TIMEOUT = 60.0  # seconds the server may take to accept connections
MISSING = (
    "PostgreSQL is not installed (no initdb on PATH nor in /usr/lib/postgresql/*/bin): the store's PostgreSQL tests "
    "need it. Run `make test`, which installs it (apt-get install postgresql), or install it yourself."
)


def find_postgres_bin() -> Path | None:
    """The folder holding initdb/pg_ctl/postgres: on PATH, else Debian's /usr/lib/postgresql/<version>/bin (newest)."""
    on_path = shutil.which("initdb")
    if on_path:
        return Path(on_path).resolve().parent
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=_version_key)
    return Path(found[-1]).parent if found else None


def _version_key(path: str) -> tuple[int, ...]:
    version = Path(path).parent.parent.name
    return tuple(int(part) for part in version.split(".") if part.isdigit())


@dataclass
class PostgresServer:
    """One running server: `url` connects as the superuser `postgres` to its `postgres` database."""

    bin: Path
    folder: Path
    port: int
    process: subprocess.Popen[bytes]
    _databases: itertools.count[int]

    @property
    def data(self) -> Path:
        return self.folder / "data"

    @property
    def log(self) -> Path:
        return self.folder / "server.log"

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def new_database_name(self) -> str:
        return f"test_{next(self._databases)}"

    def stop(self) -> None:
        """Stop at once (nothing here needs to survive) and remove the folder. Stopping twice is fine."""
        if self.process.poll() is None:
            with contextlib.suppress(subprocess.SubprocessError, OSError):
                _run([str(self.bin / "pg_ctl"), "stop", "-D", str(self.data), "-m", "immediate", "-w"], timeout=30)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


_running: list[PostgresServer] = []


def start_postgres() -> PostgresServer:
    """initdb a temporary folder and start a server on a free port of 127.0.0.1; pytest.fail when it cannot."""
    bin_dir = find_postgres_bin()
    if bin_dir is None:
        pytest.fail(MISSING, pytrace=False)
    # Not in the leak check's scratch folder (mode 0700, root's): the server's user must be able to reach it.
    parent = os.environ.get("PYTEST_DEBUG_TEMPROOT") or tempfile.gettempdir()
    folder = Path(tempfile.mkdtemp(prefix="switchboard-pg-", dir=parent))
    try:
        (folder / "socket").mkdir()
        if os.geteuid() == 0:  # the server refuses to run as root: it runs as `postgres`, which owns the folder
            try:
                owner = pwd.getpwnam("postgres")
            except KeyError:
                pytest.fail("running as root, and there is no `postgres` user to run PostgreSQL as", pytrace=False)
            for path in (folder, folder / "socket"):
                os.chown(path, owner.pw_uid, owner.pw_gid)
        initdb = [str(bin_dir / "initdb"), "-D", str(folder / "data"), "-A", "trust", "-U", "postgres", "--no-sync"]
        done = _run([*initdb, "-E", "UTF8", "--locale=C"], timeout=120, cwd=folder)
        if done.returncode != 0:
            pytest.fail(f"initdb failed:\n{done.stdout.decode(errors='replace')}", pytrace=False)
        for _attempt in range(3):  # the free port may be taken by someone else before the server binds it
            server = _start(bin_dir, folder, _free_port())
            if server is not None:
                _running.append(server)
                return server
        pytest.fail(f"PostgreSQL did not start; its log:\n{_tail(folder / 'server.log')}", pytrace=False)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise


def _start(bin_dir: Path, folder: Path, port: int) -> PostgresServer | None:
    command = [
        str(bin_dir / "postgres"),
        "-D",
        str(folder / "data"),
        "-p",
        str(port),
        "-k",
        str(folder / "socket"),
        "-c",
        "listen_addresses=127.0.0.1",
        "-c",
        "fsync=off",
        "-c",
        "synchronous_commit=off",
        "-c",
        "full_page_writes=off",
        "-c",
        "max_connections=200",
    ]
    with open(folder / "server.log", "ab") as log:
        process = subprocess.Popen(_as_postgres(command), stdout=log, stderr=subprocess.STDOUT, cwd=folder)
    server = PostgresServer(bin_dir, folder, port, process, itertools.count(1))
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return None
        try:
            with psycopg.connect(server.url(), connect_timeout=2):
                return server
        except psycopg.OperationalError:
            time.sleep(0.05)
    server.stop()
    pytest.fail(f"PostgreSQL did not accept connections within {START_TIMEOUT:g} s", pytrace=False)


def _as_postgres(command: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


def _run(command: list[str], *, timeout: float, cwd: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        _as_postgres(command), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout, cwd=cwd, check=False
    )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _tail(path: Path) -> str:
    with contextlib.suppress(OSError):
        return path.read_text(errors="replace")[-4000:]
    return "(no log)"


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A PostgreSQL server for the whole run, stopped (and its folder removed) at the end."""
    server = start_postgres()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """A fresh, empty database for one test (dropped after it): its URL."""
    with fresh_database(postgres_server) as url:
        yield url


@contextlib.contextmanager
def fresh_database(server: PostgresServer) -> Iterator[str]:
    """A fresh, empty database on `server` for the block (dropped after it, whoever is still connected): its URL."""
    name = server.new_database_name()
    with psycopg.connect(server.url(), autocommit=True) as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    try:
        yield server.url(name)
    finally:
        with psycopg.connect(server.url(), autocommit=True) as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> Iterator[None]:
    # Before the leak check (tests/leaks.py) looks for processes left running, which it does before pytest tears the
    # session's fixtures down: the server is no leak.
    while _running:
        _running.pop().stop()
    return (yield)
