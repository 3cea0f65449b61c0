"""A partition's log as readers see it: its ends (log start, high watermark, last stable
offset), offsets checked against them, and which segments cover an offset range and
whether each is visible at an isolation level. Rows are read out of the segments by
:mod:`txn_broker.log.reader`.

Shared by the consumer, the Spark data source and the Kafka listener. Visibility is
decided per segment, from the segment's transaction marker (a segment never mixes
transactions), using the indexed ``txn_partitions`` rows: no per-record scan.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..database import Database, Tx
from ..errors import InvalidInputError, OffsetOutOfRangeError, UnknownTopicOrPartitionError

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
    #: records stored, for a compacted segment (its object has an ``_offset`` column, and
    #: ``record_count`` is the offset span, gaps included); None: ``record_count`` records
    #: at consecutive offsets
    row_count: int | None = None
    #: the topic schema version it was encoded in (readers project it to theirs)
    schema_version: int = 1

    @property
    def end_offset(self) -> int:
        return self.base_offset + self.record_count

    @property
    def rows(self) -> int:
        """Records its object holds."""
        return self.record_count if self.row_count is None else self.row_count

    @property
    def has_gaps(self) -> bool:
        """Whether its object stores an ``_offset`` column (a compacted segment)."""
        return self.row_count is not None

    @property
    def aborted(self) -> bool:
        return self.marker == "ABORT"

    def skipped_at(self, isolation_level: str) -> bool:
        """Whether a reader at ``isolation_level`` skips this segment without loading it:
        purged segments at every level, aborted ones at read_committed."""
        return self.purged or (self.aborted and isolation_level == READ_COMMITTED)


def partition_offsets(tx: Tx, topic_id: int, partition: int) -> PartitionOffsets | None:
    """The partition's ends in one snapshot. The last stable offset is never below the log
    start: records deleted out of an open transaction (DeleteRecords) do not hold readers
    back, as Kafka's log never reports a first unstable offset below its log start."""
    row = tx.one("partition_offsets", topic_id=topic_id, partition_no=partition)
    if row is None:
        return None
    return PartitionOffsets(row.log_start_offset, row.high_watermark,
                            max(int(row.last_stable_offset), int(row.log_start_offset)))


def first_segment_at_time(tx: Tx, topic_id: int, partition: int, timestamp_ms: int) -> tuple[int, int] | None:
    """(base offset, record count) of the first segment of the partition with a record
    whose timestamp is at least ``timestamp_ms``; None when there is none."""
    row = tx.one("first_segment_at_time", topic_id=topic_id, partition_no=partition, timestamp_ms=timestamp_ms)
    return None if row is None else (int(row.base_offset), int(row.record_count))


def partitions_page(tx: Tx, after: tuple[int, int], limit: int) -> list[Any]:
    """One page of partitions (with topic name and config) after ``(topic_id, partition)``."""
    return tx.all("partitions_page", after_topic_id=after[0], after_partition_no=after[1], limit=limit)


def plan_segments(tx: Tx, topic_id: int, partition: int, start: int, end: int,
                  max_segments: int = 64) -> list[PlannedSegment]:
    """The segments overlapping ``[start, end)``, in offset order."""
    if start >= end:
        return []
    rows = tx.all("fetch_plan", topic_id=topic_id, partition_no=partition, start_offset=start,
                  end_offset=end, max_segments=max_segments)
    return [PlannedSegment(r.base_offset, r.record_count, r.size_bytes, r.object_key, r.txn_id,
                           r.marker, r.purged_ms is not None, r.row_count, r.schema_version)
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


def check_offset(db: Database, topic_id: int, name: str, partition: int, offset: object, *,
                 allow_below_start: bool = True) -> int:
    """``offset`` if it lies in [log start (or 0), high watermark]; InvalidInputError if it is
    not an int, OffsetOutOfRangeError if it lies outside."""
    if not isinstance(offset, int) or isinstance(offset, bool):
        raise InvalidInputError(f"offset must be a non-negative int, got {offset!r}")
    if offset < 0:
        raise OffsetOutOfRangeError(f"offset must be a non-negative int, got {offset!r}")
    offsets = db.read(lambda tx: partition_offsets(tx, topic_id, partition))
    if offsets is None:
        raise UnknownTopicOrPartitionError(f"{name}-{partition} no longer exists")
    low = 0 if allow_below_start else offsets.log_start_offset
    if not low <= offset <= offsets.high_watermark:
        raise OffsetOutOfRangeError(
            f"offset {offset} is outside {name}-{partition}'s log [{low}, {offsets.high_watermark}]"
        )
    return offset
