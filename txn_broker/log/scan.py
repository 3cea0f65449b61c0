"""Reading one partition's visible rows with their offsets, a segment at a time: what
the Iceberg publisher (and compaction) read. Each table yielded holds ``_partition``,
``_offset``, ``_timestamp`` and the topic's own columns, in offset order; segments a
reader at ``isolation_level`` skips (aborted ones at read_committed, purged ones always)
are never loaded. Given the topic's schema versions, every segment is read under one of
them (by field id, :mod:`txn_broker.log.projection`), whatever version it was written in."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from functools import partial

import pyarrow as pa

from ..database import Database, Tx
from ..errors import UnknownTopicOrPartitionError
from ..storage import ObjectStore
from .partition import READ_COMMITTED, PlannedSegment, plan_segments
from .projection import Projection
from .reader import load_segment, read_rows, with_metadata

_PLAN_PAGE = 64


def _plan(tx: Tx, topic_id: int, partition: int, start: int, end: int) -> list[PlannedSegment]:
    return plan_segments(tx, topic_id, partition, start, end, _PLAN_PAGE)


def scan_partition(db: Database, store: ObjectStore, topic_id: int, topic: str, partition: int,
                   start: int, end: int, isolation_level: str = READ_COMMITTED, *,
                   schemas: Mapping[int, pa.Schema] | None = None, version: int | None = None,
                   decode_threads: bool = True) -> Iterator[pa.Table]:
    """The rows of ``[start, end)`` visible at ``isolation_level``, one table per segment
    (empty segments and skipped ones yield nothing). The caller fixes ``end`` (a last
    stable offset or a consistent cut); the segments are planned a page at a time, each
    page in its own snapshot. Raises CorruptSegmentError for a segment whose object is
    missing or wrong, DatabaseUnavailableError / StorageUnavailableError (retriable).
    ``schemas`` (the topic's versions, with field ids, by number) and ``version``: the
    rows come in that version (its fields' ids kept); None: as each segment holds them.
    UnknownTopicOrPartitionError for a segment of a version ``schemas`` lacks (the topic
    was altered meanwhile: look it up again). ``decode_threads=False``: decompress on the
    calling thread (a caller scanning several partitions in threads of its own)."""
    position = start
    projections: dict[int, Projection] = {}  # per segment schema version, planned once
    while position < end:
        page = db.read(partial(_plan, topic_id=topic_id, partition=partition, start=position, end=end))
        if not page:
            return
        for segment in page:
            if segment.end_offset <= position:
                continue
            if not segment.skipped_at(isolation_level):
                rows = read_rows(load_segment(store, segment, use_threads=decode_threads), segment, position, end)
                if schemas is not None and version is not None and rows.num_rows:
                    if segment.schema_version not in schemas or version not in schemas:
                        raise UnknownTopicOrPartitionError(
                            f"{topic}-{partition}: segment at {segment.base_offset} is of schema version "
                            f"{segment.schema_version}, unknown to this reader; look the topic up again")
                    projection = projections.get(segment.schema_version)
                    if projection is None:
                        projection = projections[segment.schema_version] = Projection(
                            schemas[segment.schema_version], schemas[version])
                    rows = projection.apply(rows)
                if rows.num_rows:
                    yield with_metadata(rows, topic, partition, max(position, segment.base_offset)).drop_columns(
                        ["_topic"])
            position = min(segment.end_offset, end)
        if len(page) < _PLAN_PAGE:
            return
