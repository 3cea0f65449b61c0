"""Reading rows out of segment objects: loading and decoding a planned segment (checked
against its metadata), a bounded cache of decoded segments, and the metadata columns
(``_topic``, ``_partition``, ``_offset``) put in front of a segment's rows.

A compacted segment (:mod:`txn_broker.compaction`) holds no aborted records: its offsets
have gaps, so its object stores them, as an ``_offset`` column in front of
``_timestamp``. :func:`read_rows` finds an offset range's rows by that column and keeps it;
:func:`with_metadata` and :class:`MetadataColumns` take it as the rows' offsets instead of
numbering them."""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import CorruptSegmentError
from ..storage import ObjectNotFoundError, ObjectStore
from .partition import PlannedSegment
from .segment_format import OFFSET_COLUMN, decode_segment

_PREFETCH_POOL: tuple[int, ThreadPoolExecutor] | None = None  # (the process it belongs to, the pool)
_PREFETCH_POOL_LOCK = threading.Lock()


def prefetch_pool() -> ThreadPoolExecutor:
    """The threads that fetch segment objects ahead of readers (consumers' polls, the
    Kafka listener's fetches), shared by the process and kept. A forked child, which has
    none of its parent's threads, makes its own."""
    global _PREFETCH_POOL
    with _PREFETCH_POOL_LOCK:
        if _PREFETCH_POOL is None or _PREFETCH_POOL[0] != os.getpid():
            _PREFETCH_POOL = (os.getpid(), ThreadPoolExecutor(max_workers=4, thread_name_prefix="txn-broker-prefetch"))
        return _PREFETCH_POOL[1]


class SegmentCache:
    """Decoded segments, least recently used first out, bounded in bytes. A segment may be
    held without some of its columns (those its reader's schema version dropped): a later
    reader that needs them decodes it again."""

    def __init__(self, store: ObjectStore, max_bytes: int = 256 * 1024 * 1024) -> None:
        self.store = store
        self.max_bytes = max_bytes
        self._tables: OrderedDict[str, tuple[pa.Table, frozenset[str]]] = OrderedDict()  # with skipped columns
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, segment: PlannedSegment, data: Callable[[], pa.Buffer] | None = None,
            skip: frozenset[str] = frozenset()) -> pa.Table:
        """The segment decoded, from the cache or loaded; ``data``: its object's bytes
        when a caller fetched them already (called only if the cache misses); ``skip``:
        columns the caller does not need (they may be present)."""
        with self._lock:
            held = self._tables.get(segment.object_key)
            if held is not None and held[1] <= skip:
                self._tables.move_to_end(segment.object_key)
                return held[0]
        table = load_segment(self.store, segment, None if data is None else data(), skip)
        with self._lock:
            old = self._tables.pop(segment.object_key, None)
            if old is not None:
                self._bytes -= old[0].nbytes
            self._tables[segment.object_key] = (table, skip)
            self._bytes += table.nbytes
            while self._bytes > self.max_bytes and len(self._tables) > 1:
                _, (gone, _) = self._tables.popitem(last=False)
                self._bytes -= gone.nbytes
        return table

    def holds(self, key: str) -> bool:
        """Whether the segment object ``key`` is decoded in the cache."""
        with self._lock:
            return key in self._tables

    def discard(self, key: str) -> None:
        """Forget a segment read past, so that its memory is reused as soon as readers let
        go of its records (rather than when the cache is full)."""
        with self._lock:
            held = self._tables.pop(key, None)
            if held is not None:
                self._bytes -= held[0].nbytes


def fetch_segment(store: ObjectStore, segment: PlannedSegment) -> pa.Buffer:
    """A planned segment's object, not decoded yet (CorruptSegmentError if it is gone)."""
    if segment.purged:
        raise CorruptSegmentError(
            f"segment {segment.object_key} (offsets {segment.base_offset}..{segment.end_offset - 1}) "
            "belongs to an aborted transaction purged by gc; readers must skip it"
        )
    try:
        return store.get_buffer(segment.object_key)  # zero-copy where the store allows (a memory map)
    except ObjectNotFoundError:
        raise CorruptSegmentError(
            f"segment object {segment.object_key} (offsets {segment.base_offset}.."
            f"{segment.end_offset - 1}) is missing from storage; run `txn-broker fsck`"
        ) from None


def load_segment(store: ObjectStore, segment: PlannedSegment, data: pa.Buffer | None = None,
                 skip: Collection[str] = (), *, use_threads: bool = True) -> pa.Table:
    """A planned segment decoded and checked against its metadata; ``data``: its object,
    if fetched already; ``skip``: columns not to decode, ``use_threads``: as
    :func:`decode_segment`.
    CorruptSegmentError for an object that is missing, cannot be decoded or disagrees with
    the metadata."""
    data = fetch_segment(store, segment) if data is None else data
    try:
        table = decode_segment(data, skip, use_threads=use_threads)
    except pa.ArrowException as error:  # decoding an object in memory: its bytes are wrong
        raise CorruptSegmentError(
            f"segment object {segment.object_key} (offsets {segment.base_offset}.."
            f"{segment.end_offset - 1}) cannot be decoded ({error}); run `txn-broker fsck`"
        ) from None
    if table.num_rows != segment.rows:
        raise CorruptSegmentError(
            f"segment object {segment.object_key} holds {table.num_rows} records, "
            f"its metadata says {segment.rows}; run `txn-broker fsck`"
        )
    if segment.has_gaps != (table.num_columns > 0 and table.schema.names[0] == OFFSET_COLUMN):
        raise CorruptSegmentError(
            f"segment object {segment.object_key} {'lacks' if segment.has_gaps else 'has'} an "
            f"{OFFSET_COLUMN} column, its metadata says it is {'' if segment.has_gaps else 'not '}compacted; "
            "run `txn-broker fsck`"
        )
    return table


def row_offsets(table: pa.Table) -> np.ndarray | None:
    """The offsets of a compacted segment's rows (its stored ``_offset`` column, first),
    None for a segment of consecutive offsets."""
    if not table.num_columns or table.schema.names[0] != OFFSET_COLUMN:
        return None
    return np.asarray(table.column(0).combine_chunks().to_numpy(zero_copy_only=False), dtype=np.int64)


def row_index(offsets: np.ndarray | None, first_offset: int, offset: int) -> int:
    """The index of the first row at or after ``offset`` of a table whose first row is at
    ``first_offset`` (``offsets``: its rows' offsets, None when they are consecutive)."""
    if offsets is None:
        return max(offset - first_offset, 0)
    return int(np.searchsorted(offsets, offset, side="left"))


def with_metadata(rows: pa.Table, topic: str, partition: int, first_offset: int) -> pa.Table:
    """Rows of a segment (``_timestamp`` first) with ``_topic``, ``_partition``, ``_offset``
    (numbered from ``first_offset``, or the rows' own ``_offset`` column of a compacted
    segment)."""
    n = rows.num_rows
    if row_offsets(rows) is None:
        rows = rows.add_column(0, pa.field("_offset", pa.int64()),
                               pa.array(np.arange(first_offset, first_offset + n, dtype=np.int64)))
    rows = rows.add_column(0, pa.field("_partition", pa.int32()),
                           pa.array(np.full(n, partition, dtype=np.int32)))
    return rows.add_column(0, pa.field("_topic", pa.string()), _repeated(topic, n))


class MetadataColumns:
    """:func:`with_metadata` for readers that decorate many segments: the constant
    columns (``_topic``, ``_partition``) are slices of arrays built once per topic and
    partition (grown when a longer segment comes), so only ``_offset`` is built per
    segment: added to a range built once, in Arrow's memory pool (which reuses freed
    memory where numpy would touch new pages). Holds the arrays of at most ``keep``
    topics and partition numbers; safe to share between threads."""

    def __init__(self, keep: int = 64) -> None:
        self.keep = keep
        self._topics: dict[str, pa.Array] = {}
        self._partitions: dict[int, pa.Array] = {}
        # built on first use: any pa.array call imports pandas, which commands that never
        # read rows (and `import txn_broker`) should not pay
        self._range: pa.Array | None = None

    def add(self, rows: pa.Table, topic: str, partition: int, first_offset: int) -> pa.Table:
        n = rows.num_rows
        topics = self._topics.get(topic)
        if topics is None or len(topics) < n:
            if len(self._topics) >= self.keep:
                self._topics.clear()
            topics = self._topics[topic] = _repeated(topic, n)
        partitions = self._partitions.get(partition)
        if partitions is None or len(partitions) < n:
            if len(self._partitions) >= self.keep:
                self._partitions.clear()
            partitions = self._partitions[partition] = pa.array(np.full(n, partition, dtype=np.int32))
        if not rows.num_columns or rows.schema.names[0] != OFFSET_COLUMN:  # else a compacted segment's own
            numbers = self._range
            if numbers is None or len(numbers) < n:
                numbers = self._range = pa.array(np.arange(n, dtype=np.int64))
            offsets = pc.add(numbers.slice(0, n), pa.scalar(first_offset, pa.int64()))
            rows = rows.add_column(0, pa.field("_offset", pa.int64()), offsets)
        rows = rows.add_column(0, pa.field("_partition", pa.int32()), partitions.slice(0, n))
        return rows.add_column(0, pa.field("_topic", pa.string()), topics.slice(0, n))


def _repeated(text: str, n: int) -> pa.Array:
    """A string array of ``n`` times ``text``, built from its buffers (no per-row work)."""
    raw = text.encode("utf-8")
    if (n + 1) * len(raw) >= 2**31:  # beyond 32-bit offsets: let Arrow build it
        return pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, dtype=np.int32)), pa.array([text])).cast(
            pa.string())
    offsets = np.arange(0, (n + 1) * len(raw), len(raw), dtype=np.int32) if raw else np.zeros(n + 1, np.int32)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(raw * n))


def read_rows(table: pa.Table, segment: PlannedSegment, start: int, end: int) -> pa.Table:
    """Rows of ``[start, end)`` that lie in the segment (a compacted segment's keep their
    ``_offset`` column, first: :func:`with_metadata` uses it)."""
    offsets = row_offsets(table) if segment.has_gaps else None
    lo = row_index(offsets, segment.base_offset, max(start, segment.base_offset))
    hi = row_index(offsets, segment.base_offset, min(end, segment.end_offset))
    return table.slice(lo, max(hi - lo, 0))
