"""Deleting a partition's records below an offset (Kafka's DeleteRecords, ``kafka-delete-records``):
the log start offset moves to the given offset, which may lie inside a segment.

Every reader already starts at the log start (:func:`txn_broker.log.partition.plan_fetch`
and the readers that clamp to it), so a log start inside a segment hides that segment's
rows below it; the segments wholly below it go at once (rows deleted, objects queued for
gc after its delete delay, as retention's truncation does).

As in Kafka, the bound is the high watermark, not the last stable offset: records of a
transaction still open may be deleted. The last stable offset is then never reported below
the log start (:func:`txn_broker.log.partition.partition_offsets` clamps it), so a
read_committed reader starts at the log start and sees the rest of that transaction once
it commits. Offsets below the current log start change nothing (the log start never moves
back)."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from ..database import Database, Tx
from ..errors import InvalidInputError, OffsetOutOfRangeError, UnknownTopicOrPartitionError

log = logging.getLogger(__name__)

#: an offset of -1 deletes up to the high watermark (Kafka's value)
HIGH_WATERMARK = -1


def check_deletion_offset(offset: object) -> int:
    """``offset`` if it is an int of at least -1; InvalidInputError otherwise."""
    if not isinstance(offset, int) or isinstance(offset, bool):
        raise InvalidInputError(f"a delete-records offset must be an int, got {offset!r}")
    if offset < HIGH_WATERMARK:
        raise OffsetOutOfRangeError(f"a delete-records offset must be -1 (the high watermark) or at least 0, "
                                    f"got {offset}")
    return offset


def delete_records(db: Database, topic_id: int, topic: str, offsets: Mapping[int, int]) -> dict[int, int]:
    """Move each partition's log start offset up to its offset (-1: its high watermark) in
    one database transaction, under the partitions' row locks (taken in partition order).
    Returns each partition's new log start (its low watermark). Raises
    OffsetOutOfRangeError for an offset past a partition's high watermark and
    UnknownTopicOrPartitionError when the topic was deleted meanwhile; either way nothing
    changes."""
    wanted = {p: check_deletion_offset(o) for p, o in offsets.items()}

    def work(tx: Tx) -> dict[int, tuple[int, int, int]]:
        moved: dict[int, tuple[int, int, int]] = {}
        for partition in sorted(wanted):
            key = {"topic_id": topic_id, "partition_no": partition}
            row = tx.one("lock_partition", **key)
            if row is None:
                raise UnknownTopicOrPartitionError(f"{topic}-{partition} no longer exists")
            start, high = int(row.log_start_offset), int(row.high_watermark)
            target = high if wanted[partition] == HIGH_WATERMARK else wanted[partition]
            if target > high:
                raise OffsetOutOfRangeError(
                    f"cannot delete {topic}-{partition}'s records below {target}: its high watermark is {high}")
            if target <= start:
                moved[partition] = (start, start, 0)
                continue
            tx.execute("set_log_start", new_start=target, **key)
            tx.execute("queue_records_deleted_objects", new_start=target, **key)
            gone = tx.execute("delete_segments_below", new_start=target, **key)
            moved[partition] = (start, target, gone)
        return moved

    result = db.run(work)
    for partition, (old, new, segments) in sorted(result.items()):
        if new != old:
            log.info("delete-records: %s-%d log start %d -> %d (%d segments deleted)", topic, partition,
                     old, new, segments)
    return {p: new for p, (_old, new, _gone) in result.items()}
