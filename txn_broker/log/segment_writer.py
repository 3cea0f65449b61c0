"""Writing segments, for every writer that appends Arrow tables (the producer, the Spark
data source's tasks, the Kafka listener): a buffered table (``_timestamp`` first) is
encoded in the segment format straight into the store's writer for its partition's key,
and what its registration needs comes back as a :class:`SegmentWrite`. Registration is the
coordinator's (a producer's appends, or ``register_uploaded`` for Spark)."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, replace

import pyarrow as pa
import pyarrow.compute as pc

from ..retry import retrying
from ..storage import ObjectStore
from .keys import segment_key
from .segment_format import write_segment_file
from .types import SegmentWrite


@dataclass(frozen=True)
class StagedSegment:
    """A segment to write: its records, its codec, and its registration, whose
    ``size_bytes`` is known once it is written (0 until then)."""

    table: pa.Table
    compression: str
    write: SegmentWrite


def stage_segment(table: pa.Table, *, topic_id: int, topic: str, partition: int, compression: str,
                  name: str, base_sequence: int = -1, last_sequence: int | None = None,
                  schema_version: int = 1) -> StagedSegment:
    """The segment of ``table`` under the key ``topics/{topic_id}/{partition}/{name}.arrow``,
    not encoded yet. ``base_sequence`` -1: the segment is registered by object key, not by
    sequence number. ``last_sequence``: for writers that number records (see
    :class:`SegmentWrite`). ``schema_version``: the topic schema version ``table`` is in
    (its topic columns carry that version's field ids)."""
    newest = pc.max(table.column("_timestamp"))  # vectorised: no per-record Python
    write = SegmentWrite(
        topic_id=topic_id, topic=topic, partition=partition, record_count=table.num_rows,
        size_bytes=0, object_key=segment_key(topic_id, partition, name),
        base_sequence=base_sequence, last_sequence=last_sequence,
        max_timestamp_ms=int(newest.cast(pa.int64()).as_py()), schema_version=schema_version,
    )
    return StagedSegment(table, compression, write)


def write_segment(store: ObjectStore, staged: StagedSegment, budget_ms: int | None = None) -> SegmentWrite:
    """Encode one segment straight into its object (the store's :meth:`writer
    <txn_broker.storage.ObjectStore.writer>`: on a local directory, the Arrow IPC file is
    written into the object's temporary file, with no copy of it in memory), retrying a
    retriable storage error within ``budget_ms``; its registration, with its size."""

    def once() -> int:
        with store.writer(staged.write.object_key) as sink:
            write_segment_file(sink, staged.table, staged.compression)
            size: int = sink.tell()
        return size

    return replace(staged.write, size_bytes=retrying(once, budget_ms))


def write_segments(store: ObjectStore, staged: Sequence[StagedSegment], pool: Executor | None = None,
                   budget_ms: int | None = None) -> list[SegmentWrite]:
    """Write every staged segment, in parallel on ``pool`` when there are several; a failed
    write raises (the caller writes them all again: the same records under the same key
    are the same object)."""
    if pool is None or len(staged) == 1:
        return [write_segment(store, s, budget_ms) for s in staged]
    futures = [pool.submit(write_segment, store, s, budget_ms) for s in staged]
    return [f.result() for f in futures]


def build_and_upload(store: ObjectStore, table: pa.Table, *, topic_id: int, topic: str, partition: int,
                     compression: str, name: str, schema_version: int = 1) -> SegmentWrite:
    """Encode and write one segment registered by object key (the Spark data source's tasks)."""
    return write_segment(store, stage_segment(table, topic_id=topic_id, topic=topic, partition=partition,
                                              compression=compression, name=name, schema_version=schema_version))
