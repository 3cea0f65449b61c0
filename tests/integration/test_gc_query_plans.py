"""gc and fsck read the metadata through indexes (PostgreSQL EXPLAIN), so a run costs what
is new or what it checks, not the whole history."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

pytestmark = pytest.mark.integration


def _fill(engine, segments_per_partition=5000, partitions=8):
    with engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO topics VALUES (1, 'big', :n, '', '{}', 0)"), {"n": partitions})
        conn.execute(sa.text(
            "INSERT INTO partitions (topic_id, partition_no, high_watermark) "
            "SELECT 1, p, :segs * 10 FROM generate_series(0, :n - 1) p"),
            {"n": partitions, "segs": segments_per_partition})
        conn.execute(sa.text(
            "INSERT INTO transactions (txn_id, transactional_id, producer_id, producer_epoch, timeout_ms, "
            "start_ms, outcome) SELECT t, 'x', 1, 0, 1000, 0, "
            "CASE WHEN t % 2 = 0 THEN 'COMMIT' ELSE 'ABORT' END FROM generate_series(1, :segs) t"),
            {"segs": segments_per_partition})
        conn.execute(sa.text(
            "INSERT INTO segments (topic_id, partition_no, base_offset, record_count, size_bytes, object_key, "
            "producer_id, producer_epoch, base_sequence, txn_id, max_timestamp_ms, created_ms, purged_ms) "
            "SELECT 1, p, s * 10, 10, 100, 'topics/1/' || p || '/' || s, 1, 0, s, s + 1, 0, 0, "
            "CASE WHEN s % 2 = 0 AND s < :segs - 10 THEN 1 END "
            "FROM generate_series(0, :n - 1) p, generate_series(0, :segs - 1) s"),
            {"n": partitions, "segs": segments_per_partition})
        # gc has kept up: every aborted entry but the newest few is purged
        conn.execute(sa.text(
            "INSERT INTO txn_partitions (txn_id, topic_id, partition_no, first_offset, last_offset, marker, "
            "purged_ms) SELECT s + 1, 1, p, s * 10, s * 10 + 9, "
            "CASE WHEN s % 2 = 1 THEN 'COMMIT' ELSE 'ABORT' END, "
            "CASE WHEN s % 2 = 0 AND s < :segs - 10 THEN 1 END "
            "FROM generate_series(0, :n - 1) p, generate_series(0, :segs - 1) s"),
            {"n": partitions, "segs": segments_per_partition})
        conn.execute(sa.text("ANALYZE"))


def _plan(conn, query, params):
    return "\n".join(r[0] for r in conn.execute(sa.text("EXPLAIN " + query.text), params))


def test_gc_and_fsck_queries_use_indexes(backend):
    if backend.name != "postgres":
        pytest.skip("query plans are checked on PostgreSQL")
    broker = backend.connect()
    _fill(broker._db.engine)
    q = broker._db.queries
    part = {"topic_id": 1, "partition_no": 3}
    with broker._db.engine.connect() as conn:
        aborts = _plan(conn, q["unpurged_aborts"], {"after_txn_id": -1, "after_topic_id": -1,
                                                    "after_partition_no": -1, "limit": 500})
        page = _plan(conn, q["segments_page"], {**part, "after_offset": 20_000, "limit": 500})
        keys = _plan(conn, q["partition_object_keys"], {**part, "after_offset": 20_000, "limit": 5000})
        known = _plan(conn, q["object_key_known"], {"object_key": "topics/1/3/77"})
        totals = _plan(conn, q["aborted_segment_totals"], {**part, "txn_id": 4999})
    assert "txn_partitions_unpurged_aborts" in aborts and "Seq Scan on txn_partitions" not in aborts, aborts
    for plan in (page, keys, known, totals):
        assert "Seq Scan on segments" not in plan, plan
    assert "segments_object_key_key" in known, known
