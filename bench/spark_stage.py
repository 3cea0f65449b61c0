"""Benchmark: one Spark stage (read, filter and project, write) through ``txn_topic`` in a
transaction (``txn_stage``), against the same stage with plain Spark Parquet reading and
writing, on the same data in the same run. Reports txn_topic throughput / Parquet
throughput (the benchmarks issue's target: >= 0.8).

Both stages read the same rows (an orders-like table) from the same kind of storage and
write the same filtered projection; each repetition runs both, interleaved, after one
warm-up of each. The txn_topic stage is what a pipeline stage does: init, begin, fixed
offsets, read, write, send offsets, commit. With S3 storage the Parquet baseline has to
use the local disk (the pyspark distribution has no S3A connector), which is said in the
notes.

    python -m bench.spark_stage --rows 1000000 --reps 3          # embedded SQLite + local dir
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

SCHEMA = pa.schema([
    ("order_id", pa.string()), ("customer_id", pa.string()), ("country", pa.string()),
    ("amount", pa.float64()), ("quantity", pa.int32()), ("ts", pa.timestamp("ms", tz="UTC")),
])
OUT_SCHEMA = pa.schema([
    ("order_id", pa.string()), ("country", pa.string()), ("amount", pa.float64()), ("net", pa.float64()),
    ("ts", pa.timestamp("ms", tz="UTC")),
])
PARTITIONS = 4
COUNTRIES = np.array(["DE", "FR", "NL", "SE", "GB", "US", "CH", "ES"])


def make_table(rows: int, seed: int = 1) -> pa.Table:
    """``rows`` orders, built with numpy (no per-row Python)."""
    rng = np.random.default_rng(seed)
    ids = np.char.add("o-", np.arange(rows).astype(str))
    customers = np.char.add("c-", rng.integers(0, max(rows // 10, 1), rows).astype(str))
    return pa.table({
        "order_id": pa.array(ids), "customer_id": pa.array(customers),
        "country": pa.array(COUNTRIES[rng.integers(0, len(COUNTRIES), rows)]),
        "amount": pa.array(rng.uniform(1, 500, rows).round(2)),
        "quantity": pa.array(rng.integers(1, 10, rows).astype(np.int32)),
        "ts": pa.array(1_709_251_200_000 + rng.integers(0, 86_400_000 * 3, rows), pa.timestamp("ms", tz="UTC")),
    }, schema=SCHEMA)


def transform(df: Any) -> Any:
    """The stage's filter and projection (the same for both sides)."""
    from pyspark.sql import functions as F

    return (df.where((F.col("amount") > 50) & (F.col("quantity") < 8))
            .select("order_id", "country", "amount", (F.col("amount") * F.lit(0.81)).alias("net"), "ts"))


def _spark() -> tuple[Any, bool]:
    """The active SparkSession, or a new local[2] one; and whether it was created here."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active, False
    return (SparkSession.builder.master("local[2]").appName("bench-spark-stage")
            .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "4").config("spark.driver.memory", "2g")
            .config("spark.sql.session.timeZone", "UTC").getOrCreate()), True


def run(rows: int, reps: int, database_url: str, storage_url: str, workdir: str | os.PathLike[str],
        s3_endpoint_url: str | None = None, parquet_location: str | None = None,
        progress: Callable[[str], None] = print) -> dict[str, Any]:
    """Time both stages ``reps`` times (interleaved, after a warm-up of each) on ``rows``
    rows. Returns ``{"seconds": {"parquet": [...], "txn_topic": [...]}, "ratio": median of
    parquet_s / txn_topic_s, "sizes": ..., "notes": [...]}``."""
    import txn_broker
    from txn_broker.spark import register, txn_stage

    if s3_endpoint_url:
        os.environ.setdefault("TXN_BROKER_S3_ENDPOINT_URL", s3_endpoint_url)
    notes: list[str] = []
    local_parquet = parquet_location and urlparse(parquet_location).scheme == "file"
    base = Path(urlparse(parquet_location).path) if local_parquet and parquet_location else \
        Path(workdir) / f"spark-parquet-{uuid.uuid4().hex[:6]}"
    if not local_parquet and parquet_location:
        notes.append("Parquet baseline on the local disk: the pyspark distribution has no S3A connector, "
                     "while the txn_topic stage uses S3")
    base.mkdir(parents=True, exist_ok=True)
    parquet_in, parquet_out = base / "in", base / "out"

    progress(f"spark stage: generating {rows:,} rows")
    table = make_table(rows)
    in_topic, out_topic = f"bench_in_{uuid.uuid4().hex[:6]}", f"bench_out_{uuid.uuid4().hex[:6]}"
    with txn_broker.connect(database_url, storage_url) as broker:
        broker.create_topic(in_topic, partitions=PARTITIONS, schema=SCHEMA)
        broker.create_topic(out_topic, partitions=PARTITIONS, schema=OUT_SCHEMA)
        producer = broker.producer(transactional_id=f"bench.{in_topic}")
        producer.init_transactions()
        step = -(-rows // PARTITIONS)
        with producer.transaction():
            for p in range(PARTITIONS):
                producer.send(in_topic, table.slice(p * step, step), partition=p)
        producer.close()
        parquet_in.mkdir(parents=True, exist_ok=True)
        for p in range(PARTITIONS):  # the same rows, the same number of files
            pq.write_table(table.slice(p * step, step), parquet_in / f"part-{p}.parquet")
        segments = sum(p.segment_count for p in broker.describe_topic(in_topic).partitions)

        spark, created = _spark()
        register(spark)

        def parquet_stage() -> int:
            transform(spark.read.parquet(str(parquet_in))).write.mode("overwrite").parquet(str(parquet_out))
            return 0

        def topic_stage(i: int) -> int:
            with txn_stage(spark, broker, transactional_id=f"bench.stage.{out_topic}", group_id=f"g{i}",
                           inputs=[in_topic]) as stage:
                stage.write(transform(stage.read()), topic=out_topic)
            return stage.summary.records_out

        def timed(call: Callable[[], int]) -> tuple[float, int]:
            start = time.perf_counter()
            out = call()
            return time.perf_counter() - start, out

        progress("spark stage: warm-up")
        timed(parquet_stage)
        _, written = timed(lambda: topic_stage(0))
        expected = spark.read.parquet(str(parquet_out)).count()
        if written != expected:
            raise AssertionError(f"the txn_topic stage wrote {written} records, the Parquet stage {expected}")
        seconds: dict[str, list[float]] = {"parquet": [], "txn_topic": []}
        for rep in range(1, reps + 1):
            seconds["parquet"].append(timed(parquet_stage)[0])
            seconds["txn_topic"].append(timed(lambda rep=rep: topic_stage(rep))[0])
            progress(f"spark stage: rep {rep}/{reps}: parquet {seconds['parquet'][-1]:.2f}s, "
                     f"txn_topic {seconds['txn_topic'][-1]:.2f}s")
        broker.delete_topic(in_topic)
        broker.delete_topic(out_topic)
        if created:
            spark.stop()
    shutil.rmtree(base, ignore_errors=True)
    ratios = [p / t for p, t in zip(seconds["parquet"], seconds["txn_topic"], strict=True)]
    return {"seconds": seconds, "ratio": float(np.median(ratios)),
            "sizes": f"{rows:,} rows in, {expected:,} out, {segments} input segments",
            "rows_out": expected, "notes": notes}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    from txn_broker.config import resolve_database_url, resolve_storage_url

    work = Path(tempfile.mkdtemp(prefix="bench-spark-"))
    try:
        db = os.environ.get("TXN_BROKER_DATABASE_URL") or f"sqlite:///{work / 'broker.db'}"
        storage = os.environ.get("TXN_BROKER_STORAGE_URL") or (work / "segments").as_uri()
        db, storage = resolve_database_url(db)[0], resolve_storage_url(storage)
        out = run(args.rows, args.reps, db, storage, work,
                  progress=(lambda m: print(m, file=sys.stderr)) if args.json else print)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps(out, sort_keys=True))
        return
    print(f"{'stage':<12}{'median s':>10}{'min s':>9}{'max s':>9}")
    for name, values in out["seconds"].items():
        print(f"{name:<12}{np.median(values):>10.2f}{min(values):>9.2f}{max(values):>9.2f}")
    print(f"throughput ratio txn_topic / parquet: {out['ratio']:.2f} ({out['sizes']})")
    for note in out["notes"]:
        print(f"note: {note}")


if __name__ == "__main__":
    main()
