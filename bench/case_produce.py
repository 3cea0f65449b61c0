"""Case 1: Kafka's transaction-overhead curve. Transactional produce against the idempotent
producer sending the same records without transactions and flushing once at the end (the
way a user produces without transactions), for transactions of about 10 ms, 100 ms and
1 s of data work. Targets: throughput ratio ≥ 0.97 at 100 ms and ≥ 0.99 at 1 s (Kafka
publishes about 3 % of overhead at 1 KB records and 100 ms transactions); 10 ms is
reported.

A transaction's size comes from the idempotent producer's throughput measured first in
the same run: ``duration × throughput`` bytes of incompressible 1 KB records. Each
repetition writes at least ``produce_mb`` and at least three transactions, into a fresh
topic of one partition; the two variants take turns."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa

from . import data
from .harness import CaseResult, Target, interleaved, mb, throughput_ratio, timed
from .servers import Backend
from .sizes import Sizes
from .workload import drop_topic, new_topic, unique

TITLE = "Transaction overhead: transactional vs idempotent produce (one flush), by transaction duration"
DURATIONS_S = (0.01, 0.1, 1.0)
TARGETS = {0.1: Target(">=", 0.97), 1.0: Target(">=", 0.99)}
POOL_RECORDS = 16_384  # 16 MB of distinct records, sliced into transactions


def _label(duration: float) -> str:
    return f"{duration * 1000:.0f} ms" if duration < 1 else f"{duration:.0f} s"


def _transactions(pool: pa.Table, records_per_txn: int, count: int) -> list[pa.Table]:
    """``count`` tables of ``records_per_txn`` records cut from the pool in turn."""
    out = []
    position = 0
    for _ in range(count):
        parts, need = [], records_per_txn
        while need:
            take = min(need, pool.num_rows - position)
            parts.append(pool.slice(position, take))
            position = (position + take) % pool.num_rows
            need -= take
        out.append(pa.concat_tables(parts).combine_chunks())
    return out


def run(backend: Backend, sizes: Sizes, progress: Callable[[str], None]) -> CaseResult:
    pool = pa.concat_tables([data.records(min(POOL_RECORDS, 1024), sizes.record_bytes, seed=i)
                             for i in range(max(POOL_RECORDS // 1024, 1))]).combine_chunks()
    broker = backend.connect()
    txn = broker.producer(transactional_id=unique("bench-c1"))
    txn.init_transactions()
    idem = broker.producer()

    def idempotent(chunks: list[pa.Table]) -> Callable[[], float]:
        def once() -> float:
            topic = new_topic(broker, "c1", data.RECORD_SCHEMA)
            try:
                def produce() -> None:
                    for chunk in chunks:
                        idem.send(topic, chunk)
                    idem.flush()  # once, at the end
                return timed(produce)
            finally:
                drop_topic(broker, topic)
        return once

    def transactional(chunks: list[pa.Table]) -> Callable[[], float]:
        def once() -> float:
            topic = new_topic(broker, "c1", data.RECORD_SCHEMA)
            try:
                def produce() -> None:
                    for chunk in chunks:
                        with txn.transaction():
                            txn.send(topic, chunk)
                return timed(produce)
            finally:
                drop_topic(broker, topic)
        return once

    curve = []
    try:
        # the idempotent producer's throughput on this storage sizes the transactions
        calibration = _transactions(pool, pool.num_rows, max(sizes.produce_mb * 1_000_000 // pool.nbytes, 1))
        idempotent(calibration)()  # warm-up
        seconds = min(idempotent(calibration)() for _ in range(2))
        throughput = sum(c.nbytes for c in calibration) / seconds
        progress(f"idempotent produce, one flush: {throughput / 1e6:,.0f} MB/s")
        for duration in DURATIONS_S:
            per_txn = max(int(min(throughput * duration, sizes.max_txn_mb * 1_000_000)) // sizes.record_bytes, 1)
            count = max(3, -(-sizes.produce_mb * 1_000_000 // (per_txn * sizes.record_bytes)))
            chunks = _transactions(pool, per_txn, count)
            progress(f"{_label(duration)} transactions: {count} of {per_txn:,} records ({mb(chunks[0].nbytes)})")
            times = interleaved({"idempotent": idempotent(chunks), "transactional": transactional(chunks)},
                                sizes.reps, progress=progress)
            curve.append((duration, chunks, times))
            del chunks
    finally:
        txn.close()
        idem.close()
        broker.close()

    result = CaseResult(1, TITLE, backend.name, sizes=(
        f"incompressible {sizes.record_bytes} B records, 1 partition; transactions sized by the idempotent "
        f"producer's throughput ({throughput / 1e6:,.0f} MB/s here) × {', '.join(map(_label, DURATIONS_S))}; "
        f"each repetition ≥ {sizes.produce_mb} MB and ≥ 3 transactions; {sizes.reps} interleaved repetitions"))
    series = []
    for duration, chunks, times in curve:
        total = sum(c.nbytes for c in chunks)
        figure = result.add(throughput_ratio(
            f"throughput, transactional / idempotent (one flush), {_label(duration)} transactions",
            times["idempotent"], times["transactional"], TARGETS.get(duration), bytes=total,
            transaction_bytes=chunks[0].nbytes, transactions=len(chunks)))
        per_txn_ms = (figure.detail["candidate_s"]["median"] - figure.detail["baseline_s"]["median"]) \
            / len(chunks) * 1e3
        series.append({"duration_ms": duration * 1000, "ratio": figure.value, "spread": figure.spread,
                       "transaction_bytes": chunks[0].nbytes, "per_transaction_ms": per_txn_ms})
    result.series = {"curve": series, "idempotent_mb_s": throughput / 1e6}
    result.notes.append("Median cost of a transaction on top of writing its data: " + ", ".join(
        f"{s['per_transaction_ms']:.1f} ms at {_label(s['duration_ms'] / 1000)}" for s in series) + ".")
    return result
