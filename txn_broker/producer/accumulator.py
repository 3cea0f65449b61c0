"""The record accumulator: validated sends buffered per partition until a buffer becomes
segments (at ``segment_bytes``, on ``flush()`` or at commit: one segment, or runs of
about ``segment_bytes`` when it holds several times that), and the partitioner that
picks each record's partition (given, by key hash, or sticky)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from ..errors import SchemaMismatchError
from ..log.batches import key_partitions
from ..log.projection import project
from ..names import validate_partition
from ..topics import TopicMeta

#: a buffer's key: (topic id, partition)
BufferKey = tuple[int, int]


@dataclass
class _Buffer:
    tables: list[pa.Table] = field(default_factory=list)
    nbytes: int = 0


class RecordAccumulator:
    def __init__(self, segment_bytes: int) -> None:
        self.segment_bytes = segment_bytes
        self._buffers: dict[BufferKey, _Buffer] = {}
        self._sticky: dict[str, int] = {}
        self._topics: dict[int, TopicMeta] = {}

    def partition(self, meta: TopicMeta, table: pa.Table, key: str | None,
                  partition: int | None) -> np.ndarray | int:
        """Each record's partition: ``partition`` if given; else by a stable hash of the
        ``key`` column; else the topic's sticky partition (the next one per call)."""
        if partition is not None:
            return validate_partition(partition, meta.partition_count, meta.name)
        if key is not None:
            if key not in meta.schema.names:
                raise SchemaMismatchError(f"key column {key!r} is not a column of topic {meta.name!r}")
            parts = key_partitions(table.column(key), meta.partition_count)
            if (parts < 0).any():  # null keys are spread like unkeyed records
                parts[parts < 0] = self._next_sticky(meta)
            return parts
        return self._next_sticky(meta)

    def _next_sticky(self, meta: TopicMeta) -> int:
        current = self._sticky.get(meta.name)
        nxt = random.randrange(meta.partition_count) if current is None else (current + 1) % meta.partition_count
        self._sticky[meta.name] = nxt
        return nxt

    @staticmethod
    def split(table: pa.Table, parts: np.ndarray | int) -> dict[int, pa.Table]:
        """``table``'s records per partition."""
        if isinstance(parts, int):
            return {parts: table}
        out = {}
        for p in np.unique(parts):
            out[int(p)] = table.take(pa.array(np.flatnonzero(parts == p)))
        return out

    def append(self, meta: TopicMeta, split: dict[int, pa.Table]) -> list[BufferKey]:
        """Buffer ``split``; the buffers that reached ``segment_bytes``. ``split`` is in
        the latest schema version ``meta`` knows: records buffered in an older version are
        converted to it first (a buffer becomes segments of one version)."""
        known = self._topics.get(meta.topic_id)
        if known is not None and known.schema_version > meta.schema_version:  # a send on a staler handle
            split = {p: project(t, meta.schema, known.schema) for p, t in split.items()}
            meta = known
        elif known is not None and known.schema_version < meta.schema_version:
            self._convert(known, meta)
        self._topics[meta.topic_id] = meta
        full = []
        for p, part in split.items():
            buf = self._buffers.setdefault((meta.topic_id, p), _Buffer())
            buf.tables.append(part)
            buf.nbytes += part.nbytes
            if buf.nbytes >= self.segment_bytes:
                full.append((meta.topic_id, p))
        return full

    def _convert(self, old: TopicMeta, new: TopicMeta) -> None:
        for (topic_id, _), buf in self._buffers.items():
            if topic_id == new.topic_id:
                buf.tables = [project(t, old.schema, new.schema) for t in buf.tables]

    def keys(self) -> list[BufferKey]:
        return list(self._buffers)

    def drain(self, keys: list[BufferKey]) -> list[tuple[TopicMeta, int, pa.Table]]:
        """Take the buffers of ``keys`` out, in key order, each as the records of its
        segments in order: (topic, partition, records)."""
        out = []
        for key in sorted(keys):
            buf = self._buffers.pop(key, None)
            if not buf or not buf.tables:
                continue
            topic_id, partition = key
            for records in _segments(pa.concat_tables(buf.tables), self.segment_bytes):
                out.append((self._topics[topic_id], partition, records))
        return out

    def clear(self) -> None:
        self._buffers.clear()


def _segments(records: pa.Table, segment_bytes: int) -> list[pa.Table]:
    """A buffer's records as segments: one, or, for a buffer of n ≥ 2 times
    ``segment_bytes`` (a large send), n runs of equal record counts. A segment then holds
    between ``segment_bytes`` and about twice that, so that a reader never has to load a
    whole large send at once, and small sends still fill a segment each."""
    count = records.nbytes // max(segment_bytes, 1)
    if count < 2:
        return [records]
    rows = -(-records.num_rows // count)
    return [records.slice(start, rows) for start in range(0, records.num_rows, rows)]
