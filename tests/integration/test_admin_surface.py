"""The Broker's admin surface on both backends (docs/api.md): the database clock, outcomes
and end times on the transaction summaries, ensure_topics, schema status and upgrade,
gc and fsck with progress, and locations safe to show."""

from __future__ import annotations

import contextlib
import time

import pyarrow as pa
import pytest

import txn_broker
from txn_broker.errors import InvalidConfigError, InvalidInputError, SchemaMismatchError

pytestmark = pytest.mark.integration

SCHEMA = pa.schema([("id", pa.int64())])


def test_clock_outcomes_and_locations(backend):
    broker = backend.connect()
    broker.create_topic("t", schema=SCHEMA)
    before = broker.now_ms()
    assert abs(before - time.time() * 1000) < 60_000

    for tid, commit in (("a.committed", True), ("a.aborted", False)):
        p = broker.producer(transactional_id=tid)
        p.init_transactions()
        with contextlib.nullcontext() if commit else pytest.raises(RuntimeError):
            with p.transaction():
                p.send("t", pa.table({"id": [1]}), partition=0)
                if not commit:
                    raise RuntimeError("abort this one")
        p.close()
    open_one = broker.producer(transactional_id="a.open", transaction_timeout_ms=600_000)
    open_one.init_transactions()
    open_one.begin_transaction()
    open_one.send("t", pa.table({"id": [2]}), partition=0)
    open_one.flush()

    rows = {s.transactional_id: s for s in broker.list_transactions()}
    assert (rows["a.committed"].outcome, rows["a.aborted"].outcome, rows["a.open"].outcome) == (
        "COMMIT", "ABORT", None)
    assert before <= rows["a.committed"].end_ms <= rows["a.committed"].now_ms
    assert rows["a.open"].end_ms is None and rows["a.open"].age_ms >= 0 and not rows["a.open"].is_hanging
    assert [s.transactional_id for s in broker.list_transactions(txn_broker.OPEN_STATES)] == ["a.open"]
    open_one.abort_transaction()

    assert "***" not in broker.storage_location and "@" not in broker.storage_location
    if backend.name == "postgres":
        assert "***" in broker.database_location
    assert broker.database_location in repr(broker)
    broker.check_storage()
    assert broker.pending_migrations() == [] and broker.upgrade_schema() == []
    done = txn_broker.upgrade_schema(backend.database_url)
    assert done.applied == [] and done.current_version
    assert done.database == broker.database_location


def test_ensure_topics_is_idempotent_and_strict(backend):
    broker = backend.connect()
    assert broker.ensure_topics({"a": (2, SCHEMA), "b": (1, None)}) == {"a": "created", "b": "created"}
    assert broker.ensure_topics({"a": (2, SCHEMA)}) == {"a": "exists"}
    with pytest.raises(InvalidConfigError, match="2 partitions, expected 3"):
        broker.ensure_topics({"a": (3, SCHEMA)})
    with pytest.raises(SchemaMismatchError):
        broker.ensure_topics({"a": (2, pa.schema([("id", pa.string())]))})


def test_ensure_topics_takes_topic_specs_with_their_own_configs(backend):
    broker = backend.connect()
    specs = [txn_broker.TopicSpec("c", 2, SCHEMA, {"retention.ms": 60_000}), txn_broker.TopicSpec("d")]
    assert broker.ensure_topics(specs, config={"retention.ms": 5_000}) == {"c": "created", "d": "created"}
    assert broker.describe_topic("c").config["retention.ms"] == 60_000
    assert broker.describe_topic("d").config["retention.ms"] == 5_000
    assert broker.ensure_topics([txn_broker.TopicSpec("c", 2, SCHEMA)]) == {"c": "exists"}
    with pytest.raises(InvalidConfigError, match="2 partitions, expected 1"):
        broker.ensure_topics([txn_broker.TopicSpec("c")])
    with pytest.raises(InvalidInputError, match="TopicSpec"):
        broker.ensure_topics(["c"])  # type: ignore[list-item]


def test_gc_and_fsck_report_progress(backend):
    broker = backend.connect()
    broker.create_topic("t", schema=SCHEMA)
    p = broker.producer()
    p.send("t", pa.table({"id": [1, 2]}), partition=0)
    p.flush()
    said: list[str] = []
    report = broker.gc(dry_run=True, progress=said.append)
    assert report.dry_run and said
    said.clear()
    assert broker.fsck(progress=said.append).ok and said


def test_bad_arguments_are_bad_input(backend):
    from txn_broker.errors import InvalidInputError

    broker = backend.connect()
    with pytest.raises(InvalidInputError, match="unknown state"):
        broker.list_transactions(["Finished"])
    with pytest.raises(InvalidInputError, match="older_than_ms"):
        broker.find_hanging_transactions(older_than_ms=-1)
