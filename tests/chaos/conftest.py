"""Fixtures of the chaos tier: a PostgreSQL server of its own (the nemesis crashes and
restarts it, so it must not be the session's shared one) and backends for each run."""

from __future__ import annotations

import os
import uuid

import pytest
from _servers import AWS_TEST_ENV, Backend, DurablePostgresServer


@pytest.fixture(scope="module")
def chaos_pg():
    server = DurablePostgresServer()
    yield server
    server.close()


@pytest.fixture
def make_backend(tmp_path, monkeypatch, request):
    """``make_backend("sqlite" | "postgres")``: a fresh, migrated backend."""

    def make(kind: str) -> Backend:
        if kind == "sqlite":
            root = tmp_path / f"sqlite-{uuid.uuid4().hex[:6]}"
            root.mkdir()
            b = Backend("sqlite", f"sqlite:///{root}/broker.db", (root / "segments").as_uri())
            b.env = {"TXN_BROKER_DATABASE_URL": b.database_url, "TXN_BROKER_STORAGE_URL": b.storage_url}
            return b
        from txn_broker.migrations import upgrade

        pg = request.getfixturevalue("chaos_pg")
        s3 = request.getfixturevalue("s3_server")
        url = pg.new_database(f"chaos_{uuid.uuid4().hex[:10]}")
        upgrade(url)
        b = Backend("postgres", url, f"s3://{s3.new_bucket()}/segments")
        b.env = {"TXN_BROKER_DATABASE_URL": url, "TXN_BROKER_STORAGE_URL": b.storage_url,
                 "TXN_BROKER_S3_ENDPOINT_URL": s3.endpoint_url, **AWS_TEST_ENV}
        monkeypatch.setenv("TXN_BROKER_S3_ENDPOINT_URL", s3.endpoint_url)
        for k, v in AWS_TEST_ENV.items():
            monkeypatch.setenv(k, v)
        return b

    return make


def chaos_out(tmp_path, name: str):
    """Where a run keeps its histories: ``$CHAOS_OUT/<name>`` if set, else pytest's tmp."""
    root = os.environ.get("CHAOS_OUT")
    from pathlib import Path

    return (Path(root) if root else tmp_path) / name
