"""Case 15: small transactions in an Iceberg table. ``iceberg_txns`` transactions of 10
records (100 B each) into 4 partitions, published every ``iceberg_txns / 50`` transactions
(so each publish writes a small file per partition and the publisher's small-file rewrite,
``txn_broker/iceberg/small_files.py``, merges them as it goes), then published and
rewritten once more. The table is scanned whole with pyiceberg (``scan().to_arrow()``) and
with Spark's native scan (``txn_broker.spark.read``, local directory only: S3 needs s3a),
against the same rows written as one Parquet file in the same storage, read with pyarrow and
with ``spark.read.parquet``. Target: table scan / one file ≥ 0.8 (throughput ratio). The data
file count before the last rewrite and after is reported next to it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from . import data
from .harness import CaseResult, Target, interleaved, throughput_ratio, timed
from .servers import Backend
from .sizes import Sizes
from .workload import unique

TITLE = "small transactions: Iceberg table scan after the small-file rewrite vs one file"
PARTITIONS = 4
RECORDS_PER_TXN = 10
RECORD_BYTES = 100
PUBLISHES = 50
TARGET = Target(">=", 0.8)


def _data_files(table: Any) -> int:
    return len(list(table.refresh().scan().plan_files()))


def run(backend: Backend, sizes: Sizes, progress: Callable[[str], None]) -> CaseResult:
    txns = sizes.iceberg_txns
    rows = data.records(txns * RECORDS_PER_TXN, RECORD_BYTES)
    broker = backend.connect()
    topic = unique("c15")
    every = max(txns // PUBLISHES, 1)
    result = CaseResult(15, TITLE, backend.name, sizes=(
        f"{txns:,} transactions × {RECORDS_PER_TXN} records × {RECORD_BYTES} B into {PARTITIONS} partitions, "
        f"published every {every:,} transactions; {sizes.reps} interleaved repetitions"))
    spark = None
    try:
        broker.create_topic(topic, partitions=PARTITIONS, schema=data.RECORD_SCHEMA,
                            config={"iceberg.enabled": "true"})
        producer = broker.producer(transactional_id=unique("bench-c15"))
        producer.init_transactions()
        progress(f"c15: {txns:,} transactions, publishing every {every:,}")
        for t in range(txns):
            with producer.transaction():
                producer.send(topic, rows.slice(t * RECORDS_PER_TXN, RECORDS_PER_TXN), partition=t % PARTITIONS)
            if t % every == every - 1:
                broker.publish_iceberg([topic])
        producer.close()
        table = broker.iceberg_table(topic)
        files_before = _data_files(table)
        last = broker.publish_iceberg([topic])[0]
        files_after = _data_files(table)
        table = table.refresh()
        whole = table.scan().to_arrow()
        if whole.num_rows != txns * RECORDS_PER_TXN:
            raise RuntimeError(f"the table holds {whole.num_rows:,} rows, not {txns * RECORDS_PER_TXN:,}")
        one = f"{table.location().rstrip('/')}/bench-one-file-{unique('f')}.parquet"
        with table.io.new_output(one).create(overwrite=True) as stream:
            pq.write_table(whole, stream, compression="zstd")

        def read_one() -> pa.Table:
            with table.io.new_input(one).open() as stream:
                return pq.read_table(stream)

        variants: dict[str, Callable[[], float]] = {
            "one file (pyarrow)": lambda: timed(read_one),
            "table scan (pyiceberg)": lambda: timed(lambda: table.scan().to_arrow()),
        }
        local = backend.s3 is None
        if local:
            from txn_broker.spark import read, register

            from .spark_stage import _spark

            spark, _ = _spark()
            register(spark)
            variants["one file (Spark Parquet)"] = lambda: timed(
                lambda: spark.read.parquet(one).write.format("noop").mode("overwrite").save())
            variants["table scan (Spark native)"] = lambda: timed(
                lambda: read(spark, broker, topic=topic).write.format("noop").mode("overwrite").save())
        seconds = interleaved(variants, sizes.reps, progress=progress)
        table.io.delete(one)
    finally:
        if topic in broker._topics.names():
            broker.delete_topic(topic)
        broker.close()
        if spark is not None:
            from .case_spark import stop_spark

            stop_spark()
    result.add(throughput_ratio("table scan / one file, pyiceberg to_arrow", seconds["one file (pyarrow)"],
                                seconds["table scan (pyiceberg)"], TARGET, files_before=files_before,
                                files_after=files_after))
    if local:
        result.add(throughput_ratio("table scan / one file, Spark native scan", seconds["one file (Spark Parquet)"],
                                    seconds["table scan (Spark native)"], TARGET))
    else:
        result.notes.append("Spark: not measured on S3 (this Spark has no s3a file system; the read falls back "
                            "to the txn_topic source).")
    result.series = {"seconds": seconds, "files_before_last_publish": files_before, "files_after": files_after,
                     "rewritten_groups_last_publish": last.rewritten_groups}
    result.notes.append(f"Data files: {files_before:,} before the last publish, {files_after:,} after "
                        f"({last.rewritten_groups} group(s) rewritten by it).")
    return result
