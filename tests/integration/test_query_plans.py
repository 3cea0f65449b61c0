"""The last stable offset and fetch planning use indexes (PostgreSQL EXPLAIN), so their
cost does not grow with a topic's history."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

pytestmark = pytest.mark.integration


def _fill(engine, segments_per_partition=5000, partitions=8):
    with engine.begin() as conn:
        conn.execute(sa.text(
            "INSERT INTO topics VALUES (1, 'big', :n, '', '{}', 0)"), {"n": partitions})
        conn.execute(sa.text(
            "INSERT INTO partitions (topic_id, partition_no, high_watermark) "
            "SELECT 1, p, :segs * 10 FROM generate_series(0, :n - 1) p"),
            {"n": partitions, "segs": segments_per_partition})
        conn.execute(sa.text(
            "INSERT INTO transactions (txn_id, transactional_id, producer_id, producer_epoch, timeout_ms, "
            "start_ms, outcome) "
            "SELECT t, 'x', 1, 0, 1000, 0, CASE WHEN t % 2 = 0 THEN 'COMMIT' ELSE 'ABORT' END "
            "FROM generate_series(1, :segs) t"), {"segs": segments_per_partition})
        conn.execute(sa.text(
            "INSERT INTO segments (topic_id, partition_no, base_offset, record_count, size_bytes, object_key, "
            "producer_id, producer_epoch, base_sequence, txn_id, max_timestamp_ms, created_ms) "
            "SELECT 1, p, s * 10, 10, 100, 'k-' || p || '-' || s, 1, 0, s, s + 1, 0, 0 "
            "FROM generate_series(0, :n - 1) p, generate_series(0, :segs - 1) s"),
            {"n": partitions, "segs": segments_per_partition})
        conn.execute(sa.text(
            "INSERT INTO txn_partitions (txn_id, topic_id, partition_no, first_offset, last_offset, marker) "
            "SELECT s + 1, 1, p, s * 10, s * 10 + 9, CASE WHEN s % 2 = 1 THEN 'COMMIT' ELSE 'ABORT' END "
            "FROM generate_series(0, :n - 1) p, generate_series(0, :segs - 1) s"),
            {"n": partitions, "segs": segments_per_partition})
        conn.execute(sa.text("ANALYZE"))


def _plan(conn, sql, params):
    return "\n".join(r[0] for r in conn.execute(sa.text("EXPLAIN " + sql), params))


def test_lso_and_fetch_plans_use_indexes(backend):
    if backend.name != "postgres":
        pytest.skip("query plans are checked on PostgreSQL")
    broker = backend.connect()
    engine = broker._db.engine
    _fill(engine)
    queries = broker._db.queries
    with engine.connect() as conn:
        lso = _plan(conn, queries["partition_offsets"].text, {"topic_id": 1, "partition_no": 3})
        fetch = _plan(conn, queries["fetch_plan"].text, {
            "topic_id": 1, "partition_no": 3, "start_offset": 25_000, "end_offset": 25_500,
            "max_segments": 64})
    # (the partitions table has one row per partition: scanning it is fine)
    assert "Seq Scan on txn_partitions" not in lso and "Seq Scan on segments" not in lso, lso
    assert "txn_partitions_open" in lso, lso
    assert "Seq Scan on segments" not in fetch, fetch
    assert "Seq Scan on txn_partitions" not in fetch, fetch
