"""Reading a partition: the ends of its log, which segments cover an offset range and
whether each is visible at an isolation level, and reading rows out of segment objects.

Shared by the consumer and the Spark data source. Visibility is decided per segment, from
the segment's transaction marker (a segment never mixes transactions), using the indexed
``txn_partitions`` rows: no per-record scan.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from .database import Database, Tx
from .errors import CorruptSegmentError
from .records import decode_segment
from .storage import ObjectNotFoundError, ObjectStore

READ_COMMITTED = "read_committed"
READ_UNCOMMITTED = "read_uncommitted"
ISOLATION_LEVELS = (READ_COMMITTED, READ_UNCOMMITTED)


@dataclass(frozen=True)
class PartitionOffsets:
    log_start_offset: int
    high_watermark: int
    last_stable_offset: int

    def end(self, isolation_level: str) -> int:
        """The first offset a reader at this isolation level may not read."""
        return self.last_stable_offset if isolation_level == READ_COMMITTED else self.high_watermark


@dataclass(frozen=True)
class PlannedSegment:
    base_offset: int
    record_count: int
    size_bytes: int
    object_key: str
    txn_id: int | None
    marker: str | None
    #: gc deleted this aborted segment's object; its offsets stay occupied
    purged: bool = False

    @property
    def end_offset(self) -> int:
        return self.base_offset + self.record_count

    @property
    def aborted(self) -> bool:
        return self.marker == "ABORT"

    def skipped_at(self, isolation_level: str) -> bool:
        """Whether a reader at ``isolation_level`` skips this segment without loading it:
        purged segments at every level, aborted ones at read_committed."""
        return self.purged or (self.aborted and isolation_level == READ_COMMITTED)


def partition_offsets(tx: Tx, topic_id: int, partition: int) -> PartitionOffsets | None:
    row = tx.one("partition_offsets", topic_id=topic_id, partition_no=partition)
    if row is None:
        return None
    return PartitionOffsets(row.log_start_offset, row.high_watermark, row.last_stable_offset)


def plan_segments(tx: Tx, topic_id: int, partition: int, start: int, end: int,
                  max_segments: int = 64) -> list[PlannedSegment]:
    """The segments overlapping ``[start, end)``, in offset order."""
    if start >= end:
        return []
    rows = tx.all("fetch_plan", topic_id=topic_id, partition_no=partition, start_offset=start,
                  end_offset=end, max_segments=max_segments)
    return [PlannedSegment(r.base_offset, r.record_count, r.size_bytes, r.object_key, r.txn_id,
                           r.marker, r.purged_ms is not None)
            for r in rows if r.base_offset + r.record_count > start]


def plan_fetch(db: Database, topic_id: int, partition: int, start: int | None,
               isolation_level: str, max_segments: int = 64,
               ) -> tuple[PartitionOffsets | None, list[PlannedSegment]]:
    """The partition's offsets and the segments from ``start`` up to the isolation level's
    end, read in one snapshot. ``start`` None: just the offsets."""

    def work(tx: Tx) -> tuple[PartitionOffsets | None, list[PlannedSegment]]:
        offsets = partition_offsets(tx, topic_id, partition)
        if offsets is None or start is None:
            return offsets, []
        begin = max(start, offsets.log_start_offset)
        return offsets, plan_segments(tx, topic_id, partition, begin, offsets.end(isolation_level),
                                      max_segments)

    return db.read(work)


class SegmentCache:
    """Decoded segments, least recently used first out, bounded in bytes."""

    def __init__(self, store: ObjectStore, max_bytes: int = 256 * 1024 * 1024) -> None:
        self.store = store
        self.max_bytes = max_bytes
        self._tables: OrderedDict[str, pa.Table] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, segment: PlannedSegment) -> pa.Table:
        with self._lock:
            table = self._tables.get(segment.object_key)
            if table is not None:
                self._tables.move_to_end(segment.object_key)
                return table
        table = load_segment(self.store, segment)
        with self._lock:
            self._tables[segment.object_key] = table
            self._bytes += table.nbytes
            while self._bytes > self.max_bytes and len(self._tables) > 1:
                _, old = self._tables.popitem(last=False)
                self._bytes -= old.nbytes
        return table


def load_segment(store: ObjectStore, segment: PlannedSegment) -> pa.Table:
    if segment.purged:
        raise CorruptSegmentError(
            f"segment {segment.object_key} (offsets {segment.base_offset}..{segment.end_offset - 1}) "
            "belongs to an aborted transaction purged by gc; readers must skip it"
        )
    try:
        data = store.get_buffer(segment.object_key)  # zero-copy where the store allows (a memory map)
    except ObjectNotFoundError:
        raise CorruptSegmentError(
            f"segment object {segment.object_key} (offsets {segment.base_offset}.."
            f"{segment.end_offset - 1}) is missing from storage; run `txn-broker fsck`"
        ) from None
    table = decode_segment(data)
    if table.num_rows != segment.record_count:
        raise CorruptSegmentError(
            f"segment object {segment.object_key} holds {table.num_rows} records, "
            f"its metadata says {segment.record_count}; run `txn-broker fsck`"
        )
    return table


def with_metadata(rows: pa.Table, topic: str, partition: int, first_offset: int) -> pa.Table:
    """Rows of a segment (``_timestamp`` first) with ``_topic``, ``_partition``, ``_offset``."""
    n = rows.num_rows
    rows = rows.add_column(0, pa.field("_offset", pa.int64()),
                           pa.array(np.arange(first_offset, first_offset + n, dtype=np.int64)))
    rows = rows.add_column(0, pa.field("_partition", pa.int32()),
                           pa.array(np.full(n, partition, dtype=np.int32)))
    return rows.add_column(0, pa.field("_topic", pa.string()), _repeated(topic, n))


def _repeated(text: str, n: int) -> pa.Array:
    """A string array of ``n`` times ``text``, built from its buffers (no per-row work)."""
    raw = text.encode("utf-8")
    if (n + 1) * len(raw) >= 2**31:  # beyond 32-bit offsets: let Arrow build it
        return pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, dtype=np.int32)), pa.array([text])).cast(
            pa.string())
    offsets = np.arange(0, (n + 1) * len(raw), len(raw), dtype=np.int32) if raw else np.zeros(n + 1, np.int32)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(raw * n))


def read_rows(table: pa.Table, segment: PlannedSegment, start: int, end: int) -> pa.Table:
    """Rows of ``[start, end)`` that lie in the segment."""
    lo = max(start, segment.base_offset) - segment.base_offset
    hi = min(end, segment.end_offset) - segment.base_offset
    return table.slice(lo, max(hi - lo, 0))


def describe_plan(segments: list[PlannedSegment]) -> list[dict[str, Any]]:
    return [s.__dict__ for s in segments]
