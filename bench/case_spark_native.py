"""Case 14: case 8's Spark stage (``bench/spark_stage.py``'s orders, filter and projection)
reading a topic whose records are all published to its Iceberg table, through
``txn_broker.spark.read`` (the native scan: Spark's Parquet reader on the table's files,
offsets resolved and the table planned each repetition), against plain Spark Parquet reading
the same rows from the same storage, written once per partition. Both sides end in Spark's
``noop`` sink, so the figure is the read. Target: throughput ratio ≥ 0.95.

On S3 the native scan needs Hadoop's s3a jars in Spark (docs/spark.md); without them the
read falls back to the ``txn_topic`` source (case 8 measures that path) and this case
reports "not available" rather than a ratio of something else."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq

from .harness import CaseResult, Target, interleaved, throughput_ratio, timed
from .servers import Backend
from .sizes import Sizes
from .workload import unique

TITLE = "Spark stage reading a topic's Iceberg table natively vs plain Spark Parquet"
TARGET = Target(">=", 0.95)
PARTITIONS = 4


def run(backend: Backend, sizes: Sizes, progress: Callable[[str], None]) -> CaseResult:
    from txn_broker.spark import read, register
    from txn_broker.spark.native_read import hadoop_can_open

    from .case_spark import stop_spark
    from .spark_stage import SCHEMA, _spark, make_table, transform

    rows = sizes.spark_rows
    result = CaseResult(14, TITLE, backend.name, sizes=f"{rows:,} rows in {PARTITIONS} partitions, all published; "
                        f"{sizes.spark_reps} interleaved repetitions")
    spark, _started = _spark()
    broker = backend.connect()
    topic = unique("c14")
    plain = Path(backend.root) / f"c14-parquet-{topic}"
    try:
        if backend.s3 is not None and not hadoop_can_open(spark, "s3a"):
            result.status = "not available"
            result.notes.append("This Spark has no s3a file system (hadoop-aws): reads of an s3:// table fall back "
                                "to the txn_topic source, which case 8 measures.")
            return result
        register(spark)
        table = make_table(rows)
        broker.create_topic(topic, partitions=PARTITIONS, schema=SCHEMA, config={"iceberg.enabled": "true"})
        producer = broker.producer(transactional_id=unique("bench-c14"))
        producer.init_transactions()
        step = -(-rows // PARTITIONS)
        plain.mkdir(parents=True)
        with producer.transaction():
            for p in range(PARTITIONS):
                part = table.slice(p * step, step)
                producer.send(topic, part, partition=p)
                pq.write_table(part, plain / f"part-{p}.parquet", compression="zstd")
        producer.close()
        progress("c14: publishing")
        broker.publish_iceberg([topic])

        def native() -> float:
            return timed(lambda: transform(read(spark, broker, topic=topic)).write.format("noop")
                         .mode("overwrite").save())

        def baseline() -> float:
            return timed(lambda: transform(spark.read.parquet(str(plain))).write.format("noop")
                         .mode("overwrite").save())

        plan = transform(read(spark, broker, topic=topic))._jdf.queryExecution().executedPlan().toString()
        if "FileScan parquet" not in str(plan) or "BatchScan txn_topic" in str(plan):
            raise RuntimeError("the read did not go through the native scan alone")
        seconds = interleaved({"plain Spark Parquet": baseline, "native scan": native}, sizes.spark_reps,
                              progress=progress)
    finally:
        if broker._topics.names() and topic in broker._topics.names():
            broker.delete_topic(topic)
        broker.close()
        shutil.rmtree(plain, ignore_errors=True)
        stop_spark()
    result.add(throughput_ratio("throughput, native scan stage / plain Spark Parquet stage",
                                seconds["plain Spark Parquet"], seconds["native scan"], TARGET))
    result.series = {"seconds": seconds}
    result.notes.append("The native side also resolves the offsets and plans the table (catalog, manifests) "
                        "each repetition; the baseline reads the same rows from zstd Parquet files, one per "
                        "partition, in the same storage.")
    return result
