"""Case 4: commit latency, excluding the data upload, for 1, 8 and 64 partitions per
transaction. Target (on PostgreSQL): p50 ≤ 5 ms and p99 ≤ 20 ms at 8 partitions.

Each sample begins a transaction, sends one small batch to each of its partitions and
flushes (uploads and registers the segments: not timed), then times ``commit_transaction()``
alone: the coordinator's prepare and complete (markers in every partition, the end state).
The partition counts take turns sample by sample, so drift of a shared machine hits all
three alike."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa

from txn_broker.log.batches import key_partitions

from . import data
from .harness import CaseResult, Target, latency_figure, percentiles
from .servers import Backend
from .sizes import Sizes
from .workload import drop_topic, new_topic, unique

TITLE = "Commit latency (upload excluded) for 1, 8 and 64 partitions"
PARTITION_COUNTS = (1, 8, 64)
P50_TARGET = Target("<=", 5.0)
P99_TARGET = Target("<=", 20.0)


RECORDS_PER_PARTITION = 10


def spread_batch(partitions: int) -> pa.Table:
    """Records whose keys hash to partitions 0..``partitions``-1, ten each, so one send
    adds all of them to the transaction at once."""
    keys: list[bytes] = []
    found: dict[int, bytes] = {}
    i = 0
    while len(found) < partitions:
        key = f"k{i}".encode()
        p = int(key_partitions(pa.array([key], pa.binary()), max(PARTITION_COUNTS))[0])
        if p < partitions:
            found.setdefault(p, key)
        i += 1
    for key in found.values():
        keys.extend([key] * RECORDS_PER_PARTITION)
    table = data.records(len(keys), 100)
    return table.set_column(0, "key", pa.array(keys, pa.binary()))


def run(backend: Backend, sizes: Sizes, progress: Callable[[str], None]) -> CaseResult:
    batches = {n: spread_batch(n) for n in PARTITION_COUNTS}
    result = CaseResult(4, TITLE, backend.name, sizes=(
        f"{sizes.commit_samples} commits per partition count; each transaction holds one segment of "
        f"{RECORDS_PER_PARTITION} × 100 B records in each of its partitions; topic of {max(PARTITION_COUNTS)} "
        "partitions"))
    broker = backend.connect()
    topic = new_topic(broker, "c4", data.RECORD_SCHEMA, partitions=max(PARTITION_COUNTS))
    producer = broker.producer(transactional_id=unique("bench-c4"))
    producer.init_transactions()
    samples: dict[int, list[float]] = {n: [] for n in PARTITION_COUNTS}
    empty: list[float] = []

    def empty_transaction() -> float:
        """The floor under any commit: one database transaction doing nothing, through the
        broker's own connection pool (check-out, ping, SELECT 1, COMMIT)."""
        import time

        start = time.perf_counter()
        broker._db.run(lambda tx: tx.raw("SELECT 1").scalar())
        return time.perf_counter() - start

    fsyncs: list[float] = []
    probe = backend.root / "fsync-probe"

    def disk_flush() -> float:
        """The other floor: one fsync of an 8 kB write on the file system that holds
        PostgreSQL's WAL (and the local segments); a durable commit waits for one."""
        import os
        import time

        with open(probe, "ab") as f:
            f.write(b"\0" * 8192)
            f.flush()
            start = time.perf_counter()
            os.fsync(f.fileno())
            return time.perf_counter() - start

    def sample(partitions: int) -> float:
        import time

        producer.begin_transaction()
        producer.send(topic, batches[partitions], key="key")
        producer.flush()
        start = time.perf_counter()
        producer.commit_transaction()
        return time.perf_counter() - start

    try:
        for n in PARTITION_COUNTS:  # warm-up
            sample(n)
        for i in range(sizes.commit_samples):
            order = PARTITION_COUNTS[i % 3:] + PARTITION_COUNTS[:i % 3]
            for n in order:
                samples[n].append(sample(n))
            empty.append(empty_transaction())
            fsyncs.append(disk_flush())
            if (i + 1) % max(sizes.commit_samples // 4, 1) == 0:
                progress(f"{i + 1}/{sizes.commit_samples}: " + ", ".join(
                    f"{n} partitions p50 {percentiles(s)['p50']:.2f} ms" for n, s in samples.items()))
    finally:
        producer.close()
        drop_topic(broker, topic)
        broker.close()
    for n in PARTITION_COUNTS:
        result.add(latency_figure(f"commit p50, {n} partition{'s' if n > 1 else ''}", samples[n], 50,
                                  P50_TARGET if n == 8 else None))
        result.add(latency_figure(f"commit p99, {n} partition{'s' if n > 1 else ''}", samples[n], 99,
                                  P99_TARGET if n == 8 else None))
    probe.unlink(missing_ok=True)
    result.add(latency_figure("empty database transaction p50 (reference)", empty, 50))
    result.add(latency_figure("disk fsync p50 (reference)", fsyncs, 50))
    result.series = {"latency_ms": {str(n): percentiles(s, (50, 90, 99)) for n, s in samples.items()},
                     "empty_transaction_ms": percentiles(empty), "fsync_ms": percentiles(fsyncs),
                     "samples_s": {str(n): s for n, s in samples.items()}}
    floor = percentiles(empty)["p50"]
    flush = percentiles(fsyncs)["p50"]
    result.notes.append(
        f"A commit (its data registered before) is one database transaction: the transactional id locked and "
        f"moved through PrepareCommit to CompleteCommit, the markers written, the transaction ended, in one durable "
        f"COMMIT{' (a WAL fsync)' if backend.pg else ''}. Measured alongside: "
        f"an empty database transaction {floor:.2f} ms, an fsync {flush:.2f} ms (p50s); the commit's p50 at 8 "
        f"partitions is {percentiles(samples[8])['p50']:.2f} ms.")
    return result
