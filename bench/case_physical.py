"""Case 2: produce against writing the same Arrow data straight to the same storage with
pyarrow (the physical limit). Target: throughput ratio ≥ 0.85.

The baseline writes each transaction's chunk as one Arrow IPC file through pyarrow's own
file system (``LocalFileSystem`` or ``S3FileSystem`` on the same endpoint and bucket). On
a local directory it also fsyncs each file, as the broker does, so both sides give the
same durability; the ratio against pyarrow without fsync is shown beside it."""

from __future__ import annotations

import statistics
from collections.abc import Callable

from . import data
from .harness import CaseResult, Target, interleaved, mb, throughput_ratio, timed
from .servers import Backend
from .sizes import Sizes
from .workload import ArrowWriter, drop_topic, new_topic, produce_transactional, unique

TITLE = "Produce vs pyarrow writing the same data to the same storage (physical limit)"
TARGET = Target(">=", 0.85)


def run(backend: Backend, sizes: Sizes, progress: Callable[[str], None]) -> CaseResult:
    chunks = data.record_chunks(sizes.produce_mb * 1_000_000, sizes.txn_mb * 1_000_000, sizes.record_bytes)
    total = sum(c.nbytes for c in chunks)
    result = CaseResult(2, TITLE, backend.name, sizes=(
        f"{mb(total)} per repetition: {len(chunks)} chunks of {chunks[0].num_rows:,} records × "
        f"{sizes.record_bytes} B, one transaction (broker) or one Arrow IPC file (pyarrow) each; "
        f"{sizes.reps} interleaved repetitions"))
    broker = backend.connect()
    try:
        producer = broker.producer(transactional_id=unique("bench-c2"))
        producer.init_transactions()

        def produce() -> float:
            topic = new_topic(broker, "c2", data.RECORD_SCHEMA)
            try:
                return timed(lambda: produce_transactional(producer, topic, chunks))
            finally:
                drop_topic(broker, topic)

        def pyarrow_write(durable: bool) -> Callable[[], float]:
            def once() -> float:
                writer = ArrowWriter(backend, durable=durable)
                try:
                    return timed(lambda: writer.write_all(chunks))
                finally:
                    writer.clear()
            return once

        variants = {"pyarrow": pyarrow_write(True), "transactional produce": produce}
        if not backend.is_s3:
            variants["pyarrow without fsync"] = pyarrow_write(False)
        times = interleaved(variants, sizes.reps, progress=progress)
        producer.close()
    finally:
        broker.close()
    baseline = "pyarrow + fsync" if not backend.is_s3 else "pyarrow S3FileSystem"
    result.add(throughput_ratio(f"throughput, transactional produce / {baseline}", times["pyarrow"],
                                times["transactional produce"], TARGET, bytes=total))
    if "pyarrow without fsync" in times:
        result.add(throughput_ratio("throughput, transactional produce / pyarrow without fsync (not durable)",
                                    times["pyarrow without fsync"], times["transactional produce"], bytes=total))
    result.series = {"seconds": times, "bytes": total}
    mbps = {name: total / 1e6 / statistics.median(ts) for name, ts in times.items()}
    result.notes.append("Median throughput: " + ", ".join(f"{n} {v:,.0f} MB/s" for n, v in mbps.items()) + ".")
    return result
