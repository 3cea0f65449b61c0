"""The broker-wide figures the exporter serves, read from the metadata database in one
snapshot by a few set-based queries (``metrics_*`` in sql/queries.sql): their cost grows
with the number of partitions, group offsets and transactional ids, never with a query
per partition.

Everything here comes from the database, so every process that exports agrees, and a
restarted exporter carries on its counters where the broker is."""

from __future__ import annotations

import threading
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


#: how long after its start a transaction id is taken as settled: no transaction with a
#: smaller id can still be written (ids are taken just before their row is written)
SETTLE_MS = 300_000


class OutcomeTally:
    """The committed and aborted transactions counted so far, up to a settled transaction
    id: a scrape counts only the transactions after it, so its cost follows the recent
    transactions, not the whole history. The totals are exact counts of the database's
    rows, the same in every process; a new tally counts the history once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.after_txn_id = 0
        self.committed = 0
        self.aborted = 0

    def snapshot(self) -> tuple[int, int, int]:
        with self._lock:
            return self.after_txn_id, self.committed, self.aborted

    def advance(self, from_txn_id: int, to_txn_id: int, committed: int, aborted: int) -> None:
        """Add the counts of (from_txn_id, to_txn_id] (once: a concurrent scrape that
        advanced first wins)."""
        with self._lock:
            if self.after_txn_id == from_txn_id and to_txn_id > from_txn_id:
                self.after_txn_id = to_txn_id
                self.committed += committed
                self.aborted += aborted


def read_figures(db: Database, *, delete_delay_ms: int = DEFAULT_DELETE_DELAY_MS,
                 tally: OutcomeTally | None = None) -> BrokerFigures:
    """All the figures in one read-only snapshot. ``tally``: the transactions counted by
    earlier reads (None: count them all)."""
    tally = OutcomeTally() if tally is None else tally
    started = time.perf_counter()
    after, committed, aborted = tally.snapshot()
    postgres = db.dialect == "postgresql"
    figures, settled = db.read(lambda tx: _read(tx, postgres, delete_delay_ms, after, committed, aborted))
    tally.advance(after, *settled)
    return replace(figures, read_seconds=time.perf_counter() - started)


def _read(tx: Tx, postgres: bool, delete_delay_ms: int, after_txn_id: int, committed: int, aborted: int
          ) -> tuple[BrokerFigures, tuple[int, int, int]]:
    if postgres:
        # a handful of short queries: compiling them (JIT) would cost more than running them
        tx.raw("SET LOCAL jit = off")
    states = tx.all("metrics_transactional_id_states")
    now_ms = int(states[0].now_ms) if states else int(tx.scalar("now_ms"))
    partitions = [PartitionFigures(r.topic, r.partition_no, r.log_start_offset, r.high_watermark,
                                   max(r.last_stable_offset, r.log_start_offset), r.segment_count, r.size_bytes)
                  for r in tx.all("metrics_partitions")]
    stable = {(p.topic, p.partition): p.last_stable_offset for p in partitions}
    groups = []
    for r in tx.all("metrics_group_offsets"):
        lso = stable[(r.topic, r.partition_no)]
        lag = max(lso - r.committed_offset, 0)
        unconsumed = lag > 0 and r.unconsumed_timestamp_ms is not None
        age_ms = max(now_ms - r.unconsumed_timestamp_ms, 0) if unconsumed else 0
        groups.append(GroupPartitionFigures(r.group_id, r.topic, r.partition_no, r.committed_offset, lso, lag,
                                            age_ms / 1000))
    ids = {s.value: 0 for s in TxnState if s is not TxnState.DEAD}
    hanging = 0
    oldest_start: int | None = None
    for r in states:
        ids[r.state] = int(r.ids)
        hanging += int(r.hanging or 0)
        if r.oldest_open_start_ms is not None:
            oldest_start = r.oldest_open_start_ms if oldest_start is None else min(oldest_start, r.oldest_open_start_ms)
    settled_id = tx.scalar("metrics_settled_transaction_id", after_txn_id=after_txn_id, settle_ms=SETTLE_MS)
    settled_id = after_txn_id if settled_id is None else int(settled_id)
    outcomes = tx.one("metrics_transaction_outcomes", after_txn_id=after_txn_id, settled_txn_id=settled_id)
    gc = tx.one("metrics_gc_backlog", delay_ms=delete_delay_ms)
    assert outcomes is not None and gc is not None  # aggregates always answer one row
    settled = (settled_id, int(outcomes.settled_committed), int(outcomes.settled_aborted))
    figures = BrokerFigures(
        now_ms=now_ms, partitions=partitions, groups=groups, transactional_ids=ids,
        hanging_transactions=hanging,
        oldest_open_transaction_seconds=0.0 if oldest_start is None else max(now_ms - oldest_start, 0) / 1000,
        committed_transactions=committed + settled[1] + int(outcomes.recent_committed),
        aborted_transactions=aborted + settled[2] + int(outcomes.recent_aborted),
        gc=GcBacklog(int(gc.aborted_segments), int(gc.aborted_bytes), int(gc.due_objects), int(gc.waiting_objects),
                     0.0 if gc.oldest_requested_ms is None else max(gc.now_ms - gc.oldest_requested_ms, 0) / 1000),
    )
    return figures, settled
