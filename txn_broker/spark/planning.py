"""Planning a read on the driver side: which segment objects hold the visible records of
each offset range, grouped into Spark input partitions (splits).

Visibility is decided here, per segment, from its transaction's marker exactly as the
consumer does (``txn_broker.log.partition``): read_committed skips the segments of aborted
transactions, every level skips segments gc purged; the end of every range is at most the last stable offset, so no open
transaction's segment is planned. Executors then only fetch the listed objects and slice
them: they never query the metadata database.

A split is a run of consecutive segments of one partition of at most
``maxBytesPerPartition`` bytes and ``maxRecordsPerPartition`` records, so a large partition
is read by several tasks in parallel; with ``minPartitions`` the largest splits are cut
further (by offset, inside a segment if need be) until there are that many.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pyspark.sql.datasource import InputPartition

from ..database import Tx
from ..errors import IllegalStateError
from ..log.batches import schema_to_text
from ..log.partition import READ_COMMITTED, PlannedSegment, plan_segments
from .offsets import OffsetRange, OffsetRanges

if TYPE_CHECKING:
    from ..broker import Broker

PAGE = 1000


@dataclass(frozen=True)
class SegmentRef:
    """A visible segment and the part of it ``[start, end)`` a split reads."""

    object_key: str
    base_offset: int
    record_count: int
    size_bytes: int
    start: int
    end: int
    #: records stored, for a compacted segment (its offsets have gaps); None: consecutive
    row_count: int | None = None
    #: the topic schema version the segment was encoded in
    schema_version: int = 1

    @property
    def records(self) -> int:
        """Offsets of ``[start, end)``: the records read, or for a compacted segment an
        estimate (its records spread evenly over its span; gaps are aborted records)."""
        if self.row_count is None:
            return self.end - self.start
        return -(-(self.end - self.start) * self.row_count // max(self.record_count, 1))

    @property
    def bytes(self) -> int:
        return max(self.size_bytes * (self.end - self.start) // max(self.record_count, 1), 1)

    def planned(self) -> PlannedSegment:
        return PlannedSegment(self.base_offset, self.record_count, self.size_bytes, self.object_key, None, None,
                              row_count=self.row_count, schema_version=self.schema_version)

    def part(self, start: int, end: int) -> SegmentRef:
        """The same segment, read from ``[start, end)``."""
        return dataclasses.replace(self, start=start, end=end)


@dataclass
class TopicSplit(InputPartition):
    """One Spark input partition: part of one topic partition's offset range."""

    topic: str
    partition: int
    start: int
    end: int
    segments: list[SegmentRef] = field(default_factory=list)
    #: the schemas (as text, with field ids) of the versions its segments were written in,
    #: and the version they are read in (the latest at load()), by number
    schemas: dict[int, str] = field(default_factory=dict)
    read_version: int = 1

    @property
    def records(self) -> int:
        return sum(s.records for s in self.segments)

    @property
    def bytes(self) -> int:
        return sum(s.bytes for s in self.segments)


def _visible(tx: Tx, topic_id: int, r: OffsetRange, isolation_level: str) -> Iterator[SegmentRef]:
    position = r.start
    while position < r.end:
        page = plan_segments(tx, topic_id, r.partition, position, r.end, max_segments=PAGE)
        if not page:
            return
        for seg in page:
            lo, hi = max(position, seg.base_offset), min(r.end, seg.end_offset)
            if hi <= lo:
                continue
            if seg.skipped_at(isolation_level):  # aborted (read_committed), or purged by gc
                continue
            if isolation_level == READ_COMMITTED and seg.txn_id is not None and seg.marker is None:
                raise IllegalStateError(
                    f"{r.topic}-{r.partition}: segment at {seg.base_offset} belongs to an open transaction "
                    f"below the planned end {r.end}; the read's end is past the last stable offset"
                )
            yield SegmentRef(seg.object_key, seg.base_offset, seg.record_count, seg.size_bytes, lo, hi,
                             seg.row_count, seg.schema_version)
        position = max(position, page[-1].end_offset)


def plan_splits(broker: Broker, ranges: OffsetRanges, *, max_bytes: int, max_records: int | None = None,
                min_partitions: int | None = None, read_versions: dict[str, int] | None = None,
                ) -> list[TopicSplit]:
    """The splits of a read of ``ranges`` (one database snapshot). Empty ranges, and
    ranges holding no visible record, give no split. ``read_versions``: the schema
    version each topic is read in (default: its latest)."""
    ids = {name: broker._topics.get(name).topic_id for name in ranges.topics}

    def work(tx: Tx) -> list[TopicSplit]:
        splits: list[TopicSplit] = []
        for r in ranges:
            if r.start >= r.end:
                continue
            current: TopicSplit | None = None
            next_start = r.start
            for ref in _visible(tx, ids[r.topic], r, ranges.isolation_level):
                for piece in _cut(ref, max_records):
                    if current is not None and (current.bytes + piece.bytes > max_bytes or (
                            max_records is not None and current.records + piece.records > max_records)):
                        current.end = next_start = piece.start
                        splits.append(current)
                        current = None
                    if current is None:
                        current = TopicSplit(r.topic, r.partition, next_start, piece.end)
                    current.segments.append(piece)
                    current.end = piece.end
            if current is not None:
                current.end = r.end
                splits.append(current)
        return splits

    splits = broker._db.read(work)
    if min_partitions:
        splits = _at_least(splits, min_partitions)
    for split in splits:  # each task reads its segments' versions under the read's one
        meta = broker._topics.get(split.topic)
        if read_versions is not None and split.topic in read_versions:
            split.read_version = read_versions[split.topic]
        else:
            split.read_version = meta.schema_version
        wanted = {s.schema_version for s in split.segments} | {split.read_version}
        if not wanted <= set(meta.versions):
            meta = broker._topics.get(split.topic, refresh=True)
        split.schemas = {v: schema_to_text(meta.schema_at(v)) for v in sorted(wanted)}
    return splits


def _cut(ref: SegmentRef, max_records: int | None) -> Iterator[SegmentRef]:
    if max_records is None or ref.end - ref.start <= max_records:
        yield ref
        return
    for lo in range(ref.start, ref.end, max_records):
        yield ref.part(lo, min(lo + max_records, ref.end))


def _at_least(splits: list[TopicSplit], count: int) -> list[TopicSplit]:
    """Halve the split with the most records until there are ``count`` splits (or every
    split holds one record)."""
    splits = list(splits)
    while 0 < len(splits) < count:
        i = max(range(len(splits)), key=lambda k: splits[k].records)
        big = splits[i]
        if big.records < 2:
            break
        half = big.records // 2
        left = TopicSplit(big.topic, big.partition, big.start, big.start)
        right = TopicSplit(big.topic, big.partition, big.end, big.end)
        taken = 0
        for seg in big.segments:
            if taken >= half:
                right.segments.append(seg)
                continue
            room = half - taken
            if seg.records <= room:
                left.segments.append(seg)
                taken += seg.records
            else:
                mid = seg.start + max(room * (seg.end - seg.start) // max(seg.records, 1), 1)
                left.segments.append(seg.part(seg.start, mid))
                right.segments.append(seg.part(mid, seg.end))
                taken = half
        left.end = right.start = right.segments[0].start
        right.end = big.end
        splits[i:i + 1] = [left, right]
    return splits


def count_visible(broker: Broker, ranges: OffsetRanges) -> dict[str, int]:
    """Visible records per topic in ``ranges`` (from metadata only)."""
    counts: dict[str, int] = dict.fromkeys(ranges.topics, 0)
    for split in plan_splits(broker, ranges, max_bytes=2**62):
        counts[split.topic] += split.records
    return counts
