"""Segment compaction: a partition's small committed segments merged into segments of about
the topic's ``segment.bytes``, without the records of aborted transactions.

A producer committing every few records writes one object per partition per transaction;
every reader then pays one GET and one decode per object. Compaction rewrites runs of
them (planned and executed by :mod:`txn_broker.rewrite`):

* **What may be merged.** Segments below the partition's last stable offset (every
  transaction there is decided), from the log start on, that are at least the topic's
  ``min.compaction.lag.ms`` old (so that a producer's retry of a recent batch still finds
  its segment by sequence number), consecutive in offsets. Segments of committed
  transactions and non-transactional ones give their records; segments of aborted
  transactions (purged by gc or not) give none, and their offsets become gaps. A segment of
  at least 3/4 of ``segment.bytes`` is left alone. A segment is sized by what it brings to
  the merged one, not by its stored bytes: a small segment's object is mostly IPC framing
  and schema (10 records of 100 B: 800 of about 2,000 bytes), which the merged segment
  pays once, and its records gain an 8-byte ``_offset``.
* **The merged segment.** Every record keeps its offset, timestamp, headers and every
  column; its object stores the offsets as an ``_offset`` column in front of
  ``_timestamp`` (gaps where aborted records were), compressed with the topic's
  ``compression.type``. Its row covers the inputs' whole offset span (``record_count``, so
  the log stays contiguous) and records the records it holds (``row_count``). It belongs
  to no producer and no transaction (producer id -1, no sequence, ``txn_id`` NULL): it
  holds committed records only, visible at every isolation level. The transactions it
  absorbed keep their entries (offsets, counts, markers); ``describe_transaction`` lists no
  segment for them any more.
* **The swap.** One database transaction, under the partition's row lock, checks that the
  inputs' rows are exactly those it read (same keys, none purged since: a concurrent
  retention, gc purge or second compactor makes it refuse, change nothing, and the output
  object is deleted), deletes them, registers the merged segment and queues the inputs'
  objects in ``object_deletions``: readers that planned before the swap keep reading them
  until gc's delete delay passes.
* **Crashes.** Before the swap: an unregistered object (an orphan gc deletes after its
  grace period). After: the inputs are queued. Never a row without its object.

``read_uncommitted`` after compaction: the aborted records a merged run held are gone, as
they are once gc purges an aborted transaction (Kafka keeps them until retention).
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pyarrow as pa

from .config import Settings
from .database import Database, Tx
from .errors import UnknownTopicOrPartitionError
from .log.keys import segment_key
from .log.partition import partition_offsets, partitions_page
from .log.scan import scan_partition
from .log.segment_format import OFFSET_COLUMN, encode_segment, segment_overhead
from .retry import retrying
from .rewrite import RewriteFile, RewriteGroup, plan_rewrite, run_rewrite
from .storage import ObjectStore
from .topic_configs import with_legacy_defaults
from .topics import TopicMeta

log = logging.getLogger(__name__)

_PAGE = 1000
#: segments looked at per partition and run (a partition with more is picked up next run)
MAX_CANDIDATES = 50_000

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Candidate:
    """A segment as compaction sees it."""

    base_offset: int
    record_count: int
    size_bytes: int
    object_key: str
    max_timestamp_ms: int
    purged: bool
    row_count: int | None
    #: gives records to the merged segment (committed, or not in a transaction)
    committed: bool
    #: of an aborted transaction: merged, its records dropped
    aborted: bool
    #: the topic schema version it was written in (the merged segment is in the latest)
    schema_version: int = 1


@dataclass
class CompactionReport:
    """What a compaction run did (or, with ``dry_run``, would do)."""

    dry_run: bool = False
    partitions_checked: int = 0
    partitions_compacted: int = 0
    #: merged segments written and registered (dry run: planned)
    segments_written: int = 0
    #: segments they replaced (their objects queued for deletion)
    segments_replaced: int = 0
    bytes_replaced: int = 0
    bytes_written: int = 0
    records: int = 0
    #: offsets of aborted records dropped (gaps in the merged segments)
    aborted_records_dropped: int = 0
    #: swaps refused because their inputs changed meanwhile (nothing changed; next run retries)
    conflicts: int = 0
    topics: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def topic_target(topic: TopicMeta, settings: Settings) -> tuple[int, int]:
    """``(segment.bytes, min.compaction.lag.ms)`` of a topic."""
    config = with_legacy_defaults(topic.config, settings)
    return int(config["segment.bytes"]), int(config["min.compaction.lag.ms"])


def candidates(tx: Tx, topic_id: int, partition: int, min_age_ms: int) -> list[Candidate]:
    """The partition's segments compaction may look at: from the log start, in offset order,
    up to the first that ends past the last stable offset or is younger than
    ``min_age_ms``. Segments it may not merge (a transaction without an entry) come as not
    committed and not aborted: the planner keeps them."""
    offsets = partition_offsets(tx, topic_id, partition)
    if offsets is None:
        return []
    out: list[Candidate] = []
    position = offsets.log_start_offset
    while len(out) < MAX_CANDIDATES:
        rows = tx.all("compaction_candidates", topic_id=topic_id, partition_no=partition,
                      from_offset=position, limit=_PAGE)
        for r in rows:
            end = r.base_offset + r.record_count
            if end > offsets.last_stable_offset or r.age_ms < min_age_ms:
                return out
            out.append(Candidate(r.base_offset, r.record_count, r.size_bytes, r.object_key, r.max_timestamp_ms,
                                 r.purged_ms is not None, r.row_count,
                                 committed=r.purged_ms is None and (r.txn_id is None or r.marker == "COMMIT"),
                                 aborted=r.purged_ms is not None or (r.txn_id is not None and r.marker == "ABORT"),
                                 schema_version=r.schema_version))
            position = end
        if len(rows) < _PAGE:
            break
    return out


#: bytes per record of the merged segment's ``_offset`` column
_OFFSET_BYTES = 8


def merged_bytes(c: Candidate, overhead: int) -> int:
    """The bytes ``c`` brings to a merged segment: its stored bytes without the ``overhead``
    every segment object pays once (:func:`txn_broker.log.segment_format.segment_overhead`),
    plus the ``_offset`` column the merged segment stores for its records (a compacted
    input has it already). Nothing for an aborted segment: its records are dropped."""
    if not c.committed:
        return 0
    offsets = 0 if c.row_count is not None else _OFFSET_BYTES * c.record_count
    return max(c.size_bytes - overhead, 0) + offsets


def _file(c: Candidate, overhead: int) -> RewriteFile:
    return RewriteFile(c.object_key, c.base_offset, c.base_offset + c.record_count,
                       merged_bytes(c, overhead), movable=c.committed or c.aborted)


def _overheads(topic: TopicMeta, found: Sequence[Candidate]) -> dict[int, int]:
    """The per-object overhead of a segment of each schema version among ``found``."""
    return {v: segment_overhead(topic.versions[v].schema, topic.compression)
            for v in {c.schema_version for c in found} if v in topic.versions}


@dataclass(frozen=True)
class MergedSegment:
    """A merged segment written and not yet registered."""

    object_key: str
    size_bytes: int
    row_count: int
    max_timestamp_ms: int


class SegmentTarget:
    """Segment compaction as a :class:`txn_broker.rewrite.RewriteTarget`."""

    def __init__(self, db: Database, store: ObjectStore, topic: TopicMeta, partition: int,
                 inputs: Sequence[Candidate], retry_budget_ms: int | None = None) -> None:
        self.db, self.store, self.topic, self.partition = db, store, topic, partition
        self.inputs = {c.object_key: c for c in inputs}
        self.retry_budget_ms = retry_budget_ms

    def read(self, group: RewriteGroup) -> Iterator[pa.Table]:
        """The group's committed rows, a segment at a time, with their offsets first (the
        partition's visible rows, :func:`txn_broker.log.scan.scan_partition`; if another
        compactor swapped meanwhile, the same rows from its segment, and this swap refuses)."""
        versions = {number: v.schema for number, v in self.topic.versions.items()}
        # every input in the topic's latest version, by field id (the merged segment is in it)
        for table in scan_partition(self.db, self.store, self.topic.topic_id, self.topic.name, self.partition,
                                    group.start, group.end, schemas=versions, version=self.topic.schema_version):
            yield table.drop_columns(["_partition"])  # left: _offset, _timestamp, the topic's columns

    def write(self, group: RewriteGroup, tables: list[pa.Table]) -> MergedSegment:
        table = pa.concat_tables(tables).combine_chunks()
        # compressed as the producer's segments of the same records were: decided without `_offset`
        payload = encode_segment(table, self.topic.compression, sample_without=(OFFSET_COLUMN,))
        key = segment_key(self.topic.topic_id, self.partition,
                          f"compacted-{group.start:020d}-{group.end:020d}-{uuid.uuid4().hex}")
        retrying(partial(self.store.put, key, payload), self.retry_budget_ms)
        newest = max(self.inputs[f.key].max_timestamp_ms for f in group.files if self.inputs[f.key].committed)
        return MergedSegment(key, len(payload), table.num_rows, newest)

    def swap(self, group: RewriteGroup, output: MergedSegment) -> bool:
        key = {"topic_id": self.topic.topic_id, "partition_no": self.partition}
        span = {"start_offset": group.start, "end_offset": group.end}
        expected = [(c.base_offset, c.record_count, c.object_key, c.purged)
                    for c in (self.inputs[f.key] for f in group.files)]

        def work(tx: Tx) -> bool:
            locked = tx.one("lock_partition", **key)  # appends and retention of this partition wait
            if locked is None or locked.log_start_offset > group.start:
                return False  # deleted, or retention truncated into the group
            rows = tx.all("compaction_inputs_check", **key, **span)
            if [(r.base_offset, r.record_count, r.object_key, r.purged_ms is not None) for r in rows] != expected:
                return False  # a purge, a truncation or another compactor got there first
            tx.execute("queue_compacted_objects", **key, **span)
            tx.execute("delete_compacted_segments", **key, **span)
            tx.execute("insert_compacted_segment", **key, base_offset=group.start,
                       record_count=group.end - group.start, size_bytes=output.size_bytes,
                       object_key=output.object_key, max_timestamp_ms=output.max_timestamp_ms,
                       row_count=output.row_count, schema_version=self.topic.schema_version)
            return True

        return bool(self.db.run(work))

    def discard(self, output: MergedSegment) -> None:
        self.store.delete([output.object_key])  # never registered: no reader knows it


def compact_partition(db: Database, store: ObjectStore, topic: TopicMeta, partition: int, settings: Settings,
                      report: CompactionReport, *, min_age_ms: int | None = None) -> None:
    """Compact one partition (module docstring), adding what was done to ``report``."""
    target, lag = topic_target(topic, settings)
    found = db.read(partial(candidates, topic_id=topic.topic_id, partition=partition,
                            min_age_ms=lag if min_age_ms is None else min_age_ms))
    report.partitions_checked += 1
    overheads = _overheads(topic, found)
    # a version made after the topic was looked up: its size as stored (such a group is skipped below)
    groups = plan_rewrite([_file(c, overheads.get(c.schema_version, 0)) for c in found], target)
    if not groups:
        return
    by_key = {c.object_key: c for c in found}
    compacted = False
    for group in groups:
        inputs = [by_key[k] for k in group.keys]
        if any(c.schema_version not in topic.versions for c in inputs):
            continue  # written in a schema version made after the topic was looked up: next run
        span = group.end - group.start
        kept = sum(c.row_count if c.row_count is not None else c.record_count for c in inputs if c.committed)
        if report.dry_run:
            report.segments_written += 1
            report.segments_replaced += len(inputs)
            report.bytes_replaced += sum(c.size_bytes for c in inputs if not c.purged)
            report.records += kept
            report.aborted_records_dropped += span - kept
            continue
        result = run_rewrite(SegmentTarget(db, store, topic, partition, inputs, settings.retry_budget_ms), group)
        if result.conflict:
            report.conflicts += 1
            log.info("compaction of %s-%d offsets %d..%d: its inputs changed meanwhile; left for the next run",
                     topic.name, partition, group.start, group.end - 1)
            continue
        if not result.swapped or result.output is None:
            continue
        compacted = True
        report.segments_written += 1
        report.segments_replaced += len(inputs)
        report.bytes_replaced += sum(c.size_bytes for c in inputs if not c.purged)
        report.bytes_written += result.output.size_bytes
        report.records += result.rows
        report.aborted_records_dropped += span - result.rows
        log.info("compaction: %s-%d offsets %d..%d, %d segments -> 1 (%d records)", topic.name, partition,
                 group.start, group.end - 1, len(inputs), result.rows)
    if compacted or (report.dry_run and groups):
        report.partitions_compacted += 1


def compact(db: Database, store: ObjectStore, settings: Settings, topics: Callable[[str], TopicMeta],
            names: Sequence[str] | None = None, *, dry_run: bool = False, min_age_ms: int | None = None,
            progress: Progress | None = None) -> CompactionReport:
    """Compact every partition of the topics ``names`` (None: of every topic). ``topics``
    looks a topic up by name (UnknownTopicOrPartitionError for an unknown one). Safe next
    to producers, consumers, gc and other compactions; a swap whose inputs changed is left
    for the next run."""
    say = progress or (lambda _message: None)
    report = CompactionReport(dry_run=dry_run)
    known: dict[str, TopicMeta] = {}
    if names is not None:
        known = {n: topics(n) for n in names}  # unknown names fail first
    wanted = None if names is None else set(known)
    after = (-1, -1)
    total = db.read(lambda tx: int(tx.scalar("count_partitions")))
    done = 0
    while True:
        page = db.read(partial(partitions_page, after=after, limit=_PAGE))
        for p in page:
            done += 1
            if wanted is not None and p.topic not in wanted:
                continue
            if p.topic not in known:
                try:
                    known[p.topic] = topics(p.topic)
                except UnknownTopicOrPartitionError:
                    continue  # deleted meanwhile
            meta = known[p.topic]
            if meta.topic_id != p.topic_id:
                continue
            before = report.segments_replaced
            compact_partition(db, store, meta, p.partition_no, settings, report, min_age_ms=min_age_ms)
            if report.segments_replaced != before and meta.name not in report.topics:
                report.topics.append(meta.name)
            say(f"{done}/{total} partitions, {report.segments_replaced} segments merged into "
                f"{report.segments_written}")
        if len(page) < _PAGE:
            break
        after = (page[-1].topic_id, page[-1].partition_no)
    return report
