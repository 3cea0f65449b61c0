"""Case 1: transactional produce (one transaction per ~8 MB) against idempotent produce
without transactions, on the same data and storage. Target: throughput ratio ≥ 0.95
(Kafka loses about 3 % at 1 KB records and 100 ms transactions)."""

from __future__ import annotations

from collections.abc import Callable

from . import data
from .harness import CaseResult, Target, interleaved, mb, throughput_ratio, timed
from .servers import Backend
from .sizes import Sizes
from .workload import drop_topic, new_topic, produce_idempotent, produce_transactional, unique

TITLE = "Transactional produce vs idempotent produce"
TARGET = Target(">=", 0.95)


def run(backend: Backend, sizes: Sizes, progress: Callable[[str], None]) -> CaseResult:
    chunks = data.record_chunks(sizes.produce_mb * 1_000_000, sizes.txn_mb * 1_000_000, sizes.record_bytes)
    total = sum(c.nbytes for c in chunks)
    result = CaseResult(1, TITLE, backend.name, sizes=(
        f"{mb(total)} per repetition: {len(chunks)} transactions of {chunks[0].num_rows:,} records × "
        f"{sizes.record_bytes} B ({mb(chunks[0].nbytes)}), 1 partition; {sizes.reps} interleaved repetitions"))
    broker = backend.connect()
    try:
        txn = broker.producer(transactional_id=unique("bench-c1"))
        txn.init_transactions()
        idem = broker.producer()

        def variant(producer: object, produce: Callable[..., None]) -> Callable[[], float]:
            def once() -> float:
                topic = new_topic(broker, "c1", data.RECORD_SCHEMA)
                try:
                    return timed(lambda: produce(producer, topic, chunks))
                finally:
                    drop_topic(broker, topic)
            return once

        times = interleaved({"idempotent": variant(idem, produce_idempotent),
                             "transactional": variant(txn, produce_transactional)}, sizes.reps, progress=progress)
        txn.close()
        idem.close()
    finally:
        broker.close()
    figure = result.add(throughput_ratio("throughput, transactional / idempotent", times["idempotent"],
                                         times["transactional"], TARGET, bytes=total))
    result.series = {"seconds": times, "bytes": total}
    per_txn_ms = (figure.detail["candidate_s"]["median"] - figure.detail["baseline_s"]["median"]) / len(chunks) * 1e3
    result.notes.append(f"Median cost of a transaction on top of writing its data: {per_txn_ms:.1f} ms "
                        f"per {mb(chunks[0].nbytes)} transaction.")
    return result
