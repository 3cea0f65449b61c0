"""Benchmark: one Spark stage (read, filter and project, write) through ``txn_topic`` in a
transaction (``txn_stage``), against the same stage with plain Spark Parquet reading and
writing, on the same data in the same run. Reports txn_topic throughput / Parquet
throughput (the target: >= 0.9, over at least 1M rows in 4 input partitions).

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
import contextlib
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


def _pyarrow_s3_baseline(spark: Any, fs_args: dict[str, Any], in_keys: list[str], out_base: str
                         ) -> Callable[..., int]:
    """The baseline on S3: the same stage with pyarrow reading the input Parquet objects and
    writing the output ones from Spark's Python workers, through the same S3 server. The
    driver plans the list of object keys (one Spark task per object, as the txn_topic read
    has one per segment); ``mapInArrow`` reads each object (Arrow batches to the JVM), the
    same filter and projection run in the JVM, and a second ``mapInArrow`` writes each
    task's rows as one Parquet object (Arrow batches back to Python). Both stages so pay the
    JVM <-> Python transfers both ways and the same storage: what differs is the format
    (Parquet + snappy against Arrow IPC segments + zstd) and the broker's work (planning,
    transaction, registration)."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    ddl = "order_id string, customer_id string, country string, amount double, quantity int, ts timestamp"
    read_schema: StructType = StructType.fromDDL(ddl)  # type: ignore[assignment]
    target = to_arrow_schema(read_schema, timezone="UTC")

    def read_objects(batches: Any) -> Any:
        import pyarrow.parquet as pq
        from pyarrow import fs as pafs

        s3 = pafs.S3FileSystem(**fs_args)
        for b in batches:
            for key in b.column(0).to_pylist():
                yield from pq.read_table(key, filesystem=s3).cast(target).to_batches()

    def stage(rep: int, read_only: bool = False) -> int:
        prefix = f"{out_base}/rep-{rep}-{uuid.uuid4().hex[:6]}"

        def write_objects(batches: Any) -> Any:
            import pyarrow as pa
            import pyarrow.parquet as pq
            from pyarrow import fs as pafs
            from pyspark import TaskContext

            s3 = pafs.S3FileSystem(**fs_args)
            ctx = TaskContext.get()
            assert ctx is not None
            table = pa.Table.from_batches(list(batches))
            if table.num_rows:
                pq.write_table(table, f"{prefix}/part-{ctx.partitionId():05d}-{ctx.taskAttemptId()}.parquet",
                               filesystem=s3)
            yield pa.RecordBatch.from_pydict({"rows": [table.num_rows]}, schema=pa.schema([("rows", pa.int64())]))

        keys = spark.createDataFrame(spark.sparkContext.parallelize([(k,) for k in in_keys], len(in_keys)),
                                     "key string")
        df = keys.mapInArrow(read_objects, read_schema)
        if read_only:
            transform(df).write.format("noop").mode("overwrite").save()
            return 0
        return sum(r.rows for r in transform(df).mapInArrow(write_objects, "rows long").collect())

    return stage


class _SparkJobs:
    """Spark jobs, stages and tasks of a job group, and their times, from the driver's
    status store (Spark's own UI data; falls back to the status tracker's counts)."""

    def __init__(self, spark: Any) -> None:
        self.sc = spark.sparkContext

    def start(self, group: str) -> None:
        self.sc.setJobGroup(group, group)

    def summary(self, group: str) -> dict[str, float]:
        tracker = self.sc.statusTracker()
        job_ids = list(tracker.getJobIdsForGroup(group))
        out: dict[str, float] = {"jobs": len(job_ids), "tasks": 0, "job_s": 0.0, "task_s": 0.0, "task_jvm_cpu_s": 0.0}
        try:
            store = self.sc._jsc.sc().statusStore()
            for jid in job_ids:
                job = store.job(jid)
                if job.submissionTime().isDefined() and job.completionTime().isDefined():
                    out["job_s"] += (job.completionTime().get().getTime() - job.submissionTime().get().getTime()) / 1e3
                stage_ids = job.stageIds()
                for k in range(stage_ids.size()):
                    st = store.lastStageAttempt(stage_ids.apply(k))
                    out["tasks"] += st.numTasks()
                    out["task_s"] += st.executorRunTime() / 1e3
                    out["task_jvm_cpu_s"] += st.executorCpuTime() / 1e9
        except Exception:  # the status store is Spark's internal API: counts only
            for jid in job_ids:
                info = tracker.getJobInfo(jid)
                for sid in info.stageIds if info else ():
                    st = tracker.getStageInfo(sid)
                    out["tasks"] += st.numTasks if st else 0
        return out


def _tree_cpu() -> float:
    """CPU seconds used so far by this process and every process under it (the JVM Spark
    runs in, its Python workers, a moto server the bench started), from /proc; 0 off Linux.
    On a shared machine it tells the stages' cost apart from the waits other work causes."""
    procs: dict[int, tuple[int, int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text[text.rfind(")") + 2:].split()
        procs[int(stat.parent.name)] = (int(fields[1]), sum(int(x) for x in fields[11:15]))
    me, ticks = os.getpid(), 0
    for pid, (_, used) in procs.items():
        ancestor = pid
        while ancestor in procs and ancestor not in (me, 0, 1):
            ancestor = procs[ancestor][0]
        if ancestor == me:
            ticks += used
    return ticks / (os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100)


def _median(values: list[float]) -> float:
    return float(np.median(values)) if values else float("nan")


def _work_breakdown(broker: Any, in_topic: str, parquet_in: Path | None) -> dict[str, float]:
    """The Python work of one stage, measured in this process on one core: decoding the
    input segments, converting them to Spark's Arrow types, encoding the output (zstd and
    uncompressed) and putting it in the store; and pyarrow's Parquet read and write of the
    same rows (the local baseline's format)."""
    import pyarrow.compute as pc

    from txn_broker.log.partition import READ_COMMITTED
    from txn_broker.log.reader import load_segment, read_rows, with_metadata
    from txn_broker.log.segment_format import encode_segment, with_timestamp
    from txn_broker.spark.offsets import resolve_offsets
    from txn_broker.spark.planning import plan_splits
    from txn_broker.spark.schemas import arrow_target, spark_schema, to_target, union_schema

    out: dict[str, float] = {}
    ranges = resolve_offsets(broker, [in_topic], "earliest", "latest", isolation_level=READ_COMMITTED)
    splits = plan_splits(broker, ranges, max_bytes=2**62)
    store = broker._store
    target = arrow_target(spark_schema(union_schema([(in_topic, SCHEMA)])))
    tables, batches, seg_bytes = [], [], 0
    start = time.perf_counter()
    loaded = [(split, seg, load_segment(store, seg.planned())) for split in splits for seg in split.segments]
    out["segment_get_decode_s"] = time.perf_counter() - start
    start = time.perf_counter()
    for split, seg, table in loaded:
        seg_bytes += seg.size_bytes
        rows = read_rows(table, seg.planned(), seg.start, seg.end)
        got = to_target(with_metadata(rows, split.topic, split.partition, seg.start), target)
        batches.extend(got)
        tables.append(table)
    out["to_spark_types_s"] = time.perf_counter() - start
    out["read_batches"] = len(batches)
    out["rows_per_read_batch"] = _median([b.num_rows for b in batches])
    whole = pa.concat_tables(tables)
    mask = pc.and_(pc.greater(whole["amount"], 50), pc.less(whole["quantity"], 8))
    kept = whole.filter(mask)
    result = pa.table({"order_id": kept["order_id"], "country": kept["country"], "amount": kept["amount"],
                       "net": pc.multiply(kept["amount"], 0.81), "ts": kept["ts"]}, schema=OUT_SCHEMA)
    result = with_timestamp(result, int(time.time() * 1000))
    for codec in ("zstd", "lz4", "uncompressed"):
        start = time.perf_counter()
        payload = encode_segment(result, codec)
        out[f"encode_{codec}_s"] = time.perf_counter() - start
        out[f"encode_{codec}_mb"] = len(payload) / 1e6
    key = f"bench-scratch/{uuid.uuid4().hex}.arrow"
    start = time.perf_counter()
    store.put(key, payload)  # the uncompressed one: the put cost per MB
    out["put_uncompressed_s"] = time.perf_counter() - start
    with contextlib.suppress(Exception):
        store.delete(key)
    out["input_segment_mb"] = seg_bytes / 1e6
    if parquet_in is not None:
        start = time.perf_counter()
        for f in sorted(parquet_in.glob("*.parquet")):
            pq.read_table(f)
        out["parquet_read_s"] = time.perf_counter() - start
        start = time.perf_counter()
        sink = pa.BufferOutputStream()
        pq.write_table(result, sink)
        out["parquet_write_snappy_s"] = time.perf_counter() - start
    return out


def run(rows: int, reps: int, database_url: str, storage_url: str, workdir: str | os.PathLike[str],
        s3_endpoint_url: str | None = None, parquet_location: str | None = None,
        progress: Callable[[str], None] = print) -> dict[str, Any]:
    """Time both stages ``reps`` times (interleaved, after a warm-up of each) on ``rows``
    rows. Returns ``{"seconds": {"parquet": [...], "txn_topic": [...]}, "ratio": median of
    parquet_s / txn_topic_s, "sizes": ..., "notes": [...], "breakdown": {...}}``.

    The baseline: with local storage (``parquet_location`` a ``file:`` URI, or none), plain
    Spark Parquet on the same disk; with S3 storage, pyarrow reading and writing Parquet
    objects of the same S3 server from Spark's Python workers (:func:`_pyarrow_s3_baseline`)."""
    import txn_broker
    from txn_broker.spark import register, txn_stage

    if s3_endpoint_url:
        os.environ.setdefault("TXN_BROKER_S3_ENDPOINT_URL", s3_endpoint_url)
    notes: list[str] = []
    on_s3 = bool(parquet_location) and urlparse(parquet_location or "").scheme == "s3"
    if parquet_location and urlparse(parquet_location).scheme == "file":
        base = Path(urlparse(parquet_location).path)
    else:
        base = Path(workdir) / f"spark-parquet-{uuid.uuid4().hex[:6]}"
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
        segments = sum(p.segment_count for p in broker.describe_topic(in_topic).partitions)

        spark, created = _spark()
        register(spark)
        jobs = _SparkJobs(spark)

        if on_s3:
            from pyarrow import fs as pafs

            parsed = urlparse(parquet_location or "")
            s3_base = f"{parsed.netloc}{parsed.path}".rstrip("/") + f"/{uuid.uuid4().hex[:6]}"
            fs_args = {"endpoint_override": s3_endpoint_url or os.environ.get("TXN_BROKER_S3_ENDPOINT_URL"),
                       "region": os.environ.get("AWS_DEFAULT_REGION", "us-east-1")}
            s3 = pafs.S3FileSystem(**fs_args)  # credentials: the AWS_* variables, in the workers too
            in_keys = []
            for p in range(PARTITIONS):  # the same rows, the same number of objects
                in_keys.append(f"{s3_base}/in/part-{p}.parquet")
                pq.write_table(table.slice(p * step, step), in_keys[-1], filesystem=s3)
            s3_stage = _pyarrow_s3_baseline(spark, fs_args, in_keys, f"{s3_base}/out")
            baseline_name = "pyarrow Parquet on S3 from Spark's Python workers (mapInArrow)"
            notes.append("baseline: the same stage with pyarrow reading and writing Parquet objects in the same "
                         "moto S3 server from Spark's Python workers (mapInArrow; the driver plans the object keys, "
                         "one task per object): both stages pay the JVM <-> Python transfers both ways and the same "
                         "storage, which plain Spark cannot use here (the pyspark distribution has no S3A connector)")
        else:
            parquet_in.mkdir(parents=True, exist_ok=True)
            for p in range(PARTITIONS):  # the same rows, the same number of files
                pq.write_table(table.slice(p * step, step), parquet_in / f"part-{p}.parquet")
            baseline_name = "plain Spark Parquet on the same local disk"

        def parquet_stage(rep: int) -> int:
            if on_s3:
                return s3_stage(rep)
            transform(spark.read.parquet(str(parquet_in))).write.mode("overwrite").parquet(str(parquet_out))
            return 0

        phases: dict[str, list[float]] = {"begin": [], "load": [], "spark_write": [], "commit": []}

        def topic_stage(i: int) -> int:
            t0 = time.perf_counter()
            with txn_stage(spark, broker, transactional_id=f"bench.stage.{out_topic}", group_id=f"g{i}",
                           inputs=[in_topic]) as stage:
                t1 = time.perf_counter()
                df = stage.read()
                t2 = time.perf_counter()
                stage.write(transform(df), topic=out_topic)
                t3 = time.perf_counter()
            t4 = time.perf_counter()
            for name, value in zip(phases, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
                phases[name].append(value)
            return stage.summary.records_out

        cpu: dict[str, list[float]] = {"parquet": [], "txn_topic": []}

        def timed(call: Callable[[], int], side: str | None = None) -> tuple[float, int]:
            used = _tree_cpu()
            start = time.perf_counter()
            out = call()
            elapsed = time.perf_counter() - start
            if side:
                cpu[side].append(_tree_cpu() - used)
            return elapsed, out

        progress("spark stage: warm-up")
        _, expected_s3 = timed(lambda: parquet_stage(0))
        _, written = timed(lambda: topic_stage(0))
        expected = expected_s3 if on_s3 else spark.read.parquet(str(parquet_out)).count()
        if written != expected:
            raise AssertionError(f"the txn_topic stage wrote {written} records, the baseline stage {expected}")
        for values in phases.values():
            values.clear()
        seconds: dict[str, list[float]] = {"parquet": [], "txn_topic": []}
        spark_jobs: dict[str, list[dict[str, float]]] = {"parquet": [], "txn_topic": []}
        for rep in range(1, reps + 1):
            jobs.start(f"bench-baseline-{rep}")
            seconds["parquet"].append(timed(lambda rep=rep: parquet_stage(rep), "parquet")[0])
            spark_jobs["parquet"].append(jobs.summary(f"bench-baseline-{rep}"))
            jobs.start(f"bench-topic-{rep}")
            seconds["txn_topic"].append(timed(lambda rep=rep: topic_stage(rep), "txn_topic")[0])
            spark_jobs["txn_topic"].append(jobs.summary(f"bench-topic-{rep}"))
            progress(f"spark stage: rep {rep}/{reps}: baseline {seconds['parquet'][-1]:.2f}s, "
                     f"txn_topic {seconds['txn_topic'][-1]:.2f}s")
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
        progress("spark stage: the read side alone (filter and project, written to Spark's noop sink)")
        from txn_broker.spark.options import connection_options

        def topic_read_only() -> int:
            df = spark.read.format("txn_topic").options(**connection_options(broker)).option("topics", in_topic).load()
            transform(df).write.format("noop").mode("overwrite").save()
            return 0

        def baseline_read_only() -> int:
            if on_s3:
                return s3_stage(0, read_only=True)
            transform(spark.read.parquet(str(parquet_in))).write.format("noop").mode("overwrite").save()
            return 0

        read_side: dict[str, list[float]] = {"parquet": [], "txn_topic": []}
        for _ in range(max(3, reps)):
            read_side["parquet"].append(timed(baseline_read_only)[0])
            read_side["txn_topic"].append(timed(topic_read_only)[0])
        progress("spark stage: breakdown of the Python work")
        work = _work_breakdown(broker, in_topic, None if on_s3 else parquet_in)
        broker.delete_topic(in_topic)
        broker.delete_topic(out_topic)
        batch_rows = spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch")
        if created:
            spark.stop()
    shutil.rmtree(base, ignore_errors=True)
    ratios = [p / t for p, t in zip(seconds["parquet"], seconds["txn_topic"], strict=True)]
    breakdown = {"phases_s": {k: _median(v) for k, v in phases.items()},
                 "cpu_s": {k: _median(v) for k, v in cpu.items()},
                 "read_side_s": {k: _median(v) for k, v in read_side.items()},
                 "cpu_ratio": _median([p / t for p, t in zip(cpu["parquet"], cpu["txn_topic"], strict=True) if t > 0]),
                 "spark": {side: {k: _median([j[k] for j in js]) for k in js[0]} for side, js in spark_jobs.items()},
                 "python_work_s": work, "write_batch_rows": batch_rows}
    notes.extend(_breakdown_notes(breakdown, seconds, baseline_name))
    return {"seconds": seconds, "ratio": float(np.median(ratios)),
            "sizes": f"{rows:,} rows in, {expected:,} out, {segments} input segments",
            "rows_out": expected, "notes": notes, "breakdown": breakdown}


def _breakdown_notes(b: dict[str, Any], seconds: dict[str, list[float]], baseline: str) -> list[str]:
    """The breakdown as short notes (medians over the repetitions)."""
    ph, sp, w = b["phases_s"], b["spark"], b["python_work_s"]
    t, base = sp["txn_topic"], sp["parquet"]
    spark_outside = ph["spark_write"] - t["job_s"]
    notes = [
        f"CPU of a stage (driver, Spark's JVM and Python workers, and moto on S3; PostgreSQL not counted), "
        f"median: txn_topic {b['cpu_s']['txn_topic']:.2f}s, baseline {b['cpu_s']['parquet']:.2f}s: a CPU ratio "
        f"of {b['cpu_ratio']:.2f} (the wall-time ratio moves with what else runs on the machine)",
        f"read side alone (read, filter, project, Spark's noop sink), median: txn_topic "
        f"{b['read_side_s']['txn_topic']:.2f}s, baseline {b['read_side_s']['parquet']:.2f}s; so the write side "
        f"(the rest of the stage, transaction included) is txn_topic "
        f"{_median(seconds['txn_topic']) - b['read_side_s']['txn_topic']:.2f}s, baseline "
        f"{_median(seconds['parquet']) - b['read_side_s']['parquet']:.2f}s",
        f"txn_topic stage {_median(seconds['txn_topic']):.2f}s = begin (init, begin, fix offsets) "
        f"{ph['begin'] * 1e3:.0f} ms + load (schema in a Python worker) {ph['load'] * 1e3:.0f} ms + write "
        f"{ph['spark_write']:.2f}s + commit (offsets, summary, commit) {ph['commit'] * 1e3:.0f} ms; of the write, "
        f"Spark job(s) {t['job_s']:.2f}s and driver-side Python (split planning, registration) "
        f"{spark_outside * 1e3:.0f} ms",
        f"Spark work per stage: txn_topic {t['jobs']:.0f} job(s), {t['tasks']:.0f} task(s), tasks' time "
        f"{t['task_s']:.2f}s (JVM CPU {t['task_jvm_cpu_s']:.2f}s); baseline ({baseline}) {base['jobs']:.0f} job(s), "
        f"{base['tasks']:.0f} task(s), {base['job_s']:.2f}s in jobs, tasks' time {base['task_s']:.2f}s "
        f"(JVM CPU {base['task_jvm_cpu_s']:.2f}s)",
        f"Python work of a txn_topic stage, one core: get + decode {w['input_segment_mb']:.0f} MB of input "
        f"segments {w['segment_get_decode_s'] * 1e3:.0f} ms, to Spark's Arrow types {w['to_spark_types_s'] * 1e3:.0f} "
        f"ms ({w['read_batches']:.0f} read batches of {w['rows_per_read_batch']:,.0f} rows; writes get batches of "
        f"{b['write_batch_rows']} rows); output encode zstd {w['encode_zstd_s'] * 1e3:.0f} ms "
        f"({w['encode_zstd_mb']:.0f} MB), lz4 {w['encode_lz4_s'] * 1e3:.0f} ms ({w['encode_lz4_mb']:.0f} MB), "
        f"uncompressed {w['encode_uncompressed_s'] * 1e3:.0f} ms ({w['encode_uncompressed_mb']:.0f} MB); "
        f"put of the uncompressed output {w['put_uncompressed_s'] * 1e3:.0f} ms",
    ]
    if "parquet_read_s" in w:
        notes.append(f"pyarrow on the baseline's format, one core: Parquet read {w['parquet_read_s'] * 1e3:.0f} ms, "
                     f"write (snappy) {w['parquet_write_snappy_s'] * 1e3:.0f} ms")
    return notes


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
