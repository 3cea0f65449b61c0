"""Building and uploading segments, for every writer that appends Arrow tables (the
producer, the Spark data source's tasks): a buffered table (``_timestamp`` first) is
encoded in the segment format under its partition's key and put in the store, and what
its registration needs comes back as a :class:`SegmentWrite`. Registration is the
coordinator's (a producer's appends, or ``register_uploaded`` for Spark)."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Executor
from functools import partial

import pyarrow as pa
import pyarrow.compute as pc

from ..retry import retrying
from ..storage import ObjectStore
from .keys import segment_key
from .segment_format import encode_segment
from .types import SegmentWrite


def build_segment(table: pa.Table, *, topic_id: int, topic: str, partition: int, compression: str,
                  name: str, base_sequence: int = -1, last_sequence: int | None = None,
                  schema_version: int = 1) -> tuple[SegmentWrite, pa.Buffer]:
    """The encoded segment of ``table`` and its registration, under the key
    ``topics/{topic_id}/{partition}/{name}.arrow``. ``base_sequence`` -1: the segment is
    registered by object key, not by sequence number. ``last_sequence``: for writers that
    number records (see :class:`SegmentWrite`). ``schema_version``: the topic schema
    version ``table`` is in (its topic columns carry that version's field ids)."""
    payload = encode_segment(table, compression)
    newest = pc.max(table.column("_timestamp"))  # vectorised: no per-record Python
    write = SegmentWrite(
        topic_id=topic_id, topic=topic, partition=partition, record_count=table.num_rows,
        size_bytes=len(payload), object_key=segment_key(topic_id, partition, name),
        base_sequence=base_sequence, last_sequence=last_sequence,
        max_timestamp_ms=int(newest.cast(pa.int64()).as_py()), schema_version=schema_version,
    )
    return write, payload


def upload_segment(store: ObjectStore, write: SegmentWrite, payload: pa.Buffer,
                   budget_ms: int | None = None) -> None:
    """Put one segment object, retrying a retriable storage error within ``budget_ms``
    (txn_broker.retry)."""
    retrying(partial(store.put, write.object_key, payload), budget_ms)


def upload_segments(store: ObjectStore, staged: Sequence[tuple[SegmentWrite, pa.Buffer]],
                    pool: Executor | None = None, budget_ms: int | None = None) -> None:
    """Put every staged segment, in parallel on ``pool`` when there are several; a failed
    upload raises (the caller uploads them all again: a put is idempotent)."""
    if pool is None or len(staged) == 1:
        for write, payload in staged:
            upload_segment(store, write, payload, budget_ms)
        return
    futures = [pool.submit(upload_segment, store, write, payload, budget_ms) for write, payload in staged]
    for f in futures:
        f.result()


def build_and_upload(store: ObjectStore, table: pa.Table, *, topic_id: int, topic: str, partition: int,
                     compression: str, name: str, schema_version: int = 1) -> SegmentWrite:
    """Encode and put one segment registered by object key (the Spark data source's tasks)."""
    write, payload = build_segment(table, topic_id=topic_id, topic=topic, partition=partition,
                                   compression=compression, name=name, schema_version=schema_version)
    upload_segment(store, write, payload)
    return write
