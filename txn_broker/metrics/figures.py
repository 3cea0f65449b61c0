"""The broker-wide figures the exporter serves, read from the metadata database in one
snapshot by a few set-based queries (``metrics_*`` in sql/queries.sql): their cost grows
with the number of partitions, group offsets and transactional ids, never with a query
per partition.

Everything here comes from the database, so every process that exports agrees, and a
restarted exporter carries on its counters where the broker is."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from ..database import Database, Tx
from ..gc import DEFAULT_DELETE_DELAY_MS
from ..states import TxnState


@dataclass(frozen=True)
class PartitionFigures:
    topic: str
    partition: int
    log_start_offset: int
    high_watermark: int
    last_stable_offset: int
    segment_count: int
    size_bytes: int


@dataclass(frozen=True)
class GroupPartitionFigures:
    group: str
    topic: str
    partition: int
    committed_offset: int
    last_stable_offset: int
    #: records a read_committed reader of the group has still to read (as ``groups describe``)
    lag: int
    #: age of the oldest committed record the group has not consumed: now minus the newest
    #: timestamp of the first segment holding one (0 when there is none)
    lag_seconds: float


@dataclass(frozen=True)
class GcBacklog:
    #: segments of aborted transactions that gc has not purged yet, and their bytes
    aborted_segments: int
    aborted_bytes: int
    #: queued object deletions past the delete delay (gc deletes them on its next run)
    due_objects: int
    #: queued object deletions still within the delete delay
    waiting_objects: int
    #: how long the oldest queued deletion has waited (0 when the queue is empty)
    oldest_queued_seconds: float


@dataclass(frozen=True)
class BrokerFigures:
    now_ms: int
    partitions: list[PartitionFigures]
    groups: list[GroupPartitionFigures]
    #: transactional ids per coordinator state (every state but Dead, zeros included)
    transactional_ids: dict[str, int]
    hanging_transactions: int
    oldest_open_transaction_seconds: float
    committed_transactions: int
    aborted_transactions: int
    gc: GcBacklog
    #: seconds the snapshot took to read
    read_seconds: float = 0.0


def read_figures(db: Database, *, delete_delay_ms: int = DEFAULT_DELETE_DELAY_MS) -> BrokerFigures:
    """All the figures in one read-only snapshot."""
    started = time.perf_counter()
    figures = db.read(lambda tx: _read(tx, delete_delay_ms))
    return replace(figures, read_seconds=time.perf_counter() - started)


def _read(tx: Tx, delete_delay_ms: int) -> BrokerFigures:
    states = tx.all("metrics_transactional_id_states")
    now_ms = int(states[0].now_ms) if states else int(tx.scalar("now_ms"))
    partitions = [PartitionFigures(r.topic, r.partition_no, r.log_start_offset, r.high_watermark,
                                   r.last_stable_offset, r.segment_count, r.size_bytes)
                  for r in tx.all("metrics_partitions")]
    groups = []
    for r in tx.all("metrics_group_offsets"):
        lag = max(r.last_stable_offset - r.committed_offset, 0)
        age_ms = 0 if lag == 0 or r.unconsumed_timestamp_ms is None else max(now_ms - r.unconsumed_timestamp_ms, 0)
        groups.append(GroupPartitionFigures(r.group_id, r.topic, r.partition_no, r.committed_offset,
                                            r.last_stable_offset, lag, age_ms / 1000))
    ids = {s.value: 0 for s in TxnState if s is not TxnState.DEAD}
    hanging = 0
    oldest_start: int | None = None
    for r in states:
        ids[r.state] = int(r.ids)
        hanging += int(r.hanging or 0)
        if r.oldest_open_start_ms is not None:
            oldest_start = r.oldest_open_start_ms if oldest_start is None else min(oldest_start, r.oldest_open_start_ms)
    outcomes = tx.one("metrics_transaction_outcomes")
    gc = tx.one("metrics_gc_backlog", delay_ms=delete_delay_ms)
    assert outcomes is not None and gc is not None  # aggregates always answer one row
    return BrokerFigures(
        now_ms=now_ms, partitions=partitions, groups=groups, transactional_ids=ids,
        hanging_transactions=hanging,
        oldest_open_transaction_seconds=0.0 if oldest_start is None else max(now_ms - oldest_start, 0) / 1000,
        committed_transactions=int(outcomes.committed), aborted_transactions=int(outcomes.aborted),
        gc=GcBacklog(int(gc.aborted_segments), int(gc.aborted_bytes), int(gc.due_objects), int(gc.waiting_objects),
                     0.0 if gc.oldest_requested_ms is None else max(gc.now_ms - gc.oldest_requested_ms, 0) / 1000),
    )
