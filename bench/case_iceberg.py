"""Case 13 (issue 25, "Performance"): a topic's Iceberg table.

* **Publish throughput**: ``publish_iceberg()`` of a topic holding ``iceberg_mb`` MB of
  1 KB records (key and value, in transactions of 1 MB over 4 partitions: reading the
  committed segments, writing one Parquet data file per partition, committing the
  snapshot), against pyarrow writing the very same rows, already in memory and conformed
  to the table's schema, as the same Parquet files (zstd, same row groups) to the same
  storage through the table's own file IO. Each repetition publishes a fresh topic.
  The publish runs with the topic's default ``iceberg.publish.threads`` (2: two partitions
  read and written at once; pyarrow writes the files one after another, as a user's loop
  would). Target: ratio ≥ 0.8. The same publish with one thread is reported beside it,
  without a target.
* **Commit-to-visible lag**: a steady transactional workload (a transaction of 10
  records over 2 partitions every 100 ms for ``iceberg_lag_seconds``) while
  ``txn-broker iceberg run`` publishes at its default interval in its own process; a
  transaction's lag runs from its commit returning to the first snapshot holding it
  (the snapshots' ``txn-broker.offsets`` and commit times). Target: p50 ≤ 5 s."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from txn_broker.topic_configs import TOPIC_CONFIGS

from .harness import CaseResult, Target, interleaved, latency_figure, throughput_ratio, timed
from .servers import Backend
from .sizes import Sizes
from .workload import drop_topic, unique

TITLE = "Iceberg: publish vs pyarrow writing the same Parquet; commit-to-visible lag"
PARTITIONS = 4
RECORDS_PER_TXN = 1000
SCHEMA = pa.schema([("key", pa.binary()), ("value", pa.binary())])
LAG_SCHEMA = pa.schema([("n", pa.int64()), ("note", pa.string())])


def _fill(broker: Any, mb: int, threads: int | None = None) -> str:
    """A fresh topic holding ``mb`` MB; ``threads``: its iceberg.publish.threads (None: the default)."""
    topic = unique("c13")
    config = {"iceberg.enabled": "true", "iceberg.target.file.bytes": str(1 << 30)}
    if threads is not None:
        config["iceberg.publish.threads"] = str(threads)
    broker.create_topic(topic, partitions=PARTITIONS, schema=SCHEMA, config=config)
    producer = broker.producer(transactional_id=unique("bench-c13"))
    producer.init_transactions()
    for i in range(mb):
        with producer.transaction():
            keys = [f"{i}-{j}".encode() for j in range(RECORDS_PER_TXN)]
            values = [os.urandom(400) + b"x" * 600 for _ in range(RECORDS_PER_TXN)]  # 1 KB, partly compressible
            producer.send(topic, pa.table({"key": keys, "value": values}, schema=SCHEMA), partition=i % PARTITIONS)
    producer.close()
    return topic


def _table_rows(broker: Any, topic: str) -> list[pa.Table]:
    """The topic's rows as the table's Arrow schema, one table per partition (not timed)."""
    from txn_broker.iceberg.files import conform
    from txn_broker.iceberg.schema import table_schema

    consumer = broker.consumer()
    consumer.subscribe([topic])
    parts: dict[int, list[pa.Table]] = {}
    while (batch := consumer.poll(max_records=100_000)).num_rows:
        for p in range(PARTITIONS):
            rows = batch.filter(pa.compute.equal(batch["_partition"], p))
            if rows.num_rows:
                parts.setdefault(p, []).append(rows)
    consumer.close()
    target = table_schema(SCHEMA)
    return [conform(pa.concat_tables(t), target) for _, t in sorted(parts.items())]


def _throughput(backend: Backend, sizes: Sizes, progress: Callable[[str], None], result: CaseResult) -> None:
    from txn_broker.iceberg.files import ROW_GROUP_ROWS

    broker = backend.connect()
    made: list[str] = []
    try:
        first = _fill(broker, sizes.iceberg_mb)
        made.append(first)
        table = broker.iceberg_table(first)
        tables = _table_rows(broker, first)
        out_dir = f"{table.location().rstrip('/')}/bench-baseline"

        def publish(threads: int | None) -> float:
            topic = _fill(broker, sizes.iceberg_mb, threads)
            made.append(topic)
            broker.iceberg_table(topic)  # the table made before timing, as for the baseline
            return timed(lambda: broker.publish_iceberg([topic]))

        def baseline() -> float:
            def write() -> None:
                for n, t in enumerate(tables):
                    with table.io.new_output(f"{out_dir}/{uuid.uuid4().hex}-{n}.parquet").create() as stream:
                        pq.write_table(t, stream, compression="zstd", row_group_size=ROW_GROUP_ROWS, store_schema=False)

            return timed(write)

        times = interleaved({"pyarrow": baseline, "publish": lambda: publish(None),
                             "publish, 1 thread": lambda: publish(1)}, sizes.reps, progress=progress)
    finally:
        for topic in made:
            drop_topic(broker, topic)
        broker.close()
    result.add(throughput_ratio("publish throughput / pyarrow writing the same Parquet", times["pyarrow"],
                                times["publish"], Target(">=", 0.8), mb=sizes.iceberg_mb,
                                threads=TOPIC_CONFIGS["iceberg.publish.threads"].default, cpus=os.cpu_count()))
    result.add(throughput_ratio("publish throughput with iceberg.publish.threads=1 / pyarrow, no target",
                                times["pyarrow"], times["publish, 1 thread"], mb=sizes.iceberg_mb))
    result.series["publish_seconds"] = times


def _lag(backend: Backend, sizes: Sizes, progress: Callable[[str], None], result: CaseResult) -> None:
    broker = backend.connect()
    topic = unique("c13lag")
    broker.create_topic(topic, partitions=2, schema=LAG_SCHEMA, config={"iceberg.enabled": "true"})
    broker.iceberg_table(topic)
    cli = Path(sys.executable).with_name("txn-broker")
    env = {**os.environ, **backend.env}
    publisher = subprocess.Popen([str(cli), "iceberg", "run", topic], env=env, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
    committed: list[tuple[float, dict[int, int]]] = []
    try:
        producer = broker.producer(transactional_id=unique("bench-c13lag"))
        producer.init_transactions()
        time.sleep(3)  # the publisher's start
        began, n = time.monotonic(), 0
        while time.monotonic() - began < sizes.iceberg_lag_seconds:
            with producer.transaction():
                for p in (0, 1):
                    producer.send(topic, pa.table({"n": list(range(n, n + 5)), "note": ["x"] * 5}, schema=LAG_SCHEMA),
                                  partition=p)
            n += 5
            done_ms = time.time() * 1000
            committed.append((done_ms, {tp.partition: o for tp, o in
                                        broker.end_offsets([(topic, 0), (topic, 1)]).items()}))
            time.sleep(0.1)
        producer.close()
        deadline = time.monotonic() + 15  # the last transactions get published
        while committed and time.monotonic() < deadline:
            status = broker.iceberg_status([topic])[0]
            if all(p.published_offset >= committed[-1][1][p.partition] for p in status.partitions):
                break
            time.sleep(0.2)
    finally:
        publisher.terminate()
        publisher.wait(timeout=30)
    table = broker.iceberg_table(topic)
    snapshots = sorted((s.timestamp_ms, {int(p): o for p, o in
                                         json.loads(s.summary.additional_properties["txn-broker.offsets"]).items()})
                       for s in table.snapshots() if s.summary and s.summary.operation.value == "append")
    lags = []
    for commit_ms, ends in committed:
        visible = next((ts for ts, offsets in snapshots if all(offsets.get(p, 0) >= e for p, e in ends.items())),
                       None)
        if visible is not None:
            lags.append(max(visible - commit_ms, 0.0) / 1000)
    drop_topic(broker, topic)
    broker.close()
    if len(lags) < len(committed):
        result.notes.append(f"{len(committed) - len(lags)} of {len(committed)} transactions were not visible "
                            "15 s after the workload stopped.")
    progress(f"lag of {len(lags)} transactions measured")
    result.add(latency_figure("commit-to-visible lag p50 (iceberg run, default interval)", lags, 50,
                              Target("<=", 5000), transactions=len(committed), snapshots=len(snapshots)))
    result.add(latency_figure("commit-to-visible lag p99", lags, 99))


def run(backend: Backend, sizes: Sizes, progress: Callable[[str], None]) -> CaseResult:
    result = CaseResult(13, TITLE, backend.name, sizes=(
        f"publish: {sizes.iceberg_mb} MB of 1 KB records in transactions of 1 MB over {PARTITIONS} partitions, "
        f"{sizes.reps} interleaved repetitions; lag: a transaction of 10 records every 100 ms for "
        f"{sizes.iceberg_lag_seconds} s"))
    _throughput(backend, sizes, progress, result)
    _lag(backend, sizes, progress, result)
    return result
