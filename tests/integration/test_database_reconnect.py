"""Stale pooled connections on PostgreSQL, without ``pool_pre_ping``.

A connection the server dropped while it sat in the pool (a restart, an administrator, an
idle timeout) fails at the first statement of the next unit of work; ``Database.run``
runs that unit of work once more on a fresh connection (nothing of it was applied). A
connection lost after a statement succeeded is a retriable DatabaseUnavailableError and
the unit of work is not run again by the database layer: its outcome is the caller's to
resolve (our requests are idempotent when retried)."""

from __future__ import annotations

import uuid

import pyarrow as pa
import pytest
import sqlalchemy as sa
from _servers import DurablePostgresServer

import txn_broker
from txn_broker.database import Database
from txn_broker.errors import DatabaseUnavailableError
from txn_broker.migrations import upgrade

pytestmark = pytest.mark.integration
SCHEMA = pa.schema([("k", pa.string())])


@pytest.fixture
def db(pg_server, pg_template):
    url = pg_server.new_database(f"r_{uuid.uuid4().hex[:12]}", template=pg_template)
    database = Database(url, pool_size=2)
    yield database
    database.dispose()
    pg_server.drop_database(sa.make_url(url).database)


def _terminate_sessions(pg_server, database: str) -> int:
    engine = sa.create_engine(pg_server.url("postgres"), isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            return len(conn.execute(sa.text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = :d AND pid <> pg_backend_pid()"), {"d": database}).all())
    finally:
        engine.dispose()


def test_a_connection_dropped_in_the_pool_is_replaced_and_the_work_runs_once(db, pg_server):
    assert db.run(lambda tx: tx.scalar("now_ms")) > 0  # a connection is pooled now
    assert _terminate_sessions(pg_server, db.url.database) >= 1
    runs = []

    def work(tx):
        runs.append(1)
        return tx.scalar("next_id", name="topic_id")

    assert db.run(work) == 1  # one id allocated: the failed first attempt applied nothing
    assert len(runs) == 2
    assert db.run(lambda tx: tx.scalar("next_id", name="topic_id")) == 2


def test_a_connection_lost_after_a_statement_is_an_unknown_outcome(db, pg_server):
    runs = []

    def work(tx):
        runs.append(1)
        tx.scalar("next_id", name="topic_id")  # succeeded
        _terminate_sessions(pg_server, db.url.database)
        return tx.scalar("next_id", name="topic_id")  # the connection is gone

    with pytest.raises(DatabaseUnavailableError) as info:
        db.run(work)
    assert info.value.retriable and len(runs) == 1  # not run again behind the caller's back
    # the database rolled the transaction back; the next unit of work gets a fresh connection
    assert db.run(lambda tx: tx.scalar("next_id", name="topic_id")) == 1


@pytest.fixture(scope="module")
def own_pg():
    """A server of this module's own: the test crashes it, so commits must be durable."""
    server = DurablePostgresServer()
    yield server
    server.close()


def test_producers_and_consumers_carry_on_after_a_postgresql_crash_and_restart(own_pg, s3_server, monkeypatch,
                                                                               caplog):
    monkeypatch.setenv("TXN_BROKER_S3_ENDPOINT_URL", s3_server.endpoint_url)
    url = own_pg.new_database("broker")
    upgrade(url)
    broker = txn_broker.connect(url, f"s3://{s3_server.new_bucket()}/segments")
    try:
        broker.create_topic("t", schema=SCHEMA)
        producer = broker.producer(transactional_id="survivor")
        producer.init_transactions()
        with producer.transaction():
            producer.send("t", [{"k": "before"}])
        own_pg.stop("immediate")  # a crash: every pooled connection dies with it
        own_pg.start()
        caplog.set_level("INFO", logger="txn_broker")
        with producer.transaction():  # no error reaches the caller: stale connections are replaced
            producer.send("t", [{"k": "after"}])
        consumer = broker.consumer()
        consumer.subscribe(["t"])
        assert consumer.poll(max_records=10).column("k").to_pylist() == ["before", "after"]
        messages = [r.getMessage() for r in caplog.records]
        assert any("retrying on a new one" in m for m in messages)  # the database layer did it
        assert not any(m.startswith("retrying after") for m in messages)  # not the producer's backoff
    finally:
        broker.close()
