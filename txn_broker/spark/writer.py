"""The ``txn_topic`` Spark data source: writing.

* ``writer()`` (driver side) checks the options and the DataFrame's schema against the
  topic (the latest schema version, or an older one its ``schema.compatibility`` lets
  writers send in, by the producer's own rules: batches are converted to the latest), and
  that the producer it writes for is not fenced, before any task runs.
* ``write()`` (each task, in the executors) turns the task's Arrow batches into segments:
  per target partition (``key.column`` hashed exactly as ``producer.send(key=...)`` does,
  so Spark and Python producers agree; without a key, the task fills one partition per
  segment, starting at its own partition number), built and uploaded by the log's segment
  writer as the producer's are, under object keys unique to the task attempt. It registers nothing and returns the list
  of uploads.
* ``commit()`` (driver side, once every task succeeded) registers the uploads of the winning
  attempts (Spark passes only theirs) with one call to ``Coordinator.register_uploaded``: one
  database transaction, fenced by the producer epoch, idempotent by object key. With a
  transaction handle (options ``transactional.id``, ``producer.id``, ``producer.epoch``,
  ``txn.id``) the segments join that open transaction and stay invisible to read_committed
  readers until it commits; without one, the write uses a fresh idempotent producer id and
  is visible at once, all of it together.
* ``abort()`` registers nothing. Uploads of failed, retried or speculative attempts, and
  of failed jobs, are never registered: they are orphans, deleted by ``gc``.
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage

from ..errors import InvalidConfigError, SchemaMismatchError
from ..faults import fault_point
from ..log.batches import check_record_sizes, key_partitions, schema_from_text, schema_to_text
from ..log.segment_format import with_timestamp
from ..log.segment_writer import build_and_upload
from ..log.types import SegmentWrite, TransactionHandle
from ..retry import retrying
from ..topic_schemas import SchemaVersion
from . import options as opts
from .schemas import check_write, conform_spark_batch

log = logging.getLogger(__name__)
UPLOAD_THREADS = 4


@dataclass
class SegmentsWritten(WriterCommitMessage):
    """What one task attempt uploaded (its commit message to the driver)."""

    task_partition: int
    attempt: int
    task_attempt_id: int
    records: int
    writes: list[SegmentWrite] = field(default_factory=list)


@dataclass(frozen=True)
class TopicTarget:
    name: str
    topic_id: int
    partition_count: int
    schema_text: str
    max_message_bytes: int
    #: the topic's ``compression.type``: segments are encoded as the producer's are
    compression: str = "uncompressed"
    #: the schema version ``schema_text`` is (segments record it)
    schema_version: int = 1
    #: every schema version of the topic, ``schema.compatibility``, and the Arrow schema
    #: the DataFrame's batches are sent as (the driver's check): what ``conform_send`` takes
    versions: tuple[SchemaVersion, ...] = ()
    compatibility: str = "BACKWARD"
    send_schema_text: str = ""


def make_writer(options: Mapping[str, str], schema: Any, overwrite: bool) -> TxnTopicWriter:
    """Driver side: validate everything that can be validated before a task runs."""
    if overwrite:
        raise InvalidConfigError("txn_topic topics are append-only logs: use .mode('append')")
    write = opts.write_options(options)
    conn = opts.connection(options)
    with conn.open_broker() as broker:
        meta = broker._topics.get(write.topic, refresh=True)
        sent = check_write(schema, meta.versions, meta.schema_version, meta.compatibility, write.topic)
        if write.key_column is not None and write.key_column not in meta.schema.names:
            raise SchemaMismatchError(f"key.column {write.key_column!r} is not a column of topic {write.topic!r}")
        if write.handle is not None:
            broker._coordinator.check_not_fenced(write.handle.identity)  # fail fast; commit checks under lock
    target = TopicTarget(meta.name, meta.topic_id, meta.partition_count, schema_to_text(meta.schema),
                         meta.max_message_bytes, meta.compression, meta.schema_version,
                         tuple(meta.versions[v] for v in sorted(meta.versions)), meta.compatibility,
                         schema_to_text(sent))
    return TxnTopicWriter(conn, target, write, uuid.uuid4().hex[:16])


class TxnTopicWriter(DataSourceArrowWriter):
    def __init__(self, connection: opts.Connection, target: TopicTarget, write: opts.WriteOptions,
                 write_id: str) -> None:
        self.connection = connection
        self.target = target
        self.key_column = write.key_column
        self.segment_bytes = write.segment_bytes
        self.handle = write.handle
        self.write_id = write_id

    def __repr__(self) -> str:
        return f"TxnTopicWriter(topic={self.target.name!r}, write_id={self.write_id!r}, handle={self.handle})"

    # -- executors ---------------------------------------------------------------------

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        task = ctx.partitionId() if ctx else 0
        attempt = ctx.attemptNumber() if ctx else 0
        attempt_id = ctx.taskAttemptId() if ctx else random.getrandbits(48)
        upload = _TaskUpload(self, task, attempt_id)
        try:
            for batch in iterator:
                upload.add(batch)
            fault_point("spark.task_write")
            writes = upload.finish()
        finally:
            upload.close()
        return SegmentsWritten(task, attempt, attempt_id, upload.records, writes)

    # -- driver ------------------------------------------------------------------------

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        writes = [w for m in messages if isinstance(m, SegmentsWritten) for w in m.writes]
        fault_point("spark.before_register")
        if not writes:
            return
        with self.connection.open_broker() as broker:
            handle = self.handle
            if handle is None:  # idempotent, no transaction: a producer id of its own
                handle = TransactionHandle(None, broker._coordinator.allocate_producer_id(), 0, None)
            results = retrying(lambda: broker._coordinator.register_uploaded(handle, writes),
                               broker.settings.retry_budget_ms)
        fault_point("spark.after_register")
        log.info("txn_topic write %s: registered %d segment(s), %d record(s) in %s (transaction %s)",
                 self.write_id, len(results), sum(r.record_count for r in results), self.target.name,
                 handle.txn_id)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        uploaded = sum(len(m.writes) for m in messages if isinstance(m, SegmentsWritten))
        log.warning("txn_topic write %s to %s failed: nothing registered; %d uploaded object(s) are left "
                    "for gc", self.write_id, self.target.name, uploaded)


class _TaskUpload:
    """One task attempt's buffers and uploads."""

    def __init__(self, writer: TxnTopicWriter, task: int, attempt_id: int) -> None:
        self.writer = writer
        self.target = writer.target
        self.schema = schema_from_text(writer.target.schema_text)
        self.versions = {v.version: v for v in self.target.versions} or {
            self.target.schema_version: SchemaVersion(self.target.schema_version, self.schema, 0, "")}
        self.sent = (schema_from_text(self.target.send_schema_text) if self.target.send_schema_text
                     else self.schema)
        self.store = writer.connection.storage().open_store()
        self.prefix = f"spark-{writer.write_id}-{task}-{attempt_id}"
        self.sticky = task % self.target.partition_count
        self.buffers: dict[int, list[pa.Table]] = {}
        self.sizes: dict[int, int] = {}
        self.seq = 0
        self.records = 0
        self.pool = ThreadPoolExecutor(UPLOAD_THREADS, "txn-topic-upload")
        self.inflight: list[Future[SegmentWrite]] = []
        self.done: list[SegmentWrite] = []

    def add(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        table = conform_spark_batch(batch, self.sent, self.versions, self.target.schema_version,
                                    self.target.compatibility, self.target.name)
        check_record_sizes(table, self.target.max_message_bytes, self.target.name)
        table = with_timestamp(table, int(time.time() * 1000))
        self.records += table.num_rows
        n = self.target.partition_count
        if self.writer.key_column is None:
            self._append(self.sticky, table)
            return
        parts = key_partitions(table.column(self.writer.key_column), n)
        if (parts < 0).any():  # null keys are spread like unkeyed records
            parts[parts < 0] = self.sticky
        for p in np.unique(parts):
            self._append(int(p), table.filter(pa.array(parts == p)))

    def _append(self, partition: int, table: pa.Table) -> None:
        self.buffers.setdefault(partition, []).append(table)
        self.sizes[partition] = self.sizes.get(partition, 0) + table.nbytes
        if self.sizes[partition] >= self.writer.segment_bytes:
            self._flush(partition)
            if self.writer.key_column is None:
                self.sticky = (self.sticky + 1) % self.target.partition_count

    def _flush(self, partition: int) -> None:
        tables = self.buffers.pop(partition, [])
        self.sizes.pop(partition, None)
        if not tables:
            return
        name = f"{self.prefix}-{self.seq}"
        self.seq += 1
        while len(self.inflight) >= 2 * UPLOAD_THREADS:  # bound the memory held by pending uploads
            self.done.append(self.inflight.pop(0).result())
        self.inflight.append(self.pool.submit(
            build_and_upload, self.store, pa.concat_tables(tables), topic_id=self.target.topic_id,
            topic=self.target.name, partition=partition, compression=self.target.compression, name=name,
            schema_version=self.target.schema_version))

    def finish(self) -> list[SegmentWrite]:
        for partition in sorted(self.buffers):
            self._flush(partition)
        for f in self.inflight:
            self.done.append(f.result())
        self.inflight = []
        return sorted(self.done, key=lambda w: (w.partition, w.object_key))

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
