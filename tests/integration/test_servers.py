"""The suite's own servers work: a real PostgreSQL 15 and a real S3-protocol server."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

pytestmark = pytest.mark.integration


def test_postgres_server_is_real(pg_server):
    engine = sa.create_engine(pg_server.url("postgres"))
    try:
        with engine.connect() as conn:
            version = conn.execute(sa.text("SHOW server_version")).scalar()
    finally:
        engine.dispose()
    assert version.split(".")[0] == "15"


def test_s3_server_round_trips(s3_server):
    client = s3_server.client()
    bucket = s3_server.new_bucket()
    client.put_object(Bucket=bucket, Key="k", Body=b"v")
    assert client.get_object(Bucket=bucket, Key="k")["Body"].read() == b"v"
