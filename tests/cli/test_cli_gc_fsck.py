"""``txn-broker gc`` and ``fsck`` through the console script (and their library), on both
backends: what gc deletes, what it must never delete, and what fsck detects."""

from __future__ import annotations

import os
import sqlite3
import time

import pyarrow as pa
import pytest
import sqlalchemy as sa
from _cli import run, run_json

from txn_broker import TopicPartition
from txn_broker.log.segment_format import encode_segment, with_timestamp
from txn_broker.log.types import SegmentWrite
from txn_broker.orphans import find_orphans

pytestmark = pytest.mark.integration
SCHEMA = pa.schema([("v", pa.int64())])
DAY_MS = 24 * 3600 * 1000
GC_KEYS = {"dry_run", "orphan_grace_ms", "delete_delay_ms", "aborted_segments", "aborted_bytes",
           "retention_segments", "retention_bytes", "truncations", "objects_deleted", "objects_waiting",
           "orphans_deleted", "orphan_bytes", "orphans_within_grace", "compacted_segments", "compacted_bytes",
           "compaction_outputs", "compaction_conflicts", "iceberg_orphans_deleted", "iceberg_orphan_bytes",
           "iceberg_orphans_within_grace"}
FSCK_KEYS = {"ok", "problems", "warnings", "counts", "partitions_checked", "segments_checked", "objects_checked"}


def segments(broker, topic):
    """``[(partition, base_offset, object_key, purged)]`` of a topic, in offset order."""
    with broker._db.engine.connect() as conn:
        rows = conn.execute(sa.text(
            "SELECT s.partition_no, s.base_offset, s.object_key, s.purged_ms FROM segments s "
            "JOIN topics t ON t.topic_id = s.topic_id WHERE t.name = :name "
            "ORDER BY s.partition_no, s.base_offset"), {"name": topic}).all()
    return [(r[0], r[1], r[2], r[3] is not None) for r in rows]


def produce(broker, topic, batches, partition=0):
    producer = broker.producer()
    for values in batches:
        producer.send(topic, [{"v": v} for v in values], partition=partition)
        producer.flush()
    producer.close()


def read_all(broker, topic, isolation_level="read_committed"):
    consumer = broker.consumer(isolation_level=isolation_level)
    consumer.subscribe([topic])
    out = []
    while (batch := consumer.poll(max_records=1000)).num_rows:
        out += list(zip(batch.column("_offset").to_pylist(), batch.column("v").to_pylist(), strict=True))
    return out


def exists(broker, key):
    return broker._store.head(key) is not None


def test_gc_never_touches_an_open_transaction(backend):
    broker = backend.connect()
    # every segment is past retention at once: only the open transaction protects its data
    topic_id = broker.create_topic("t", config={"retention.ms": 1, "retention.bytes": 1}, schema=SCHEMA).topic_id
    produce(broker, "t", [[0, 1, 2], [3, 4]])
    job = broker.producer(transactional_id="long.job")
    job.init_transactions()
    job.begin_transaction()
    job.send("t", [{"v": v} for v in (5, 6, 7)], partition=0)
    job.flush()
    produce(broker, "t", [[99]])  # a non-transactional append after the open transaction began
    # an object uploaded for the transaction but not registered yet (as a Spark executor does)
    table = with_timestamp(pa.table({"v": [8, 9]}), int(time.time() * 1000))
    payload = encode_segment(table)
    uploaded = f"topics/{topic_id}/0/executor-upload.arrow"
    broker._store.put(uploaded, payload)
    open_keys = [s["object_key"] for s in broker.describe_transaction("long.job").segments]
    later_key = segments(broker, "t")[-1][2]

    report = run_json(backend, "gc", "--delete-delay-ms", "0")
    assert set(report) == GC_KEYS
    assert report["retention_segments"] == 2 and report["objects_deleted"] == 2
    assert report["truncations"] == [{"topic": "t", "partition": 0, "old_log_start_offset": 0,
                                      "new_log_start_offset": 5, "segments": 2,
                                      "size_bytes": report["retention_bytes"]}]
    assert report["orphans_within_grace"] == 1 and report["orphans_deleted"] == 0
    assert all(exists(broker, k) for k in [*open_keys, later_key, uploaded])
    assert broker.beginning_offsets([TopicPartition("t", 0)]) == {TopicPartition("t", 0): 5}

    # the upload is registered late, then the transaction commits: all of it is readable
    broker._coordinator.register_uploaded(job.transaction_handle(), [SegmentWrite(
        topic_id, "t", 0, 2, len(payload), uploaded, -1, int(time.time() * 1000))])
    job.commit_transaction()
    assert read_all(broker, "t") == [(5, 5), (6, 6), (7, 7), (8, 99), (9, 8), (10, 9)]
    assert run_json(backend, "fsck")["ok"] is True


def test_gc_deletes_aborted_expired_and_old_orphans(backend):
    broker = backend.connect()
    broker.create_topic("aborts", schema=SCHEMA)
    txn = broker.producer(transactional_id="x")
    txn.init_transactions()
    txn.begin_transaction()
    txn.send("aborts", [{"v": v} for v in (0, 1, 2)], partition=0)
    txn.flush()
    txn.abort_transaction()
    produce(broker, "aborts", [[3, 4]])
    bounded = broker.create_topic("bounded", schema=SCHEMA, config={"retention.bytes": 1}).topic_id
    produce(broker, "bounded", [[0], [1], [2]])
    kept = broker.create_topic("kept", schema=SCHEMA, config={"retention.ms": 7 * DAY_MS}).topic_id
    produce(broker, "kept", [[0], [1]])
    aborted_key = segments(broker, "aborts")[0][2]
    bounded_keys = [s[2] for s in segments(broker, "bounded")]
    kept_keys = [s[2] for s in segments(broker, "kept")]
    young = f"topics/{kept}/0/young-orphan.arrow"
    old = f"topics/{bounded}/0/crashed-writer.arrow"
    broker._store.put(young, b"young")
    broker._store.put(old, b"old")
    if backend.name == "sqlite":  # a local object can be made old; S3 sets its own times
        path = os.path.join(broker._store.root, old)
        os.utime(path, (time.time() - 2 * 86400, time.time() - 2 * 86400))
    old_is_old = backend.name == "sqlite"

    dry = run_json(backend, "gc", "--dry-run", "--delete-delay-ms", "0")
    assert (dry["dry_run"], dry["aborted_segments"], dry["retention_segments"]) == (True, 1, 2)
    assert (dry["orphans_deleted"], dry["orphans_within_grace"]) == ((1, 1) if old_is_old else (0, 2))
    assert all(exists(broker, k) for k in [aborted_key, *bounded_keys, young, old])
    assert not any(s[3] for s in segments(broker, "aborts"))

    # metadata first: purged and truncated, objects queued for the delete delay (60 s)
    first = run_json(backend, "gc")
    assert (first["aborted_segments"], first["retention_segments"]) == (1, 2)
    assert (first["objects_deleted"], first["objects_waiting"]) == (0, 3)
    assert exists(broker, aborted_key) and segments(broker, "aborts")[0][3] is True
    # readers skip the purged segment at every isolation level; offsets do not move
    assert read_all(broker, "aborts", "read_uncommitted") == [(3, 3), (4, 4)]
    assert read_all(broker, "bounded") == [(2, 2)]

    human = run(backend, "gc", "--delete-delay-ms", "0").out
    assert any(ln.split()[:4] == ["queued", "objects", "deleted", "3"] for ln in human.splitlines())
    assert not any(exists(broker, k) for k in [aborted_key, *bounded_keys[:2]])
    assert all(exists(broker, k) for k in [bounded_keys[2], *kept_keys, young])
    assert exists(broker, old) is not old_is_old
    assert [p.high_watermark for p in broker.describe_topic("aborts").partitions] == [5]
    assert [p.log_start_offset for p in broker.describe_topic("bounded").partitions] == [2]

    report = run_json(backend, "fsck")
    assert report["ok"] is True and {w["kind"] for w in report["warnings"]} == {"orphan_object"}
    assert {w["object_key"] for w in report["warnings"]} == ({young} if old_is_old else {young, old})
    # an explicit grace of 0 takes every unregistered object
    assert run_json(backend, "gc", "--orphan-grace-ms", "0")["orphans_deleted"] == (1 if old_is_old else 2)
    assert not exists(broker, young) and run_json(backend, "fsck")["warnings"] == []
    assert all(exists(broker, k) for k in kept_keys)


def test_orphan_grace_is_measured_by_age(backend):
    """Library level, where the time between creating an object and gc is short and known."""
    broker = backend.connect()
    topic_id = broker.create_topic("t", schema=SCHEMA).topic_id
    grace = 2500
    old = f"topics/{topic_id}/0/old.arrow"
    broker._store.put(old, b"old")
    deadline = time.monotonic() + 60
    while not any(o.key == old and o.age_ms > grace + 100 for o in find_orphans(broker._db, broker._store)):
        assert time.monotonic() < deadline
        time.sleep(0.2)
    young = f"topics/{topic_id}/0/young.arrow"
    broker._store.put(young, b"young")
    report = broker.gc(orphan_grace_ms=grace)
    assert (report.orphans_deleted, report.orphans_within_grace) == (1, 1)
    assert not exists(broker, old) and exists(broker, young)


def test_fsck_detects_a_deleted_object_and_a_corrupted_size(backend):
    broker = backend.connect()
    broker.create_topic("t", partitions=2, schema=SCHEMA)
    produce(broker, "t", [[0, 1], [2]], partition=0)
    produce(broker, "t", [[3]], partition=1)
    clean = run_json(backend, "fsck")
    assert clean == {"ok": True, "problems": [], "warnings": [], "counts": {}, "partitions_checked": 2,
                     "segments_checked": 3, "objects_checked": 3}
    (_, _, deleted, _), (_, _, corrupted, _), _ = segments(broker, "t")
    broker._store.delete([deleted])
    broker._store.put(corrupted, broker._store.get(corrupted) + b"garbage")

    human = run(backend, "fsck", expect=1).out.splitlines()
    assert any(ln.startswith("PROBLEM  missing_object") and deleted in ln for ln in human)
    assert any(ln.startswith("PROBLEM  size_mismatch") and corrupted in ln for ln in human)
    assert human[-1].startswith("fsck: INCONSISTENT: 2 partitions, 3 segments")
    report = run_json(backend, "fsck", expect=1)
    assert set(report) == FSCK_KEYS and report["ok"] is False
    assert report["counts"] == {"missing_object": 1, "size_mismatch": 1}
    assert {(p["kind"], p["object_key"], p["topic"], p["partition"]) for p in report["problems"]} == {
        ("missing_object", deleted, "t", 0), ("size_mismatch", corrupted, "t", 0)}
    assert set(report["problems"][0]) == {"kind", "message", "topic", "partition", "object_key", "txn_id",
                                          "offset", "size_bytes", "age_ms"}


def _tamper(backend, broker, *statements):
    """Change the metadata behind the broker's back, foreign keys off (a damaged database)."""
    if backend.name == "sqlite":
        conn = sqlite3.connect(broker._db.url.database)
        try:
            for s in statements:
                conn.execute(s)
            conn.commit()
        finally:
            conn.close()
        return
    with broker._db.engine.begin() as conn:
        conn.execute(sa.text("SET LOCAL session_replication_role = replica"))
        for s in statements:
            conn.execute(sa.text(s))


def test_fsck_detects_offset_and_marker_inconsistencies(backend):
    broker = backend.connect()
    gap = broker.create_topic("gap", schema=SCHEMA).topic_id
    overlap = broker.create_topic("overlap", schema=SCHEMA).topic_id
    broker.create_topic("txns", partitions=2, schema=SCHEMA)
    produce(broker, "gap", [[0], [1], [2]])
    produce(broker, "overlap", [[0], [1]])
    p = broker.producer(transactional_id="p")
    p.init_transactions()
    with p.transaction():
        p.send("txns", [{"v": 1}], partition=0)
        p.send("txns", [{"v": 2}], partition=1)
    txn_id = broker.describe_transaction("p").txn_id
    assert broker.fsck().ok
    _tamper(backend, broker,
            f"DELETE FROM segments WHERE topic_id = {gap} AND base_offset = 1",
            f"UPDATE segments SET record_count = 2 WHERE topic_id = {overlap} AND base_offset = 0",
            f"UPDATE transactions SET outcome = 'ABORT' WHERE txn_id = {txn_id}",
            f"DELETE FROM txn_partitions WHERE txn_id = {txn_id} AND partition_no = 1",
            "INSERT INTO txn_partitions (txn_id, topic_id, partition_no, record_count, size_bytes, marker) "
            f"VALUES (987654, {gap}, 0, 0, 0, 'COMMIT')")
    report = broker.fsck()
    assert not report.ok
    kinds = {(f.kind, f.topic) for f in report.problems}
    assert kinds == {("offset_gap", "gap"), ("offset_overlap", "overlap"),
                     ("marker_outcome_mismatch", "txns"), ("segment_without_transaction_entry", "txns"),
                     ("marker_without_transaction", "gap")}
    gap_problem = next(f for f in report.problems if f.kind == "offset_gap")
    assert (gap_problem.partition, gap_problem.offset) == (0, 1)
