"""Fixtures shared by every tier: real servers and the two broker backends.

``backend`` is parametrized: ``sqlite`` (SQLite + a local directory, the embedded default)
and ``postgres`` (a real PostgreSQL server + moto's S3 server in its own process, both
started by the suite). PostgreSQL tests get a fresh database cloned from a migrated
template; S3 tests a fresh bucket.
"""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "plugins", Path(__file__).parent):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from _servers import AWS_TEST_ENV, Backend, PostgresServer, S3Server  # noqa: E402

#: the longest test (the production topology, about 10 minutes): it starts first
LONGEST = "tests/e2e/test_topology.py::"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The end-to-end tests (whole topologies and schedulers, minutes each) run first, the
    longest of all first: with two workers, a long test that starts last is the suite's
    tail, the other worker idle meanwhile. A stable sort: every other test keeps its order,
    and a module's tests stay together."""
    items.sort(key=lambda item: (not item.nodeid.startswith(LONGEST), item.get_closest_marker("e2e") is None))


@pytest.fixture(scope="session")
def pg_server():
    server = PostgresServer()
    yield server
    server.close()


@pytest.fixture(scope="session")
def s3_server():
    saved = {k: os.environ.get(k) for k in AWS_TEST_ENV}
    os.environ.update(AWS_TEST_ENV)
    server = S3Server()
    yield server
    server.close()
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="session")
def pg_template(pg_server):
    """A database migrated once, cloned for every test."""
    from txn_broker.migrations import upgrade

    name = "txnb_template"
    upgrade(pg_server.new_database(name))
    return name



@pytest.fixture(params=["sqlite", "postgres"])
def backend(request, tmp_path, monkeypatch):
    if request.param == "sqlite":
        b = Backend("sqlite", f"sqlite:///{tmp_path}/broker.db", (tmp_path / "segments").as_uri())
        b.env = {"TXN_BROKER_DATABASE_URL": b.database_url, "TXN_BROKER_STORAGE_URL": b.storage_url}
        # a backend is a broker that exists, as the PostgreSQL one's template makes it (a
        # read-only command refuses a missing SQLite file: tests/cli/test_cli_missing_database.py)
        from txn_broker import upgrade_schema

        upgrade_schema(b.database_url)
        yield b
        return
    pg = request.getfixturevalue("pg_server")
    s3 = request.getfixturevalue("s3_server")
    template = request.getfixturevalue("pg_template")
    db = f"t_{uuid.uuid4().hex[:12]}"
    url = pg.new_database(db, template=template)
    bucket = s3.new_bucket()
    b = Backend("postgres", url, f"s3://{bucket}/segments")
    b.env = {"TXN_BROKER_DATABASE_URL": url, "TXN_BROKER_STORAGE_URL": b.storage_url,
             "TXN_BROKER_S3_ENDPOINT_URL": s3.endpoint_url, **AWS_TEST_ENV}
    monkeypatch.setenv("TXN_BROKER_S3_ENDPOINT_URL", s3.endpoint_url)
    yield b
    pg.drop_database(db)
