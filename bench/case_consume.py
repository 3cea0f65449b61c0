"""Case 5: ``read_committed`` consume against reading the same segment objects straight
with pyarrow, and against ``read_uncommitted``. Targets: throughput ratio ≥ 0.90 (against
pyarrow) and ≥ 0.95 (against read_uncommitted).

The topic is written once (4 partitions, transactions of ~8 MB, all committed, so both
isolation levels return the same records) and then read whole in every repetition by a
new consumer (cold segment cache), polling ``poll_records`` at a time. The pyarrow
baseline opens each segment object through pyarrow's file system on the same storage
and reads it whole; the list of objects comes from the broker's metadata beforehand
(not timed)."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from txn_broker import READ_COMMITTED, READ_UNCOMMITTED, TopicPartition

from . import data
from .harness import CaseResult, Target, interleaved, mb, throughput_ratio, timed
from .servers import Backend
from .sizes import Sizes
from .workload import drop_topic, new_topic, unique

TITLE = "read_committed consume vs pyarrow and read_uncommitted"
PARTITIONS = 4
PYARROW_TARGET = Target(">=", 0.90)
UNCOMMITTED_TARGET = Target(">=", 0.95)


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


def _consume(broker: Any, topic: str, isolation: str, expected: int, poll_records: int) -> int:
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
    return result
