"""Truncating the head of a partition's log for retention (topic configs ``retention.ms``
and ``retention.bytes``), as Kafka does: whole segments only, the log start offset moved
past them, their rows deleted and their objects queued for deletion (gc deletes them
after its delete delay).

A segment goes only when every segment before it goes too, when it breaches retention
(its newest record is older than ``retention.ms``, or the partition stays at least
``retention.bytes`` without it) and when it ends at or below the partition's last stable
offset: the log start never passes the last stable offset, so retention never truncates
into a transaction that is still open, nor past records a read_committed reader has not
been able to see yet."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from ..database import Database, Tx
from .partition import partition_offsets

log = logging.getLogger(__name__)

#: segments truncated per database transaction (keeps each partition lock short)
TRUNCATE_BATCH = 1000


@dataclass(frozen=True)
class LogTruncation:
    """Retention moved a partition's log start offset."""

    topic: str
    partition: int
    old_log_start_offset: int
    new_log_start_offset: int
    segments: int
    size_bytes: int


@dataclass(frozen=True)
class Retention:
    """A topic's retention limits (-1: unlimited)."""

    ms: int
    bytes: int

    @classmethod
    def of(cls, config_json: str) -> Retention:
        config = json.loads(config_json)
        return cls(int(config.get("retention.ms", -1)), int(config.get("retention.bytes", -1)))

    @property
    def limited(self) -> bool:
        return self.ms > 0 or self.bytes > 0


def truncate_partition(db: Database, topic_id: int, topic: str, partition: int, retention: Retention, *,
                       dry_run: bool = False) -> LogTruncation | None:
    """Truncate what breaches ``retention`` at the head of the partition, in batches of
    :data:`TRUNCATE_BATCH` segments, each its own database transaction under the partition's
    row lock. ``dry_run``: change nothing, answer what would go. None: nothing goes."""
    key = {"topic_id": topic_id, "partition_no": partition}
    first_start: int | None = None
    total_segments = total_bytes = 0
    last_start = None
    planned_start: int | None = None  # dry run: where the previous batch would have left off
    while True:

        def work(tx: Tx, planned_start: int | None = planned_start) -> tuple[int, int, int, int] | None:
            if not dry_run:
                tx.one("lock_partition", **key)  # appends to this partition wait for us
            offsets = partition_offsets(tx, topic_id, partition)
            if offsets is None:
                return None  # the topic was deleted meanwhile
            start = offsets.log_start_offset if planned_start is None else planned_start
            plan = _plan_truncation(tx, key, start, offsets.last_stable_offset, retention)
            if plan is None:
                return None
            new_start, segments, size = plan
            if not dry_run:
                moved = tx.execute("advance_log_start", new_start=new_start, old_start=start, **key)
                if moved != 1:
                    return None  # another gc moved it first
                tx.execute("queue_truncated_objects", new_start=new_start, **key)
                tx.execute("delete_truncated_segments", new_start=new_start, **key)
            return start, new_start, segments, size

        result = db.read(work) if dry_run else db.run(work)
        if result is None:
            break
        start, new_start, segments, size = result
        first_start = start if first_start is None else first_start
        last_start = new_start
        total_segments += segments
        total_bytes += size
        planned_start = new_start if dry_run else None
        if segments < TRUNCATE_BATCH:
            break
    if first_start is None or last_start is None:
        return None
    log.info("retention: %s-%d log start %d -> %d (%d segments, %d bytes)", topic, partition,
             first_start, last_start, total_segments, total_bytes)
    return LogTruncation(topic, partition, first_start, last_start, total_segments, total_bytes)


def _plan_truncation(tx: Tx, key: dict[str, int], start: int, last_stable_offset: int,
                     retention: Retention) -> tuple[int, int, int] | None:
    """Where the log start may move from ``start`` (possibly inside a segment): past the
    longest run of whole segments (at most ``TRUNCATE_BATCH``) that breach retention and end
    at or below the last stable offset. ``(new_start, segments, bytes)``, or None when nothing may go."""
    now = int(tx.scalar("now_ms"))
    # the log start may lie inside a segment (DeleteRecords): retention goes on from that one
    held = tx.scalar("segment_base_at", offset=start, **key)
    first = start if held is None else int(held)
    excess = None
    if retention.bytes > 0:
        excess = int(tx.scalar("partition_live_bytes", start_offset=first, **key)) - retention.bytes
    new_start, segments, size = start, 0, 0
    expected = first
    rows = tx.all("segments_page", after_offset=first - 1, limit=TRUNCATE_BATCH, **key)
    for s in rows:
        if s.base_offset != expected:
            break  # a gap in the metadata: leave it to fsck, never truncate across it
        end = expected = s.base_offset + s.record_count
        if end > last_stable_offset:
            break
        live_size = 0 if s.purged_ms is not None else s.size_bytes
        by_time = retention.ms > 0 and now - s.max_timestamp_ms > retention.ms
        by_size = excess is not None and excess - live_size >= 0
        if not (by_time or by_size):
            break
        if excess is not None:
            excess -= live_size
        new_start, segments, size = end, segments + 1, size + live_size
    return (new_start, segments, size) if segments else None
