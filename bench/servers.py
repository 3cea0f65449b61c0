"""The two storage set-ups every case runs on, started by the benchmark itself.

``sqlite``: the embedded default, SQLite + a local directory. ``postgres``: a real
PostgreSQL server (run as the ``postgres`` OS user when we are root) + moto's S3 server,
each in its own OS process, so neither shares the benchmark's interpreter. The servers
are the test suite's (``tests/_servers.py``); the benchmark only changes PostgreSQL's
durability settings back to PostgreSQL's defaults (the suite turns fsync off for speed,
which would flatter every commit latency measured here); ``--pg-durability fast`` runs
it like the suite instead, to separate the broker's own cost from the disk's.

Peers get the same storage: a sibling directory on the same file system, or a sibling
prefix in the same bucket of the same S3 server, and (pyiceberg) a separate database on
the same PostgreSQL server.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
_TESTS = ROOT / "tests"
if str(_TESTS) not in sys.path:  # the suite's server helpers (tests/_servers.py)
    sys.path.append(str(_TESTS))

from _servers import PostgresServer, S3Server, _wait, pg_bin  # noqa: E402

BACKENDS = ("sqlite", "postgres")
AWS_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
DESCRIPTIONS = {
    "sqlite": "SQLite + local directory (embedded default)",
    "postgres": "PostgreSQL 15 + S3 protocol (moto_server)",
}

#: PostgreSQL settings of the benchmark server: durable (fsync, synchronous_commit and
#: full_page_writes at their defaults), a production-like buffer pool for a 24 GB machine.
PG_SETTINGS = {"max_connections": "300", "shared_buffers": "512MB",
               # case 7 reads where the database time goes (pg_stat_statements)
               "shared_preload_libraries": "pg_stat_statements", "pg_stat_statements.track_utility": "on"}


#: what ``--pg-durability fast`` adds: the test suite's settings (a crash can lose commits)
PG_FAST_SETTINGS = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}


class BenchPostgresServer(PostgresServer):
    """The suite's throwaway PostgreSQL server, durable by default (PostgreSQL's own
    defaults), or with the suite's non-durable settings (``durable=False``)."""

    def __init__(self, durable: bool = True) -> None:
        self.durable = durable
        super().__init__()

    def start(self) -> None:
        chosen = PG_SETTINGS if self.durable else {**PG_SETTINGS, **PG_FAST_SETTINGS}
        settings = " ".join(f"-c {k}={v}" for k, v in chosen.items())
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 {settings}"
        self._run(pg_bin("pg_ctl"), "-D", str(self.data), "-o", options, "-l",
                  str(self.root / "server.log"), "-w", "-t", "60", "start")
        _wait(self._ready, "PostgreSQL")


@dataclass
class Backend:
    """One storage set-up. ``database_url``/``storage_url`` are the broker's; ``env`` is
    what a worker process needs to reach the same broker."""

    name: str
    root: Path
    database_url: str
    storage_url: str
    env: dict[str, str] = field(default_factory=dict)
    pg: PostgresServer | None = None
    s3: S3Server | None = None
    bucket: str | None = None
    _template: str | None = None

    @property
    def description(self) -> str:
        return DESCRIPTIONS[self.name]

    @property
    def is_s3(self) -> bool:
        return self.s3 is not None

    def connect(self, database_url: str | None = None, **settings: Any) -> Any:
        import txn_broker

        return txn_broker.connect(database_url or self.database_url, self.storage_url, **settings)

    def fresh_database(self, label: str) -> str:
        """A new, migrated, empty broker database on this backend's server; its URL."""
        if self.pg is None:
            path = self.root / f"{label}-{uuid.uuid4().hex[:8]}.db"
            return f"sqlite:///{path}"
        from txn_broker.migrations import upgrade

        if self._template is None:
            self._template = "bench_template"
            upgrade(self.pg.new_database(self._template))
        return self.pg.new_database(f"{label}_{uuid.uuid4().hex[:8]}", template=self._template)

    def drop_database(self, url: str) -> None:
        if self.pg is None:
            path = Path(url.removeprefix("sqlite:///"))
            for suffix in ("", "-wal", "-shm"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)
        else:
            import sqlalchemy as sa

            self.pg.drop_database(sa.make_url(url).database or "")

    def server_cpu_seconds(self) -> float:
        """CPU seconds used so far by this backend's server processes (PostgreSQL with
        all its backends, moto), from /proc; 0 for the embedded set-up or off Linux."""
        total = 0.0
        if self.s3 is not None:
            total += _proc_cpu(self.s3.proc.pid, children=False)
        if self.pg is not None:
            try:
                postmaster = int((self.pg.data / "postmaster.pid").read_text().split()[0])
            except (OSError, ValueError, IndexError):
                return total
            total += _proc_cpu(postmaster, children=True)
            for stat in Path("/proc").glob("[0-9]*/stat"):
                fields = _stat_fields(stat)
                if fields and int(fields[1]) == postmaster:
                    total += (int(fields[11]) + int(fields[12])) / _TICKS
        return total

    # -- the same storage, for baselines and peers ------------------------------------

    def location(self, prefix: str) -> str:
        """A URI next to the broker's segments: ``file:///...`` or ``s3://bucket/prefix``."""
        if self.s3 is None:
            path = self.root / "storage" / prefix
            path.mkdir(parents=True, exist_ok=True)
            return path.as_uri()
        return f"s3://{self.bucket}/{prefix}"

    def arrow_fs(self) -> tuple[Any, str]:
        """A pyarrow file system on this storage and the base path to write under."""
        from pyarrow import fs

        if self.s3 is None:
            return fs.LocalFileSystem(), str(self.root / "storage")
        return fs.S3FileSystem(
            endpoint_override=self.s3.endpoint_url, access_key=AWS_ENV["AWS_ACCESS_KEY_ID"],
            secret_key=AWS_ENV["AWS_SECRET_ACCESS_KEY"], region=AWS_ENV["AWS_DEFAULT_REGION"],
            allow_bucket_creation=False,
        ), str(self.bucket)

    @staticmethod
    def arrow_path(url: str) -> str:
        """``file:///dir`` or ``s3://bucket/prefix`` as a path for :meth:`arrow_fs`."""
        from urllib.parse import urlparse

        parsed = urlparse(url)
        return parsed.path if parsed.scheme == "file" else f"{parsed.netloc}{parsed.path}".rstrip("/")

    def delta_options(self) -> dict[str, str] | None:
        if self.s3 is None:
            return None
        return {"AWS_ENDPOINT_URL": self.s3.endpoint_url, "AWS_REGION": AWS_ENV["AWS_DEFAULT_REGION"],
                "AWS_ACCESS_KEY_ID": AWS_ENV["AWS_ACCESS_KEY_ID"],
                "AWS_SECRET_ACCESS_KEY": AWS_ENV["AWS_SECRET_ACCESS_KEY"],
                "AWS_ALLOW_HTTP": "true", "AWS_S3_ALLOW_UNSAFE_RENAME": "true"}

    def iceberg_catalog(self, name: str) -> Any:
        """pyiceberg's SqlCatalog: on SQLite for the embedded set-up, on a separate
        database of the same PostgreSQL server otherwise; warehouse on the same storage."""
        from pyiceberg.catalog.sql import SqlCatalog

        props: dict[str, str] = {"warehouse": self.location(f"iceberg-{name}")}
        if self.pg is None:
            props["uri"] = f"sqlite:///{self.root / f'iceberg-{name}.db'}"
        else:
            props["uri"] = self.pg.new_database(f"iceberg_{name}_{uuid.uuid4().hex[:6]}")
            assert self.s3 is not None
            props.update({"s3.endpoint": self.s3.endpoint_url, "s3.region": AWS_ENV["AWS_DEFAULT_REGION"],
                          "s3.access-key-id": AWS_ENV["AWS_ACCESS_KEY_ID"],
                          "s3.secret-access-key": AWS_ENV["AWS_SECRET_ACCESS_KEY"]})
        return SqlCatalog(name, **props)


_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat_fields(path: Path) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (state is [0], ppid [1],
    utime [11], stime [12], cutime [13], cstime [14])."""
    try:
        text = path.read_text()
    except OSError:
        return None
    return text[text.rfind(")") + 2:].split()


def _proc_cpu(pid: int, *, children: bool) -> float:
    fields = _stat_fields(Path(f"/proc/{pid}/stat"))
    if not fields:
        return 0.0
    ticks = int(fields[11]) + int(fields[12]) + ((int(fields[13]) + int(fields[14])) if children else 0)
    return ticks / _TICKS


def _start_sqlite(root: Path) -> Backend:
    db = f"sqlite:///{root / 'broker.db'}"
    storage = (root / "storage" / "segments").as_uri()
    return Backend("sqlite", root, db, storage,
                   env={"TXN_BROKER_DATABASE_URL": db, "TXN_BROKER_STORAGE_URL": storage})


def _start_postgres(root: Path, stack: contextlib.ExitStack, durable: bool) -> Backend:
    os.environ.update(AWS_ENV)
    pg = BenchPostgresServer(durable)
    stack.callback(pg.close)
    s3 = S3Server()
    stack.callback(s3.close)
    os.environ["TXN_BROKER_S3_ENDPOINT_URL"] = s3.endpoint_url
    bucket = s3.new_bucket()
    backend = Backend("postgres", root, "", f"s3://{bucket}/segments", pg=pg, s3=s3, bucket=bucket)
    backend.database_url = backend.fresh_database("broker")
    backend.env = {"TXN_BROKER_DATABASE_URL": backend.database_url, "TXN_BROKER_STORAGE_URL": backend.storage_url,
                   "TXN_BROKER_S3_ENDPOINT_URL": s3.endpoint_url, **AWS_ENV}
    return backend


@contextlib.contextmanager
def started(name: str, workdir: Path | None = None, *, pg_durable: bool = True) -> Iterator[Backend]:
    """Start one backend's servers; stop them and remove its files on exit."""
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; known: {', '.join(BACKENDS)}")
    base = Path(tempfile.mkdtemp(prefix=f"txnb-bench-{name}-", dir=workdir))
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, base, True)
        if name == "sqlite":
            backend = _start_sqlite(base)
            from txn_broker.migrations import upgrade

            upgrade(backend.database_url)
        else:
            backend = _start_postgres(base, stack, pg_durable)
        yield backend
