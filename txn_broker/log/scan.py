"""Reading one partition's visible rows with their offsets, a segment at a time: what
the Iceberg publisher (and compaction) read. Each table yielded holds ``_partition``,
``_offset``, ``_timestamp`` and the topic's own columns, in offset order; segments a
reader at ``isolation_level`` skips (aborted ones at read_committed, purged ones always)
are never loaded."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial

import pyarrow as pa

from ..database import Database, Tx
from ..storage import ObjectStore
from .partition import READ_COMMITTED, PlannedSegment, plan_segments
from .reader import load_segment, read_rows, with_metadata

_PLAN_PAGE = 64


def _plan(tx: Tx, topic_id: int, partition: int, start: int, end: int) -> list[PlannedSegment]:
    return plan_segments(tx, topic_id, partition, start, end, _PLAN_PAGE)


def scan_partition(db: Database, store: ObjectStore, topic_id: int, topic: str, partition: int,
                   start: int, end: int, isolation_level: str = READ_COMMITTED) -> Iterator[pa.Table]:
    """The rows of ``[start, end)`` visible at ``isolation_level``, one table per segment
    (empty segments and skipped ones yield nothing). The caller fixes ``end`` (a last
    stable offset or a consistent cut); the segments are planned a page at a time, each
    page in its own snapshot. Raises CorruptSegmentError for a segment whose object is
    missing or wrong, DatabaseUnavailableError / StorageUnavailableError (retriable)."""
    position = start
    while position < end:
        page = db.read(partial(_plan, topic_id=topic_id, partition=partition, start=position, end=end))
        if not page:
            return
        for segment in page:
            if segment.end_offset <= position:
                continue
            if not segment.skipped_at(isolation_level):
                rows = read_rows(load_segment(store, segment), segment, position, end)
                if rows.num_rows:
                    yield with_metadata(rows, topic, partition, max(position, segment.base_offset)).drop_columns(
                        ["_topic"])
            position = min(segment.end_offset, end)
        if len(page) < _PLAN_PAGE:
            return
