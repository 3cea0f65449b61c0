"""Real servers for the test suite: a PostgreSQL 15 server and moto's S3 server, each in
its own process, started by the suite itself and waited on with a deadline.

PostgreSQL refuses to run as root, so when the suite runs as root the server runs as the
``postgres`` OS user (``runuser -u postgres -- pg_ctl ...``).
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(check, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except Exception as error:  # the server is not up yet
            last = error
        time.sleep(0.1)
    raise RuntimeError(f"{what} did not become ready within {timeout:.0f}s: {last}")


def pg_bin(name: str) -> str:
    """A PostgreSQL server binary: the newest under /usr/lib/postgresql, else PATH."""
    for candidate in sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True):
        return candidate
    found = shutil.which(name)
    if not found:
        raise RuntimeError(f"{name} not found: install Debian's postgresql package")
    return found


#: moto accepts any credentials; clients (and Spark executors) get them as real ones
AWS_TEST_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@dataclass
class Backend:
    """Where a broker keeps its metadata and segments, and the environment a subprocess
    (CLI, Spark driver, Airflow task, chaos client) needs to reach them."""

    name: str
    database_url: str
    storage_url: str
    env: dict[str, str] = field(default_factory=dict)

    def connect(self, **settings: Any):  # type: ignore[no-untyped-def]
        import txn_broker

        return txn_broker.connect(self.database_url, self.storage_url, **settings)


class PostgresServer:
    """A throwaway PostgreSQL cluster on 127.0.0.1 with a superuser ``test``/``test``.
    Durability is traded for speed (``fsync``, ``synchronous_commit`` and
    ``full_page_writes`` off): the suite never survives a server crash it did not cause."""

    user = "test"
    password = "test"
    #: ``off``: a crash of the server loses transactions already reported committed
    synchronous_commit = "off"

    def __init__(self) -> None:
        self.port = free_port()
        self.host = "127.0.0.1"
        self.root = Path(tempfile.mkdtemp(prefix="txnb-pg-"))
        self.data = self.root / "data"
        self._as_postgres = os.geteuid() == 0
        if self._as_postgres:
            shutil.chown(self.root, "postgres")
        pwfile = self.root / "pw"
        pwfile.write_text(self.password)
        if self._as_postgres:
            shutil.chown(pwfile, "postgres")
        self._run(pg_bin("initdb"), "-D", str(self.data), "-U", self.user, "-A", "md5",
                  f"--pwfile={pwfile}", "-E", "UTF8", "--no-sync")
        self.start()

    def _run(self, *cmd: str) -> None:
        full = ["runuser", "-u", "postgres", "--", *cmd] if self._as_postgres else list(cmd)
        result = subprocess.run(full, capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd[:2])} failed: {result.stderr[-2000:]}")

    def start(self) -> None:
        options = (f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
                   f"-c synchronous_commit={self.synchronous_commit} -c full_page_writes=off "
                   "-c max_connections=300")
        self._run(pg_bin("pg_ctl"), "-D", str(self.data), "-o", options, "-l",
                  str(self.root / "server.log"), "-w", "-t", "60", "start")
        _wait(self._ready, "PostgreSQL")

    def stop(self, mode: str = "fast") -> None:
        """Stop the server; ``mode="immediate"`` is a crash (no checkpoint)."""
        self._run(pg_bin("pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def _ready(self) -> bool:
        engine = sa.create_engine(self.url("postgres"))
        try:
            with engine.connect() as conn:
                return conn.execute(sa.text("SELECT 1")).scalar() == 1
        finally:
            engine.dispose()

    def url(self, database: str) -> str:
        return f"postgresql+psycopg2://{self.user}:{self.password}@{self.host}:{self.port}/{database}"

    def admin(self, *statements: str) -> None:
        engine = sa.create_engine(self.url("postgres"), isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as conn:
                for statement in statements:
                    conn.execute(sa.text(statement))
        finally:
            engine.dispose()

    def new_database(self, name: str | None = None, template: str | None = None) -> str:
        """Create a database (optionally as a copy of ``template``); returns its URL."""
        name = name or f"db_{uuid.uuid4().hex[:12]}"
        clause = f' TEMPLATE "{template}"' if template else ""
        self.admin(f'CREATE DATABASE "{name}"{clause}')
        return self.url(name)

    def drop_database(self, name: str) -> None:
        self.admin(
            f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'",
            f'DROP DATABASE IF EXISTS "{name}"',
        )

    def close(self) -> None:
        try:
            self.stop("fast")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


class DurablePostgresServer(PostgresServer):
    """The suite's PostgreSQL with ``synchronous_commit=on``, for tests that crash it with
    ``pg_ctl stop -m immediate`` (the chaos nemesis, the reconnect test): with the suite's
    speed-up ``synchronous_commit=off`` a crash loses transactions already reported
    committed. The first chaos runs found exactly that (docs/reliability.md), so the
    broker's database must keep the default. ``fsync=off`` stays: the OS does not crash
    here, so what PostgreSQL wrote survives."""

    synchronous_commit = "on"


class S3Server:
    """moto's S3-protocol server in its own process."""

    def __init__(self) -> None:
        self.port = free_port()
        self.endpoint_url = f"http://127.0.0.1:{self.port}"
        exe = Path(sys.executable).with_name("moto_server")
        cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "moto.server"]
        self.log = tempfile.NamedTemporaryFile(prefix="txnb-moto-", suffix=".log", delete=False)  # noqa: SIM115
        self.proc = subprocess.Popen([*cmd, "-H", "127.0.0.1", "-p", str(self.port)],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        _wait(self._ready, "moto_server")

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"moto_server exited with {self.proc.returncode}")
        with socket.create_connection(("127.0.0.1", self.port), timeout=1):
            return True

    def client(self):  # type: ignore[no-untyped-def]
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint_url, region_name="us-east-1",
                            aws_access_key_id="testing", aws_secret_access_key="testing")

    def new_bucket(self) -> str:
        name = f"b-{uuid.uuid4().hex[:16]}"
        self.client().create_bucket(Bucket=name)
        return name

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()
        os.unlink(self.log.name)
