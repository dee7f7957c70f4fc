"""Real servers for the tests: a PostgreSQL cluster from the system's binaries and an
``mlflow server`` in a process group of its own (killed and restarted as a crash would).

PostgreSQL refuses to run as root: as root, the cluster belongs to the ``postgres`` user and
its commands run through ``runuser``. Where no PostgreSQL binaries are found, or the cluster
cannot start, :func:`postgres_or_skip` skips the test naming why.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (now)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def postgres_bin() -> Path | None:
    """The directory of PostgreSQL's server binaries (``initdb``, ``pg_ctl``), or None."""
    found = shutil.which("pg_ctl")
    if found and shutil.which("initdb"):
        return Path(found).resolve().parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(p.split("/")[4]))
    return Path(versions[-1]).parent if versions else None


class Postgres:
    """A throwaway PostgreSQL cluster on 127.0.0.1:``port`` (trust authentication, user
    ``postgres``), in a directory of its own; :meth:`stop` removes it."""

    def __init__(self, bin_dir: Path, port: int) -> None:
        self.bin_dir, self.port = bin_dir, port
        self.root = Path(tempfile.mkdtemp(prefix="rlplat-pg-"))
        self.data = self.root / "data"
        self.as_postgres = os.geteuid() == 0  # the server refuses to run as root
        if self.as_postgres:
            user = pwd.getpwnam("postgres")
            os.chown(self.root, user.pw_uid, user.pw_gid)

    def _run(self, *command: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        prefix = ["runuser", "-u", "postgres", "--"] if self.as_postgres else []
        return subprocess.run([*prefix, *command], capture_output=True, text=True, timeout=timeout, cwd=self.root)

    def start(self, database: str | None = "mlflow") -> str | None:
        """Create the cluster, start it and create ``database`` (None: none); returns None,
        or why it could not."""
        port = str(self.port)
        steps: list[list[str]] = [
            [str(self.bin_dir / "initdb"), "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync"],
            [
                str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-l", str(self.root / "server.log"), "-w",
                "-o", f"-p {port} -h 127.0.0.1 -k {self.root} -F", "start",
            ],
        ]  # fmt: skip
        if database is not None:
            steps.append([str(self.bin_dir / "createdb"), "-h", "127.0.0.1", "-p", port, "-U", "postgres", database])
        for command in steps:
            if not Path(command[0]).exists() and not shutil.which(command[0]):
                return f"{command[0]} not found"
            done = self._run(*command)
            if done.returncode != 0:
                return f"{Path(command[0]).name} failed: {(done.stderr or done.stdout).strip()[-400:]}"
        return None

    @property
    def uri(self) -> str:
        """The SQLAlchemy URI of the database ``mlflow`` (psycopg, SQLAlchemy's default driver)."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/mlflow"

    def stop(self) -> None:
        """Stop the server at once and remove the cluster."""
        if self.data.is_dir():
            self._run(str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop", timeout=60)
        shutil.rmtree(self.root, ignore_errors=True)


def postgres_or_skip(database: str | None = "mlflow") -> Postgres:
    """A started :class:`Postgres` with ``database`` created (None: none), or ``pytest.skip``
    naming what is missing."""
    try:
        import psycopg  # noqa: F401  (SQLAlchemy's default PostgreSQL driver: the rlplat[postgres] extra)
    except ImportError:
        pytest.skip("psycopg is not installed: pip install 'rlplat[postgres]'")
    bin_dir = postgres_bin()
    if bin_dir is None:
        pytest.skip("no PostgreSQL server binaries (initdb, pg_ctl) on the PATH or in /usr/lib/postgresql")
    if os.geteuid() == 0 and (shutil.which("runuser") is None or not _has_user("postgres")):
        pytest.skip("running as root, and no postgres user or runuser to run PostgreSQL as")
    cluster = Postgres(bin_dir, free_port())
    problem = cluster.start(database)
    if problem is not None:
        cluster.stop()
        pytest.skip(f"PostgreSQL could not start: {problem}")
    return cluster


def _has_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


class MlflowServer:
    """``mlflow server`` on 127.0.0.1:``port`` with the backend store ``store`` (default: an
    sqlite file in ``root``) and proxied artifacts in ``root``; killed (SIGKILL, its whole
    process group) and restarted on the same port and store."""

    def __init__(self, root: Path, port: int, store: str | None = None) -> None:
        self.root, self.port = root, port
        self.db = root / "server.db"
        self.store = store or f"sqlite:///{self.db}"
        self.uri = f"http://127.0.0.1:{port}"
        self.process: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        """The command that starts it."""
        return [
            str(BIN / "mlflow"), "server", "--host", "127.0.0.1", "--port", str(self.port),
            "--backend-store-uri", self.store, "--artifacts-destination", str(self.root / "artifacts"),
            "--workers", "1",
        ]  # fmt: skip

    def start(self, timeout: float = 90.0) -> bool:
        """Start it and wait until ``/health`` answers; returns whether it did."""
        with open(self.root / "server.log", "ab") as log:
            self.process = subprocess.Popen(
                self.command(), cwd=self.root, stdout=log, stderr=log, start_new_session=True
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.process.poll() is None:
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=1) as answer:
                    if answer.status == 200:
                        return True
            except OSError:
                time.sleep(0.2)
        return False

    def kill(self) -> None:
        """Kill it as a crash would: its whole process group, no clean shutdown."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)

    def log(self) -> str:
        path = self.root / "server.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""
