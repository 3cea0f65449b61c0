"""A database URL naming several PostgreSQL servers (libpq multi-host, what clients of a
primary with standbys use): ``postgresql+psycopg2://user:pw@/db?host=A:P1&host=B:P2
&target_session_attrs=read-write``. The broker, its migrations and its CLI take it as any
other URL; libpq connects to the first server that accepts a read-write session. When none
does (the primary is down and the standby not promoted yet), the error is the retriable
DatabaseUnavailableError and names every server's reason, the password masked."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pyarrow as pa
import pytest
from _servers import AWS_TEST_ENV, free_port

import txn_broker
from txn_broker.errors import DatabaseUnavailableError

pytestmark = pytest.mark.integration
SCHEMA = pa.schema([("k", pa.string())])


def multi_host_url(pg_server, database: str, *ports: int, attrs: str = "read-write") -> str:
    hosts = "&".join(f"host=127.0.0.1:{port}" for port in ports)
    return (f"postgresql+psycopg2://{pg_server.user}:{pg_server.password}@/{database}?{hosts}"
            f"&target_session_attrs={attrs}")


@pytest.fixture
def database(pg_server, pg_template):
    name = f"m_{uuid.uuid4().hex[:12]}"
    pg_server.new_database(name, template=pg_template)
    yield name
    pg_server.drop_database(name)


def test_the_broker_reaches_the_writable_server_of_a_multi_host_url(pg_server, database, s3_server, monkeypatch):
    monkeypatch.setenv("TXN_BROKER_S3_ENDPOINT_URL", s3_server.endpoint_url)
    dead = free_port()  # nothing listens there: the first host of the list is down
    url = multi_host_url(pg_server, database, dead, pg_server.port)
    broker = txn_broker.connect(url, f"s3://{s3_server.new_bucket()}/segments")
    try:
        broker.create_topic("t", schema=SCHEMA)
        producer = broker.producer(transactional_id="multi")
        producer.init_transactions()
        with producer.transaction():
            producer.send("t", [{"k": "v"}])
        consumer = broker.consumer()
        consumer.subscribe(["t"])
        assert consumer.poll(max_records=10).column("k").to_pylist() == ["v"]
        assert ":***@" in repr(broker)
        assert broker.fsck().problems == []
    finally:
        broker.close()


def test_no_writable_server_is_a_retriable_error_naming_each_server(pg_server, database, s3_server, monkeypatch):
    monkeypatch.setenv("TXN_BROKER_S3_ENDPOINT_URL", s3_server.endpoint_url)
    dead = free_port()
    # the live server is a primary, so it refuses a standby session: as a promoted-too-late
    # standby refuses a read-write one during a failover
    url = multi_host_url(pg_server, database, dead, pg_server.port, attrs="standby")
    with pytest.raises(DatabaseUnavailableError) as info:
        txn_broker.connect(url, f"s3://{s3_server.new_bucket()}/segments")
    message = str(info.value)
    assert info.value.retriable
    assert f"port {dead} failed: Connection refused" in message
    assert f"port {pg_server.port} failed: server is not in hot standby mode" in message
    assert ":***@" in message and "\n" not in message
    # the CLI says the same in its one error line, without a traceback
    env = {k: v for k, v in os.environ.items() if not k.startswith("TXN_BROKER_")}
    env.update(AWS_TEST_ENV, TXN_BROKER_DATABASE_URL=url, TXN_BROKER_S3_ENDPOINT_URL=s3_server.endpoint_url,
               TXN_BROKER_STORAGE_URL=f"s3://{s3_server.new_bucket()}/segments")
    cli = subprocess.run([str(Path(sys.executable).with_name("txn-broker")), "topics", "list"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert cli.returncode == 1, cli
    assert cli.stderr.startswith("error: "), cli.stderr
    assert f"port {dead} failed: Connection refused" in cli.stderr and "Traceback" not in cli.stderr
    assert ":***@" in cli.stderr
