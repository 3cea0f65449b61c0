"""Iceberg publish throughput against pyarrow writing the same Parquet files to the same
storage (docs/iceberg.md, "Refine, not zero copy"), standalone: ``make bench`` measures it
as case 13 (``bench/case_iceberg.py``, both backends); this script is the quick local
check, ``.venv/bin/python -m bench.iceberg_publish [MB]`` (a local directory and SQLite).

The topic gets ``MB`` of records (1 KB each, key/value/headers, in transactions of 1 MB);
``publish_iceberg()`` then reads its committed segments and writes them as Parquet data
files (one per partition, zstd) plus the snapshot. The baseline writes the very same
Arrow tables, already in memory, as Parquet files with the same options to the same
directory with pyarrow alone: no segment reads, no catalog. Three interleaved runs each;
the medians are compared."""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

import txn_broker
from txn_broker.iceberg.files import ROW_GROUP_ROWS, conform
from txn_broker.iceberg.schema import table_schema

PARTITIONS = 4


def main(total_mb: int = 64, runs: int = 3) -> None:
    root = Path(tempfile.mkdtemp(prefix="iceberg-bench-"))
    broker = txn_broker.connect(f"sqlite:///{root}/broker.db", (root / "segments").as_uri())
    schema = pa.schema([("key", pa.binary()), ("value", pa.binary())])
    per_txn = 1000
    producer = broker.producer(transactional_id="bench")
    producer.init_transactions()
    publish_s, pyarrow_s = [], []
    for run in range(runs):
        topic = f"bench_{run}"
        broker.create_topic(topic, partitions=PARTITIONS, schema=schema,
                            config={"iceberg.enabled": "true", "iceberg.target.file.bytes": str(1 << 30)})
        for i in range(total_mb):
            with producer.transaction():
                keys = [f"{i}-{j}".encode() for j in range(per_txn)]
                values = [os.urandom(400) + b"x" * 600 for _ in range(per_txn)]  # 1 KB, partly compressible
                producer.send(topic, pa.table({"key": keys, "value": values}, schema=schema),
                              partition=i % PARTITIONS)
        began = time.perf_counter()
        [result] = broker.publish_iceberg([topic])
        publish_s.append(time.perf_counter() - began)
        # the baseline: the same rows, conformed to the same schema, already in memory
        consumer = broker.consumer()
        consumer.subscribe([topic])
        parts: dict[int, list[pa.Table]] = {}
        while (batch := consumer.poll(max_records=100_000)).num_rows:
            for p in range(PARTITIONS):
                rows = batch.filter(pa.compute.equal(batch["_partition"], p))
                if rows.num_rows:
                    parts.setdefault(p, []).append(rows)
        consumer.close()
        target = table_schema(schema)
        tables = [conform(pa.concat_tables(t), target) for t in parts.values()]
        out = root / f"baseline_{run}"
        out.mkdir()
        began = time.perf_counter()
        for n, t in enumerate(tables):
            pq.write_table(t, out / f"{n}.parquet", compression="zstd", row_group_size=ROW_GROUP_ROWS,
                           store_schema=False)
        pyarrow_s.append(time.perf_counter() - began)
        print(f"run {run}: {result.rows:,} rows, {result.files} files, {result.bytes / 1e6:.1f} MB; "
              f"publish {publish_s[-1]:.2f} s, pyarrow {pyarrow_s[-1]:.2f} s")
    p, b = statistics.median(publish_s), statistics.median(pyarrow_s)
    print(f"median: publish {total_mb / p:.1f} MB/s, pyarrow {total_mb / b:.1f} MB/s, ratio {b / p:.2f}")
    broker.close()


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:]))
