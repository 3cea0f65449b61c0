"""Case 15: small transactions in an Iceberg table. ``iceberg_txns`` transactions of 10
records (100 B each) into 4 partitions, published every ``iceberg_txns / 50`` transactions
(so each publish writes a small file per partition and the publisher's small-file rewrite,
``txn_broker/iceberg/small_files.py``, merges them as it goes), then published and
rewritten once more. The table is scanned whole with pyiceberg (``scan().to_arrow()``) and
with Spark's native scan (``txn_broker.spark.read``, local directory only: S3 needs s3a),
each against the same rows in one Parquet file in the same storage, read by the same engine:
pyiceberg scans a table of one file (unpartitioned, same schema, appended by pyiceberg in
the same catalog), Spark reads the file with ``spark.read.parquet``. Target: table scan /
one file ≥ 0.8 (throughput ratio). pyiceberg's scan is also compared with pyarrow's
``read_table`` of the one file, without a target: that ratio is pyiceberg's own cost per
scan, which a table of one file pays too. The data file count before the last rewrite and
after is reported next to it."""

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
SCAN_REPS_FACTOR = 3


def _data_files(table: Any) -> int:
    return len(list(table.refresh().scan().plan_files()))


def _one_file_table(table: Any, rows: pa.Table, name: str) -> Any:
    """A table of ``rows`` in one data file: unpartitioned, ``table``'s schema, in its
    catalog and namespace, appended by pyiceberg (one file: far below its target size)."""
    namespace = table.name()[0]
    one = table.catalog.create_table(f"{namespace}.{name}", schema=table.schema(),
                                     location=f"{table.location().rstrip('/')}-{name}")
    one.append(rows)
    return one


def run(backend: Backend, sizes: Sizes, progress: Callable[[str], None]) -> CaseResult:
    txns = sizes.iceberg_txns
    rows = data.records(txns * RECORDS_PER_TXN, RECORD_BYTES)
    broker = backend.connect()
    topic = unique("c15")
    every = max(txns // PUBLISHES, 1)
    result = CaseResult(15, TITLE, backend.name, sizes=(
        f"{txns:,} transactions × {RECORDS_PER_TXN} records × {RECORD_BYTES} B into {PARTITIONS} partitions, "
        f"published every {every:,} transactions; {sizes.reps * SCAN_REPS_FACTOR} interleaved repetitions"))
    spark = None
    made_tables: list[Any] = []
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

        one_table = _one_file_table(table, whole, unique("c15one"))
        made_tables.append(one_table)
        one_file_rows = one_table.scan().to_arrow()
        if one_file_rows.num_rows != whole.num_rows or len(list(one_table.scan().plan_files())) != 1:
            raise RuntimeError("the one-file table does not hold the rows in one file")

        def read_one() -> pa.Table:
            with table.io.new_input(one).open() as stream:
                return pq.read_table(stream)

        variants: dict[str, Callable[[], float]] = {
            "one file (pyarrow)": lambda: timed(read_one),
            "one-file table (pyiceberg)": lambda: timed(lambda: one_table.scan().to_arrow()),
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
        # a scan takes 10-300 ms: three times the repetitions, so that one slow scan moves no median
        seconds = interleaved(variants, sizes.reps * SCAN_REPS_FACTOR, progress=progress)
        table.io.delete(one)
    finally:
        for made in made_tables:  # dropped with its files (data, manifests, metadata)
            made.catalog.purge_table(made.name())
        if topic in broker._topics.names():
            broker.delete_topic(topic)
        broker.close()
        if spark is not None:
            from .case_spark import stop_spark

            stop_spark()
    result.add(throughput_ratio("table scan / one-file table, pyiceberg to_arrow",
                                seconds["one-file table (pyiceberg)"], seconds["table scan (pyiceberg)"], TARGET,
                                files_before=files_before, files_after=files_after))
    result.add(throughput_ratio("table scan (pyiceberg) / one file (pyarrow read_table), no target",
                                seconds["one file (pyarrow)"], seconds["table scan (pyiceberg)"]))
    result.add(throughput_ratio("one-file table (pyiceberg) / one file (pyarrow read_table), no target",
                                seconds["one file (pyarrow)"], seconds["one-file table (pyiceberg)"]))
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
