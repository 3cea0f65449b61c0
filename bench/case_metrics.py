"""Case 12 (issue 27, "Cost"): a Prometheus scrape of a broker with 10,000 partitions and
1,000 consumer groups answers in under a second.

The broker holds 10 topics of a tenth of the partitions each, created through the API,
with a generated history of 5,000 transactions and segments per topic (bench/scale.sql,
as case 6 fills it); 1,000 groups, each with offsets committed on 10 partitions halfway
through their logs (so every one lags); and 100 open transactions.

Timed, as separate rows:

* the scrape answer of a served exporter as it runs by default (refreshing in the
  background, txn_broker/metrics/refresh.py): a GET of ``/metrics`` over HTTP, gzipped as
  Prometheus asks, while the refresh thread runs back to back (a 1 s interval, shorter than
  a refresh takes on a loaded machine), so scrapes meet refreshes in progress: the target;
* one refresh: reading the figures, rendering them with prometheus_client's
  ``generate_latest`` and gzipping them, what the background thread spends each interval;
* reading the figures alone (the exporter's few set-based queries, in one snapshot);
* a scrape with ``--refresh-interval 0``: the read and the rendering at scrape time (no
  gzip), for comparison.

The number of statements a read runs is counted too: it does not grow with partitions or
groups (tests/observability/test_metrics_scale.py checks that on a small broker)."""

from __future__ import annotations

import statistics
import time
import urllib.request
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from prometheus_client import CollectorRegistry, generate_latest

from txn_broker.metrics import RefreshingExporter, broker_registry, start_refreshed_server

from .case_scale import generate
from .harness import CaseResult, Target, latency_figure
from .servers import Backend
from .sizes import Sizes

TITLE = "Prometheus scrape of 10,000 partitions and 1,000 groups"
TOPICS = 10
SEGMENTS = 5_000  # per topic, one transaction each
OFFSETS_PER_GROUP = 10
OPEN = 100
TARGET = Target("<=", 1000.0)  # ms
#: the refresh thread's interval while scrapes are timed: shorter than a refresh, so the
#: thread is nearly always rendering (the worst case for a scrape, which shares the GIL)
BUSY_REFRESH_S = 1.0
#: Prometheus' own scrape headers
SCRAPE_HEADERS = {"Accept-Encoding": "gzip",
                  "Accept": "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"}


def _fill(broker: Any, per_topic: int, groups: int) -> None:
    topics = [f"metrics-{t}" for t in range(TOPICS)]
    for name in topics:
        broker.create_topic(name, partitions=per_topic)
        generate(broker, name, per_topic, SEGMENTS)
    ids = {name: broker._topics.get(name).topic_id for name in topics}
    with broker._db.engine.begin() as conn:
        hw = {(r.topic_id, r.partition_no): r.high_watermark for r in conn.execute(sa.text(
            "SELECT topic_id, partition_no, high_watermark FROM partitions"))}
        offsets = []
        for g in range(groups):  # group g: 10 partitions of one topic, from partition 10 * g
            topic_id = ids[topics[g % TOPICS]]
            first = (g // TOPICS * OFFSETS_PER_GROUP) % per_topic
            for p in range(first, min(first + OFFSETS_PER_GROUP, per_topic)):
                offsets.append({"group_id": f"group-{g}", "topic_id": topic_id, "partition_no": p,
                                "committed_offset": hw[(topic_id, p)] // 2})
        conn.execute(sa.text(
            "INSERT INTO group_offsets (group_id, topic_id, partition_no, committed_offset, commit_ms) "
            "VALUES (:group_id, :topic_id, :partition_no, :committed_offset, 0)"), offsets)
        base = int(conn.execute(sa.text("SELECT COALESCE(MAX(txn_id), 0) FROM transactions")).scalar()) + 1
        opened = [{"txn_id": base + i, "tid": f"open-{i}", "pid": 900_000 + i, "p": i % per_topic,
                   "topic_id": ids[topics[0]]} for i in range(OPEN)]
        conn.execute(sa.text(
            "INSERT INTO transactions (txn_id, transactional_id, producer_id, producer_epoch, timeout_ms, start_ms) "
            "VALUES (:txn_id, :tid, :pid, 0, 60000, 0)"), opened)
        conn.execute(sa.text(
            "INSERT INTO transactional_ids (transactional_id, producer_id, producer_epoch, state, timeout_ms, txn_id, "
            "txn_start_ms, last_update_ms, created_ms) VALUES (:tid, :pid, 0, 'Ongoing', 60000, :txn_id, 1, 1, 1)"),
            opened)
        conn.execute(sa.text(
            "INSERT INTO txn_partitions (txn_id, topic_id, partition_no, first_offset) "
            "SELECT x.txn_id, p.topic_id, p.partition_no, p.high_watermark FROM transactions x "
            "JOIN partitions p ON p.topic_id = :topic_id AND p.partition_no = (x.producer_id - 900000) % :n "
            "WHERE x.outcome IS NULL"), {"topic_id": ids[topics[0]], "n": per_topic})
        if broker._db.dialect == "postgresql":
            conn.execute(sa.text("SELECT setval('txn_ids', :last)"), {"last": base + OPEN})
        else:
            conn.execute(sa.text("UPDATE counters SET value = :last WHERE name = 'txn_id'"), {"last": base + OPEN})
    with broker._db.engine.connect() as conn:
        conn.execute(sa.text("ANALYZE"))
        conn.commit()


def _statements(broker: Any, call: Callable[[], Any]) -> int:
    """The statements ``call`` runs on the broker's database: through SQLAlchemy, and the
    named queries run on the driver's own cursor (``Tx._native``, unseen by its events)."""
    from txn_broker.database import Tx

    count = [0]

    def seen(*_: Any) -> None:
        count[0] += 1

    native = Tx._native

    def seen_native(tx: Any, query: str, params: Any) -> Any:
        count[0] += 1
        return native(tx, query, params)

    sa.event.listen(broker._db.engine, "before_cursor_execute", seen)
    Tx._native = seen_native  # type: ignore[method-assign,assignment]
    try:
        call()
    finally:
        Tx._native = native  # type: ignore[method-assign]
        sa.event.remove(broker._db.engine, "before_cursor_execute", seen)
    return count[0]


def run(backend: Backend, sizes: Sizes, progress: Callable[[str], None]) -> CaseResult:
    per_topic = max(sizes.metrics_partitions // TOPICS, 2)  # bench/scale.sql needs two
    partitions, groups = per_topic * TOPICS, sizes.metrics_groups
    broker = backend.connect(database_url=backend.fresh_database("c12"))
    try:
        progress(f"filling {partitions:,} partitions, {TOPICS * SEGMENTS:,} transactions, {groups:,} groups")
        _fill(broker, per_topic, groups)
        figures = broker.metrics_figures()
        if len(figures.partitions) != partitions or len({g.group for g in figures.groups}) != groups:
            raise RuntimeError(f"the figures hold {len(figures.partitions)} partitions and "
                               f"{len({g.group for g in figures.groups})} groups, not {partitions} and {groups}")
        if figures.hanging_transactions != OPEN or sum(g.lag > 0 for g in figures.groups) < groups:
            raise RuntimeError("the figures miss the open transactions or the groups' lag")
        registry = broker_registry(broker)  # --refresh-interval 0: read and render at each scrape
        statements = _statements(broker, lambda: generate_latest(registry))
        reads, direct, size = [], [], 0
        for rep in range(sizes.reps * 2):
            started = time.perf_counter()
            broker.metrics_figures()
            reads.append(time.perf_counter() - started)
            started = time.perf_counter()
            size = len(generate_latest(registry))
            direct.append(time.perf_counter() - started)
            progress(f"rep {rep + 1}/{sizes.reps * 2}: figures {reads[-1]:.3f}s, "
                     f"scrape with --refresh-interval 0 {direct[-1]:.3f}s")
        exporter = RefreshingExporter(broker.metrics_figures, BUSY_REFRESH_S, CollectorRegistry(auto_describe=False))
        refreshes = []
        for rep in range(sizes.reps * 2):
            started = time.perf_counter()
            if not exporter.refresh():
                raise RuntimeError("a refresh failed (see the log)")
            refreshes.append(time.perf_counter() - started)
            progress(f"refresh {rep + 1}/{sizes.reps * 2}: {refreshes[-1]:.3f}s")
        answers, gzipped = _scrapes(exporter, sizes.reps * 10, progress)
        plans = {}
        if broker._db.dialect == "postgresql":
            with broker._db.engine.connect() as conn:
                for name in ("metrics_partitions", "metrics_group_offsets"):
                    query = broker._db.queries[name].text
                    plans[name] = "\n".join(r[0] for r in conn.execute(sa.text("EXPLAIN " + query)))
            subplan = plans["metrics_group_offsets"]
            subplan = subplan[subplan.index("SubPlan"):] if "SubPlan" in subplan else subplan
            if "Seq Scan on segments" in subplan:  # the per-group lookups must use the segments' key
                raise RuntimeError("metrics_group_offsets scans segments per group:\n" + plans["metrics_group_offsets"])
    finally:
        broker.close()
    result = CaseResult(12, TITLE, backend.name, sizes=(
        f"{partitions:,} partitions in {TOPICS} topics, {TOPICS * SEGMENTS:,} generated transactions and segments, "
        f"{groups:,} groups with offsets on {OFFSETS_PER_GROUP} partitions each, {OPEN} open transactions; "
        f"{sizes.reps * 10} scrapes answered; {sizes.reps * 2} refreshes, reads and scrapes with --refresh-interval 0"))
    result.add(latency_figure("scrape answer (refreshing exporter, HTTP, gzip), p50", answers, 50, TARGET,
                              samples_bytes=size, gzipped_bytes=gzipped, statements=statements))
    result.add(latency_figure("refresh (read + render + gzip, in the background), p50", refreshes, 50))
    result.add(latency_figure("figures read (the set-based queries), p50", reads, 50))
    result.add(latency_figure("scrape with --refresh-interval 0 (read + render), p50", direct, 50))
    result.series = {"answer_s": answers, "refresh_s": refreshes, "read_s": reads, "direct_scrape_s": direct}
    result.plans = plans
    spread = ", ".join(f"{name.removesuffix('_s')} {min(v):.3f}-{max(v):.3f}" for name, v in result.series.items())
    result.notes.append(
        f"A read runs {statements} statements whatever the number of partitions and groups; the text is "
        f"{size // 1024:,} KiB, {gzipped // 1024:,} KiB gzipped. Median seconds: scrape answer "
        f"{statistics.median(answers):.4f} (max {max(answers):.3f}, scrapes meeting a refresh in progress), "
        f"refresh {statistics.median(refreshes):.3f}, read {statistics.median(reads):.3f}, scrape with "
        f"--refresh-interval 0 {statistics.median(direct):.3f}. Spreads (min-max, seconds): {spread}.")
    return result


def _scrapes(exporter: RefreshingExporter, count: int, progress: Callable[[str], None]) -> tuple[list[float], int]:
    """``count`` scrapes of a served exporter whose thread refreshes back to back: their
    answer times (seconds, body read) and the gzipped size."""
    server, _thread = start_refreshed_server(exporter, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.server_port}/metrics"
    answers, size = [], 0
    try:
        for n in range(count):
            started = time.perf_counter()
            with urllib.request.urlopen(urllib.request.Request(url, headers=SCRAPE_HEADERS), timeout=60) as answer:
                size = len(answer.read())
            answers.append(time.perf_counter() - started)
            if n % 10 == 9:
                progress(f"scrape {n + 1}/{count}: {answers[-1] * 1000:.1f} ms ({exporter.refreshes} refreshes)")
            time.sleep(0.1)
    finally:
        exporter.stop()
        server.shutdown()
        server.server_close()
    return answers, size
