"""Case 6: commit latency and poll planning as a topic grows from 10 to 10,000 partitions
and from 1,000 to 1,000,000 segments. Target: flat within 1.25× (p50 at the largest scale
point over p50 at the smallest).

Each scale point gets a fresh broker database; the topic's history is generated straight
into its tables with SQL (``bench/scale.sql``: one transaction per segment, every tenth
aborted, half of the segments in partition 0). Then, with the broker's own code: commits of
transactions writing one small segment to each of 8 partitions (partition 0 among them;
upload excluded, as in case 4), and ``plan_fetch`` (the consumer's poll planning: offsets,
last stable offset and up to 64 segments from a random offset of partition 0). All points
are generated first and then sampled in turns. The query plans of the largest point are
kept for the report."""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from txn_broker import READ_COMMITTED
from txn_broker.log.partition import plan_fetch

from . import data
from .harness import CaseResult, Figure, Target, percentiles
from .servers import Backend
from .sizes import Sizes
from .workload import unique

TITLE = "Scale: commit latency and poll planning vs partitions and segments"
TARGET = Target("<=", 1.25)
SQL_FILE = Path(__file__).with_name("scale.sql")
_BLOCK = re.compile(r"^-- (?P<name>[a-z_]+) --\n(?:--[^\n]*\n)*(?P<sql>.*?)(?=^-- [a-z_]+ --\n|\Z)", re.M | re.S)
_SERIES = {
    "postgresql": ("", "generate_series(0, :segments - 1) AS seq(i)"),
    "sqlite": ("WITH RECURSIVE seq(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM seq WHERE i + 1 < :segments)", "seq"),
}
#: statements whose plans are shown: (query name in queries.sql, example parameters)
EXPLAINED = ("partition_offsets", "fetch_plan", "write_markers", "add_txn_append")
COMMIT_PARTITIONS = 8


def scale_points(sizes: Sizes) -> list[tuple[int, int]]:
    """(partitions, segments), each point 10× the previous, ending at the configured maximum."""
    points = []
    for k in range(sizes.scale_points - 1, -1, -1):
        points.append((max(sizes.scale_partitions // 10 ** k, 2), max(sizes.scale_segments // 10 ** k, 2)))
    return points


def generation_sql(dialect: str) -> list[tuple[str, str]]:
    with_series, series = _SERIES[dialect]
    text = SQL_FILE.read_text()
    return [(m["name"], m["sql"].strip().rstrip(";").replace("{with_series}", with_series).replace("{series}", series))
            for m in _BLOCK.finditer(text)]


def generate(broker: Any, topic: str, partitions: int, segments: int) -> float:
    """Fill ``topic`` with the generated history; returns the seconds it took."""
    start = time.monotonic()
    meta = broker._topics.get(topic)
    engine = broker._db.engine
    postgres = broker._db.dialect == "postgresql"
    with engine.begin() as conn:
        if postgres:  # transaction ids come from a sequence there (migration 0003)
            base_txn = int(conn.execute(sa.text("SELECT nextval('txn_ids')")).scalar())
        else:
            base_txn = int(conn.execute(sa.text("SELECT value FROM counters WHERE name = 'txn_id'")).scalar()) + 1
        base_pid = int(conn.execute(sa.text("SELECT value FROM counters WHERE name = 'producer_id'")).scalar()) + 1
        params = {"topic_id": meta.topic_id, "partitions": partitions, "segments": segments, "base_txn": base_txn,
                  "base_pid": base_pid}
        for _name, sql in generation_sql(broker._db.dialect):
            conn.execute(sa.text(sql), {k: v for k, v in params.items() if f":{k}" in sql})
        if postgres:  # past the generated ids, as scale_counters does for the SQLite counter
            conn.execute(sa.text("SELECT setval('txn_ids', :last)"), {"last": base_txn + segments})
    with engine.connect() as conn:
        conn.execute(sa.text("ANALYZE"))
        conn.commit()
    return time.monotonic() - start


def explain(broker: Any, topic: str, hot_hw: int) -> dict[str, str]:
    """The plans of the read and commit queries, on the generated data."""
    meta = broker._topics.get(topic)
    params = {"topic_id": meta.topic_id, "partition_no": 0, "start_offset": hot_hw // 2,
              "end_offset": hot_hw // 2 + 6_400, "max_segments": 64, "txn_id": 1, "marker": "COMMIT",
              "base_offset": 0, "last_offset": 99, "record_count": 100, "size_bytes": 4096}
    prefix = "EXPLAIN " if broker._db.dialect == "postgresql" else "EXPLAIN QUERY PLAN "
    plans = {}
    with broker._db.engine.connect() as conn:
        for name in EXPLAINED:
            query = broker._db.queries[name].text
            rows = conn.execute(sa.text(prefix + query), {k: v for k, v in params.items() if f":{k}" in query})
            plans[name] = "\n".join(str(r[0]) if len(r) == 1 else str(r[-1]) for r in rows)
        conn.rollback()
    return plans


def full_scans(plans: dict[str, str]) -> list[str]:
    """Queries whose plan scans segments or txn_partitions whole."""
    bad = re.compile(r"Seq Scan on (segments|txn_partitions)\b|^SCAN (segments|txn_partitions)\b", re.M)
    return [name for name, plan in plans.items() if bad.search(plan)]


class ScalePoint:
    """One generated topic in its own database, with a producer ready to commit into it."""

    def __init__(self, backend: Backend, partitions: int, segments: int) -> None:
        self.backend = backend
        self.partitions, self.segments = partitions, segments
        self.url = backend.fresh_database("scale")
        self.broker = backend.connect(self.url)
        self.topic = f"scale-{partitions}"
        self.broker.create_topic(self.topic, partitions=partitions, schema=data.RECORD_SCHEMA)
        self.generated_s = generate(self.broker, self.topic, partitions, segments)
        self.topic_id = self.broker._topics.get(self.topic).topic_id
        self.hot_hw = self.broker.end_offsets([(self.topic, 0)])[(self.topic, 0)]
        step = (partitions - 1) / (COMMIT_PARTITIONS - 1)
        self.targets = sorted({0, *(1 + int(i * step) for i in range(COMMIT_PARTITIONS - 1))})
        self.batch = data.records(5, 100)
        self.producer = self.broker.producer(transactional_id=unique("bench-c6"))
        self.producer.init_transactions()
        self.rng = random.Random(6)
        self.commits: list[float] = []
        self.plans: list[float] = []

    def sample(self, record: bool = True) -> None:
        """One commit of a transaction over 8 partitions (upload excluded) and one fetch
        plan from a random offset of the hot partition."""
        producer = self.producer
        producer.begin_transaction()
        for p in self.targets:
            producer.send(self.topic, self.batch, partition=p)
        producer.flush()
        start = time.perf_counter()
        producer.commit_transaction()
        committed = time.perf_counter() - start
        position = self.rng.randrange(0, max(self.hot_hw, 1))
        start = time.perf_counter()
        offsets, segments = plan_fetch(self.broker._db, self.topic_id, 0, position, READ_COMMITTED)
        planned = time.perf_counter() - start
        if offsets is None or not segments:
            raise RuntimeError(f"plan_fetch found no segment at offset {position} of {self.topic}-0")
        if record:
            self.commits.append(committed)
            self.plans.append(planned)

    def row(self) -> dict[str, Any]:
        return {"partitions": self.partitions, "segments": self.segments, "generate_s": round(self.generated_s, 2),
                "hot_partition_segments": (self.segments + 1) // 2, "commit_ms": percentiles(self.commits),
                "plan_ms": percentiles(self.plans)}

    def close(self) -> None:
        try:
            self.producer.close()
            self.broker.close()
        finally:
            self.backend.drop_database(self.url)


def run(backend: Backend, sizes: Sizes, progress: Callable[[str], None]) -> CaseResult:
    result = CaseResult(6, TITLE, backend.name)
    points: list[ScalePoint] = []
    try:
        for partitions, segments in scale_points(sizes):
            point = ScalePoint(backend, partitions, segments)
            points.append(point)
            progress(f"generated {partitions:,} partitions, {segments:,} segments in {point.generated_s:.1f} s")
        for point in points:  # warm-up
            point.sample(record=False)
        for i in range(sizes.scale_samples):  # the points take turns, so drift hits all alike
            for point in points[i % len(points):] + points[:i % len(points)]:
                point.sample()
        rows = [point.row() for point in points]
        for row in rows:
            progress(f"{row['partitions']:,} partitions, {row['segments']:,} segments: commit p50 "
                     f"{row['commit_ms']['p50']:.2f} ms, fetch plan p50 {row['plan_ms']['p50']:.2f} ms")
        result.plans = explain(points[-1].broker, points[-1].topic, points[-1].hot_hw)
    finally:
        for point in points:
            point.close()
    result.sizes = ("scale points (partitions, segments): " + ", ".join(
        f"({r['partitions']:,}, {r['segments']:,})" for r in rows)
        + "; generated history (one transaction per segment, 100 records each, half the segments in partition 0); "
        f"{sizes.scale_samples} commits of {COMMIT_PARTITIONS} partitions and {sizes.scale_samples} fetch plans per "
        "point, the points taking turns")
    small, large = rows[0], rows[-1]
    for what, key in (("commit", "commit_ms"), ("fetch plan", "plan_ms")):
        result.add(Figure(f"{what} p50, largest / smallest scale point", large[key]["p50"] / small[key]["p50"], "×",
                          TARGET, None, {"smallest_ms": small[key], "largest_ms": large[key]}))
    result.series = {"points": rows}
    scans = full_scans(result.plans)
    result.notes.append("Query plans at the largest point use indexes for every query shown." if not scans else
                        f"Full scans in the plans of: {', '.join(scans)}.")
    return result
