"""The exporter's cost on PostgreSQL: a scrape of a broker with 10,000 partitions (10 topics
created through the API), a generated history of 50,000 transactions and segments
(bench/scale.sql, as the scale bench case fills it), 1,000 groups and open transactions
answers in under a second, and the per-group query reads segments through their index,
never by a scan per group."""

from __future__ import annotations

import os
import statistics
import time

import pytest
import sqlalchemy as sa
from prometheus_client import generate_latest

from bench.case_scale import generate
from txn_broker.metrics import broker_registry

pytestmark = pytest.mark.integration

TOPICS = 10
PARTITIONS = 1_000  # per topic: 10,000 in all
SEGMENTS = 5_000  # per topic (one transaction each): 50,000 in all
GROUPS = 1_000  # each committed on 10 partitions
OPEN = 100  # open transactions, one partition each


def _fill(broker) -> None:
    for t in range(TOPICS):
        broker.create_topic(f"scale-{t}", partitions=PARTITIONS)
        generate(broker, f"scale-{t}", PARTITIONS, SEGMENTS)
    with broker._db.engine.begin() as conn:
        conn.execute(sa.text(
            "INSERT INTO group_offsets (group_id, topic_id, partition_no, committed_offset, commit_ms) "
            "SELECT 'group-' || g, p.topic_id, p.partition_no, p.high_watermark / 2, 0 "
            "FROM generate_series(0, :groups - 1) g "
            "JOIN topics t ON t.name = 'scale-' || (g % :topics) "
            "JOIN partitions p ON p.topic_id = t.topic_id AND p.partition_no / 10 = g % (:partitions / 10)"),
            {"groups": GROUPS, "topics": TOPICS, "partitions": PARTITIONS})
        conn.execute(sa.text(
            "INSERT INTO transactions (txn_id, transactional_id, producer_id, producer_epoch, timeout_ms, start_ms) "
            "SELECT nextval('txn_ids'), 'open-' || i, 900000 + i, 0, 60000, 0 FROM generate_series(1, :n) i"),
            {"n": OPEN})
        conn.execute(sa.text(
            "INSERT INTO transactional_ids (transactional_id, producer_id, producer_epoch, state, timeout_ms, txn_id, "
            "txn_start_ms, last_update_ms, created_ms) "
            "SELECT x.transactional_id, x.producer_id, 0, 'Ongoing', 60000, x.txn_id, 1, 1, 1 "
            "FROM transactions x WHERE x.outcome IS NULL"))
        conn.execute(sa.text(
            "INSERT INTO txn_partitions (txn_id, topic_id, partition_no, first_offset) "
            "SELECT x.txn_id, p.topic_id, p.partition_no, p.high_watermark "
            "FROM transactions x JOIN partitions p ON p.partition_no = x.producer_id - 900000 "
            "JOIN topics t ON t.topic_id = p.topic_id AND t.name = 'scale-0' WHERE x.outcome IS NULL"))
    with broker._db.engine.connect() as conn:
        conn.execute(sa.text("ANALYZE"))
        conn.commit()


def test_a_scrape_of_10000_partitions_and_1000_groups_takes_under_a_second(backend):
    if backend.name != "postgres":
        pytest.skip("the scale of a scrape is measured on PostgreSQL")
    broker = backend.connect()
    _fill(broker)

    figures = broker.metrics_figures()
    assert len(figures.partitions) == TOPICS * PARTITIONS
    assert len({g.group for g in figures.groups}) == GROUPS and len(figures.groups) == GROUPS * 10
    assert figures.transactional_ids["Ongoing"] == OPEN and figures.hanging_transactions == OPEN
    assert figures.committed_transactions + figures.aborted_transactions == TOPICS * SEGMENTS
    held = [p for p in figures.partitions if p.last_stable_offset < p.high_watermark]
    assert len(held) == 0  # the open transactions start at the high watermark: nothing above them yet
    assert sum(g.lag > 0 for g in figures.groups) > GROUPS

    reads, scrapes = [], []
    registry = broker_registry(broker)
    for _ in range(3):
        started = time.perf_counter()
        broker.metrics_figures()
        reads.append(time.perf_counter() - started)
        started = time.perf_counter()
        text = generate_latest(registry)
        scrapes.append(time.perf_counter() - started)
    print(f"\nload {os.getloadavg()[0]:.1f}; figures read: {statistics.median(reads):.3f} s; "
          f"whole scrape ({len(text) // 1024} KiB): {statistics.median(scrapes):.3f} s (median of 3; noisy)")
    # later reads count only the transactions after the settled ones, to the same totals
    again = broker.metrics_figures()
    assert broker._outcome_tally.after_txn_id > 0
    assert again.committed_transactions + again.aborted_transactions == TOPICS * SEGMENTS
    assert again.aborted_transactions == TOPICS * SEGMENTS // 10
    # the bounds hold on an idle 2-core machine; a loaded one (the suite's workers, other
    # jobs) is slower in proportion, so they stretch by the load per core beyond 1
    stretch = max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))
    assert statistics.median(reads) < 1.0 * stretch, (reads, stretch)
    # prometheus_client's rendering of the 80,000 samples comes on top of the read
    assert statistics.median(scrapes) < 2.0 * stretch, (scrapes, stretch)

    with broker._db.engine.connect() as conn:
        query = broker._db.queries["metrics_group_offsets"].text
        plan = "\n".join(r[0] for r in conn.execute(sa.text("EXPLAIN " + query)))
    subplan = plan[plan.index("SubPlan"):] if "SubPlan" in plan else plan
    assert "Seq Scan on segments" not in subplan, plan  # the per-group lookups use the segments' key
    broker.close()
