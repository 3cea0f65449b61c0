"""Commit-to-visible lag of an Iceberg table (docs/iceberg.md, "Who publishes, and lag"):
a steady transactional workload (one transaction of 10 small records every 100 ms, two
partitions) while ``txn-broker iceberg run`` publishes at its default interval in its own
process. ``make bench`` measures it as case 13 (``bench/case_iceberg.py``); this script is
the standalone check, ``.venv/bin/python -m bench.iceberg_lag [SECONDS]`` (a local directory
and SQLite).

The lag of a transaction is the time from its commit returning to the producer until the
first table snapshot holding it was committed: that snapshot is the first whose
``txn-broker.offsets`` summary passes the transaction's offsets, and its ``timestamp_ms``
is when it was committed (same machine, same clock). Reported: p50, p99 and max."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

import txn_broker

SCHEMA = pa.schema([("n", pa.int64()), ("note", pa.string())])


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main(seconds: int = 30) -> None:
    root = Path(tempfile.mkdtemp(prefix="iceberg-lag-"))
    database, storage = f"sqlite:///{root}/broker.db", (root / "segments").as_uri()
    broker = txn_broker.connect(database, storage)
    broker.create_topic("steady", partitions=2, schema=SCHEMA, config={"iceberg.enabled": "true"})
    broker.iceberg_table("steady")
    env = {**os.environ, "TXN_BROKER_DATABASE_URL": database, "TXN_BROKER_STORAGE_URL": storage}
    cli = Path(sys.executable).with_name("txn-broker")
    publisher = subprocess.Popen([str(cli), "iceberg", "run"], env=env, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
    producer = broker.producer(transactional_id="steady")
    producer.init_transactions()
    committed: list[tuple[float, dict[int, int]]] = []  # (commit time ms, {partition: end offset after})
    try:
        time.sleep(3)  # the publisher's start
        began = time.monotonic()
        n = 0
        while time.monotonic() - began < seconds:
            with producer.transaction():
                for p in (0, 1):
                    producer.send("steady", pa.table({"n": list(range(n, n + 5)), "note": ["x"] * 5}, schema=SCHEMA),
                                  partition=p)
            n += 5
            done_ms = time.time() * 1000
            ends = {tp.partition: o for tp, o in broker.end_offsets([("steady", 0), ("steady", 1)]).items()}
            committed.append((done_ms, ends))
            time.sleep(0.1)
        time.sleep(8)  # the last ones get published
    finally:
        publisher.terminate()
        publisher.wait(timeout=30)
    table = broker.iceberg_table("steady")
    snapshots = sorted((s.timestamp_ms, {int(p): o for p, o in
                                         json.loads(s.summary.additional_properties["txn-broker.offsets"]).items()})
                       for s in table.snapshots() if s.summary and s.summary.operation.value == "append")
    lags = []
    for commit_ms, ends in committed:
        visible = next((ts for ts, offsets in snapshots if all(offsets.get(p, 0) >= e for p, e in ends.items())),
                       None)
        if visible is not None:
            lags.append((visible - commit_ms) / 1000)
    broker.close()
    print(f"{len(committed)} transactions, {len(lags)} visible, {len(snapshots)} snapshots; lag p50 "
          f"{statistics.median(lags):.2f} s, p99 {percentile(lags, 0.99):.2f} s, max {max(lags):.2f} s")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:]))
