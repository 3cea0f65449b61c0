"""Case 10: small transactions, compacted. ``compact_txns`` transactions of 10 records
(100 B each) into 4 partitions, one in ten aborted, leave one segment object per
transaction; ``compact`` merges them. Read whole at ``read_committed``
(``poll(max_records=10,000)``, a new consumer each repetition: cold segment cache) before
and after ``compact``, against the same committed records written as one transaction per
partition. Target: after / one transaction per partition ≥ 0.8 (throughput ratio). The
object counts before and after are reported next to it, and the time ``compact`` took."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from txn_broker import READ_COMMITTED, TopicPartition

from . import data
from .harness import CaseResult, Target, interleaved, throughput_ratio, timed
from .servers import Backend
from .sizes import Sizes
from .workload import drop_topic, new_topic, unique

TITLE = "small transactions: read_committed after compact vs one transaction per partition"
PARTITIONS = 4
RECORDS_PER_TXN = 10
RECORD_BYTES = 100
ABORT_EVERY = 10
TARGET = Target(">=", 0.8)


def _write_small(broker: Any, topic: str, table: pa.Table, txns: int) -> int:
    """``txns`` transactions of ``RECORDS_PER_TXN`` records, partition by partition in turn,
    every ``ABORT_EVERY``-th aborted; the records committed."""
    producer = broker.producer(transactional_id=unique("bench-c10"))
    producer.init_transactions()
    committed = 0
    for t in range(txns):
        producer.begin_transaction()
        producer.send(topic, table.slice(t * RECORDS_PER_TXN, RECORDS_PER_TXN), partition=t % PARTITIONS)
        if t % ABORT_EVERY == ABORT_EVERY - 1:
            producer.flush()  # stored, then aborted: the segment stays, as a producer's would
            producer.abort_transaction()
        else:
            producer.commit_transaction()
            committed += RECORDS_PER_TXN
    producer.close()
    return committed


def _write_large(broker: Any, topic: str, table: pa.Table, txns: int) -> None:
    """The same committed records, one transaction per partition."""
    producer = broker.producer(transactional_id=unique("bench-c10-large"))
    producer.init_transactions()
    for p in range(PARTITIONS):
        kept = [table.slice(t * RECORDS_PER_TXN, RECORDS_PER_TXN) for t in range(p, txns, PARTITIONS)
                if t % ABORT_EVERY != ABORT_EVERY - 1]
        with producer.transaction():
            producer.send(topic, pa.concat_tables(kept).combine_chunks(), partition=p)
    producer.close()


def _consume(broker: Any, topic: str, expected: int) -> int:
    consumer = broker.consumer(isolation_level=READ_COMMITTED)
    consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
    got = 0
    while got < expected:
        batch = consumer.poll(max_records=10_000)
        if batch.num_rows == 0:
            raise RuntimeError(f"the consumer stopped at {got} of {expected} records")
        got += batch.num_rows
    consumer.close()
    return got


def _segments(broker: Any, topic: str) -> int:
    return sum(p.segment_count for p in broker.describe_topic(topic).partitions)


def run(backend: Backend, sizes: Sizes, progress: Callable[[str], None]) -> CaseResult:
    broker = backend.connect()
    txns = sizes.compact_txns
    table = data.records(txns * RECORDS_PER_TXN, RECORD_BYTES)
    small = new_topic(broker, "c10-small", data.RECORD_SCHEMA, partitions=PARTITIONS)
    large = new_topic(broker, "c10-large", data.RECORD_SCHEMA, partitions=PARTITIONS)
    try:
        progress(f"writing {txns:,} transactions of {RECORDS_PER_TXN} records")
        expected = _write_small(broker, small, table, txns)
        _write_large(broker, large, table, txns)
        objects_before = _segments(broker, small)
        variants = {
            "one transaction per partition": lambda: timed(lambda: _consume(broker, large, expected)),
            "small transactions": lambda: timed(lambda: _consume(broker, small, expected)),
        }
        before = interleaved(variants, sizes.reps, progress=progress)
        progress("compacting")
        started = time.perf_counter()
        report = broker.compact([small], min_age_ms=0)
        compact_s = time.perf_counter() - started
        objects_after = _segments(broker, small)
        variants["small transactions, compacted"] = variants.pop("small transactions")
        after = interleaved(variants, sizes.reps, progress=progress)
    finally:
        drop_topic(broker, small)
        drop_topic(broker, large)
        broker.close()
    baseline = "one transaction per partition"
    result = CaseResult(10, TITLE, backend.name, sizes=(
        f"{txns:,} transactions × {RECORDS_PER_TXN} records × {RECORD_BYTES} B into {PARTITIONS} partitions, one in "
        f"{ABORT_EVERY} aborted ({expected:,} records committed), read whole with poll(max_records=10,000); "
        f"{sizes.reps} interleaved repetitions before and after compact"))
    result.add(throughput_ratio("read_committed after compact / one transaction per partition", after[baseline],
                                after["small transactions, compacted"], TARGET, objects_before=objects_before,
                                objects_after=objects_after))
    result.add(throughput_ratio("read_committed before compact / one transaction per partition", before[baseline],
                                before["small transactions"], None))
    result.series = {"seconds_before": before, "seconds_after": after, "objects_before": objects_before,
                     "objects_after": objects_after, "compact_s": compact_s}
    result.notes.append(
        f"Segment objects: {objects_before:,} before compact, {objects_after:,} after "
        f"({report.segments_replaced:,} merged into {report.segments_written:,}, "
        f"{report.aborted_records_dropped:,} aborted records dropped) in {compact_s:.1f} s.")
    return result
