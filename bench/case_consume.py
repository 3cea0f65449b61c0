"""Case 5: ``read_committed`` consume against reading the same segment objects straight
with pyarrow, and against ``read_uncommitted``. Targets: throughput ratio ≥ 0.90 (against
pyarrow) and ≥ 0.95 (against read_uncommitted).

Then the shape a new user tries first (issue 15): ``user_rows`` rows of (int64, float64,
string) in 4 partitions, consumed whole with ``poll(max_records=500)``, ``10,000`` and
``poll()``'s default size, against pyarrow reading the same rows as zstd Arrow IPC files
(one per partition) on the same storage (on S3, through the same server). Targets: ≥ 0.90
at 10,000 and ≥ 0.50 at the default. Wall-time ratios are the figures; the consuming
process's CPU-time ratios (threads included) are reported next to them, since a shared
machine makes wall time noisy.

The topic is written once (4 partitions, transactions of ~8 MB, all committed, so both
isolation levels return the same records) and then read whole in every repetition by a
new consumer (cold segment cache), polling ``poll_records`` at a time. The pyarrow
baseline opens each segment object through pyarrow's file system on the same storage
and reads it whole; the list of objects comes from the broker's metadata beforehand
(not timed)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from txn_broker import READ_COMMITTED, READ_UNCOMMITTED, TopicPartition

from . import data
from .harness import CaseResult, Target, interleaved, mb, throughput_ratio, timed
from .servers import Backend
from .sizes import Sizes
from .workload import drop_topic, new_topic, unique

if TYPE_CHECKING:
    import pyarrow as pa

TITLE = "read_committed consume vs pyarrow and read_uncommitted"
PARTITIONS = 4
PYARROW_TARGET = Target(">=", 0.90)
UNCOMMITTED_TARGET = Target(">=", 0.95)
#: the new-user shape: its schema, rows per send (a send goes to one partition), and the
#: poll sizes measured (None: poll()'s default) with their targets
USER_SCHEMA_FIELDS = (("id", "int64"), ("x", "float64"), ("s", "string"))
USER_CHUNK_ROWS = 100_000
USER_POLLS: dict[int | None, Target | None] = {500: None, 10_000: Target(">=", 0.90), None: Target(">=", 0.50)}


def _fill(broker: Any, topic: str, sizes: Sizes) -> int:
    """Write ``consume_mb`` in transactions of ``txn_mb``, sending 1 MB at a time (the
    partitioner moves to the next partition on every send). Returns the record count."""
    chunks = data.record_chunks(sizes.consume_mb * 1_000_000, 1_000_000, sizes.record_bytes)
    per_txn = max(sizes.txn_mb, 1)
    producer = broker.producer(transactional_id=unique("bench-c5"))
    producer.init_transactions()
    for start in range(0, len(chunks), per_txn):
        with producer.transaction():
            for chunk in chunks[start:start + per_txn]:
                producer.send(topic, chunk)
    producer.close()
    return sum(c.num_rows for c in chunks)


def _consume(broker: Any, topic: str, isolation: str, expected: int, poll_records: int | None) -> int:
    """Read ``expected`` records from every partition of ``topic``; ``poll_records`` None:
    the consumer's default poll size."""
    consumer = broker.consumer(isolation_level=isolation)
    consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
    got = 0
    while got < expected:
        batch = consumer.poll(max_records=poll_records)
        if batch.num_rows == 0:
            raise RuntimeError(f"{isolation} consumer stopped at {got} of {expected} records")
        got += batch.num_rows
    consumer.close()
    return got


def run(backend: Backend, sizes: Sizes, progress: Callable[[str], None]) -> CaseResult:
    import pyarrow as pa

    broker = backend.connect()
    topic = new_topic(broker, "c5", data.RECORD_SCHEMA, partitions=PARTITIONS)
    try:
        expected = _fill(broker, topic, sizes)
        meta = broker._topics.get(topic)
        rows = broker._db.run(lambda tx: tx.all("topic_object_keys", topic_id=meta.topic_id), write=False)
        keys = [r.object_key for r in rows]
        total_bytes = int(sum(p.size_bytes for p in broker.describe_topic(topic).partitions))
        fs, _base = backend.arrow_fs()
        prefix = backend.arrow_path(backend.storage_url)

        def pyarrow_read() -> int:
            n = 0
            for key in keys:
                with fs.open_input_file(f"{prefix}/{key}") as f:
                    n += pa.ipc.open_file(f).read_all().num_rows
            if n != expected:
                raise RuntimeError(f"pyarrow read {n} of {expected} records")
            return n

        variants = {
            "pyarrow": lambda: timed(pyarrow_read),
            "read_committed": lambda: timed(lambda: _consume(broker, topic, READ_COMMITTED, expected,
                                                             sizes.poll_records)),
            "read_uncommitted": lambda: timed(lambda: _consume(broker, topic, READ_UNCOMMITTED, expected,
                                                               sizes.poll_records)),
        }
        times = interleaved(variants, sizes.reps, progress=progress)
    finally:
        drop_topic(broker, topic)
        broker.close()
    result = CaseResult(5, TITLE, backend.name, sizes=(
        f"{mb(total_bytes)} in {len(keys)} segments ({expected:,} records × {sizes.record_bytes} B, "
        f"{PARTITIONS} partitions, transactions of {sizes.txn_mb} MB, all committed), read whole per repetition "
        f"with poll(max_records={sizes.poll_records:,}); {sizes.reps} interleaved repetitions"))
    result.add(throughput_ratio("throughput, read_committed / pyarrow", times["pyarrow"], times["read_committed"],
                                PYARROW_TARGET, bytes=total_bytes))
    result.add(throughput_ratio("throughput, read_committed / read_uncommitted", times["read_uncommitted"],
                                times["read_committed"], UNCOMMITTED_TARGET, bytes=total_bytes))
    result.series = {"seconds": times, "bytes": total_bytes}
    mbps = {name: total_bytes / 1e6 / statistics.median(ts) for name, ts in times.items()}
    result.notes.append("Median throughput: " + ", ".join(f"{n} {v:,.0f} MB/s" for n, v in mbps.items()) + ".")
    _new_user_shape(backend, sizes, progress, result)
    return result


def _poll_name(max_records: int | None) -> str:
    return "poll()" if max_records is None else f"poll(max_records={max_records:,})"


def _user_chunks(rows: int) -> list[pa.Table]:
    import pyarrow as pa

    schema = pa.schema(USER_SCHEMA_FIELDS)
    rng = np.random.default_rng(5)
    words = np.array([f"user-{i:06d}-{'x' * (i % 12)}" for i in range(4096)], dtype=object)
    chunks = []
    for start in range(0, rows, USER_CHUNK_ROWS):
        n = min(USER_CHUNK_ROWS, rows - start)
        chunks.append(pa.table({"id": np.arange(start, start + n, dtype=np.int64), "x": rng.random(n),
                                "s": pa.array(words[rng.integers(0, len(words), n)], type=pa.string())},
                               schema=schema))
    return chunks


def _new_user_shape(backend: Backend, sizes: Sizes, progress: Callable[[str], None], result: CaseResult) -> None:
    """The new user's shape: figures added to ``result``."""
    import pyarrow as pa

    rows = sizes.user_rows
    chunks = _user_chunks(rows)
    per_partition: dict[int, list[pa.Table]] = {p: [] for p in range(PARTITIONS)}
    broker = backend.connect()
    topic = new_topic(broker, "c5u", chunks[0].schema, partitions=PARTITIONS)
    fs, base = backend.arrow_fs()
    directory = f"{base}/{unique('c5-pyarrow')}"
    try:
        producer = broker.producer(transactional_id=unique("bench-c5u"))
        producer.init_transactions()
        for start in range(0, len(chunks), PARTITIONS):  # a transaction: one chunk per partition
            with producer.transaction():
                for i in range(start, min(start + PARTITIONS, len(chunks))):
                    producer.send(topic, chunks[i], partition=i % PARTITIONS)
                    per_partition[i % PARTITIONS].append(chunks[i])
        producer.close()
        if not backend.is_s3:
            fs.create_dir(directory)
        files = []
        options = pa.ipc.IpcWriteOptions(compression="zstd")
        for p, tables in per_partition.items():
            if tables:
                files.append(f"{directory}/partition-{p}.arrow")
                with fs.open_output_stream(files[-1]) as out, \
                        pa.ipc.new_file(out, chunks[0].schema, options=options) as writer:
                    writer.write_table(pa.concat_tables(tables))
        file_bytes = sum(info.size for info in fs.get_file_info(files))

        def pyarrow_read() -> int:
            n = 0
            for path in files:
                with fs.open_input_file(path) as f:
                    n += pa.ipc.open_file(f).read_all().num_rows
            if n != rows:
                raise RuntimeError(f"pyarrow read {n} of {rows} records")
            return n

        def consume(max_records: int | None) -> int:
            return _consume(broker, topic, "read_committed", rows, max_records)

        cpu: dict[str, list[float]] = {}

        def measured(name: str, call: Callable[[], Any]) -> Callable[[], float]:
            def run() -> float:
                started = time.process_time()
                seconds = timed(call)
                cpu.setdefault(name, []).append(time.process_time() - started)
                return seconds
            return run

        variants = {"pyarrow": measured("pyarrow", pyarrow_read)}
        for max_records in USER_POLLS:
            variants[_poll_name(max_records)] = measured(_poll_name(max_records),
                                                         lambda m=max_records: consume(m))
        progress(f"new-user shape: {rows:,} rows")
        times = interleaved(variants, sizes.reps, progress=progress)
    finally:
        drop_topic(broker, topic)
        broker.close()
        fs.delete_dir_contents(directory, missing_dir_ok=True)
        if not backend.is_s3:
            fs.delete_dir(directory)
    cpu = {name: samples[-sizes.reps:] for name, samples in cpu.items()}  # the warm-up round is not counted
    result.sizes += (f"; new-user shape: {rows:,} rows of (int64, float64, string) in {PARTITIONS} partitions "
                     f"against pyarrow reading them as {len(files)} zstd Arrow IPC files ({mb(file_bytes)})")
    for max_records, target in USER_POLLS.items():
        name = _poll_name(max_records)
        result.add(throughput_ratio(f"throughput, new-user shape, {name} / pyarrow", times["pyarrow"], times[name],
                                    target, rows=rows))
        result.add(throughput_ratio(f"CPU time, new-user shape, {name} / pyarrow", cpu["pyarrow"], cpu[name],
                                    None, rows=rows))
    result.series["new_user"] = {"rows": rows, "seconds": times, "cpu_seconds": cpu, "file_bytes": file_bytes}
    result.notes.append("New-user shape, median seconds (CPU seconds): " + ", ".join(
        f"{n} {statistics.median(ts):.3f} ({statistics.median(cpu[n]):.3f})" for n, ts in times.items()) + ".")
