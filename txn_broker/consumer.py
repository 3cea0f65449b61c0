"""The consumer: assigned or subscribed partitions, positions, polling at an isolation
level, and offsets committed for a consumer group (the next offset to read, as in Kafka).

Polls are served from what an earlier poll already planned and decoded, as Kafka's
consumer serves small polls from fetched batches: a partition's plan (its segments up to
the isolation level's end, read in one database snapshot) stays valid until the position
reaches its end, and decoded segments stay in a bounded cache. A partition's current
segment is kept whole with its metadata columns (a block), which polls slice, and the
next one is loaded and decoded in the background meanwhile. Below the end a plan was
made with, nothing changes but deletion (retention, gc of aborted segments): a segment
found gone is re-planned once, as a fresh poll would.

Schema versions: every segment is read under the latest schema version the consumer
knows (txn_broker.log.projection), so a poll's records of one topic are all in one
version, however many versions the segments were written in. The consumer looks its
topics up again every ``metadata_max_age_ms`` (as Kafka's consumer does its metadata):
a newer schema version then applies from the next poll, and a subscription takes in
partitions added to its topics.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .database import Database, Tx
from .errors import (
    CorruptSegmentError,
    IllegalStateError,
    InvalidConfigError,
    InvalidInputError,
    OffsetOutOfRangeError,
    TxnBrokerError,
    UnknownTopicOrPartitionError,
)
from .log.partition import ISOLATION_LEVELS, READ_COMMITTED, PlannedSegment, check_offset, plan_fetch
from .log.reader import MetadataColumns, SegmentCache, fetch_segment, prefetch_pool, row_index, row_offsets
from .log.segment_format import read_schema
from .models import OffsetAndMetadata, TopicPartition
from .names import validate_id, validate_partition, validate_topic_name
from .storage import ObjectStore
from .topics import TopicMeta, Topics

if TYPE_CHECKING:
    from .metrics.client import ClientMetrics

RESETS = ("earliest", "latest", "none")

#: poll()'s default size: about this many bytes of decoded Arrow data (at least one
#: record), the role Kafka's fetch.max.bytes plays; ``max_records`` caps the count as
#: Kafka's max.poll.records does, and is unlimited unless given
DEFAULT_POLL_BYTES = 8 * 1024 * 1024


#: how often a consumer looks its topics up again (new schema versions, new partitions),
#: by default: Kafka's metadata.max.age.ms is 5 minutes; topics here change rarely too,
#: but a look-up is one small query
DEFAULT_METADATA_MAX_AGE_MS = 5_000

#: the metadata columns' constant arrays, shared by the process's consumers
_METADATA = MetadataColumns()


@dataclass
class _Block:
    """A whole decoded segment with its metadata columns, that polls slice."""

    key: str
    table: pa.Table
    #: the segment's average decoded bytes per record (what poll sizes are counted in)
    row_bytes: float
    #: its rows' offsets, for a compacted segment (offsets with gaps); None: consecutive
    offsets: np.ndarray | None = None
    #: the topic schema version the block was read in
    version: int = 1


@dataclass
class _Plan:
    """What one plan_fetch said about a partition: segments from ``position`` to ``end``."""

    position: int
    end: int
    segments: list[PlannedSegment]
    #: the first segment not read past yet
    index: int = 0
    #: the current segment's block, read from offsets [block_start, block_stop)
    block: pa.Table | None = None
    block_start: int = 0
    block_stop: int = 0
    row_bytes: float = 1.0
    block_offsets: np.ndarray | None = None
    block_version: int = 1


def committed_offsets(db: Database, topics: Topics, group_id: str, partitions: Iterable[TopicPartition]
                      ) -> dict[TopicPartition, OffsetAndMetadata | None]:
    """A group's committed offsets (the next offset to read) with their metadata; None
    where it has none."""
    validate_id("group id", group_id)
    tps = [TopicPartition(*tp) for tp in partitions]
    metas = {tp.topic: topics.get(tp.topic) for tp in tps}

    def work(tx: Tx) -> dict[TopicPartition, OffsetAndMetadata | None]:
        found: dict[tuple[str, int], OffsetAndMetadata] = {}
        for name, meta in metas.items():
            for r in tx.all("group_offsets_for_topic", group_id=group_id, topic_id=meta.topic_id):
                found[(name, r.partition_no)] = OffsetAndMetadata.from_columns(
                    r.committed_offset, r.metadata, r.leader_epoch)
        return {tp: found.get((tp.topic, tp.partition)) for tp in tps}

    return db.read(work)


def commit_offsets(db: Database, topics: Topics, group_id: str, offsets: Mapping[TopicPartition, object], *,
                   within_log: bool = True, check: Callable[[Tx], None] | None = None) -> None:
    """Commit a group's offsets outside any transaction: ints or OffsetAndMetadata values.
    ``within_log``: each offset must lie in [0, HW] (the Python API's check); else any
    offset >= 0 is kept, as Kafka's brokers keep it (a consumer resets by its own policy).
    ``check``: run last in the same database transaction, once the writes hold the offsets'
    rows (another commit of them waits until this one ends); what it raises writes nothing."""
    validate_id("group id", group_id)
    rows = []
    for tp, value in offsets.items():
        tp = TopicPartition(*tp)
        meta = topics.get(tp.topic)
        validate_partition(tp.partition, meta.partition_count, tp.topic)
        committed = OffsetAndMetadata.checked(value)
        if within_log:
            check_offset(db, meta.topic_id, meta.name, tp.partition, committed.offset)
        elif not isinstance(committed.offset, int) or isinstance(committed.offset, bool) or committed.offset < 0:
            raise InvalidInputError(f"offset must be a non-negative int, got {committed.offset!r}")
        rows.append({"group_id": group_id, "topic_id": meta.topic_id, "partition_no": tp.partition,
                     "committed_offset": int(committed.offset), "metadata": committed.metadata_column(),
                     "leader_epoch": committed.leader_epoch})
    rows.sort(key=lambda r: (r["topic_id"], r["partition_no"]))

    def write(tx: Tx) -> None:
        for r in rows:
            tx.execute("upsert_group_offset", **r)
        if check is not None:
            check(tx)

    db.run(write)


class Consumer:
    """Create with ``broker.consumer(group_id=None, isolation_level="read_committed",
    auto_offset_reset="earliest")``. Reads through the metadata database ``db``, the
    object store ``store`` and the topic lookup ``topics``."""

    def __init__(self, db: Database, store: ObjectStore, topics: Topics, group_id: str | None = None,
                 isolation_level: str = READ_COMMITTED, auto_offset_reset: str = "earliest", *,
                 metadata_max_age_ms: int = DEFAULT_METADATA_MAX_AGE_MS,
                 metrics: ClientMetrics | None = None) -> None:
        if isinstance(metadata_max_age_ms, bool) or not isinstance(metadata_max_age_ms, int) \
                or metadata_max_age_ms < 0:
            raise InvalidConfigError(f"metadata_max_age_ms must be a non-negative int, got {metadata_max_age_ms!r}")
        #: where the consumer reports what it polls (txn_broker.metrics.client); None: nowhere
        self._metrics = metrics
        if isolation_level not in ISOLATION_LEVELS:
            raise InvalidConfigError(f"isolation_level must be one of {ISOLATION_LEVELS}, got {isolation_level!r}")
        if auto_offset_reset not in RESETS:
            raise InvalidConfigError(f"auto_offset_reset must be one of {RESETS}, got {auto_offset_reset!r}")
        self._db = db
        self._topics = topics
        self.group_id = None if group_id is None else validate_id("group id", group_id)
        self.isolation_level = isolation_level
        self.auto_offset_reset = auto_offset_reset
        self._assignment: list[TopicPartition] = []
        self._meta: dict[str, TopicMeta] = {}
        self._positions: dict[TopicPartition, int] = {}
        self._cache = SegmentCache(store)
        self._plans: dict[TopicPartition, _Plan] = {}
        self._blocks: dict[TopicPartition, _Block] = {}
        self._metadata = _METADATA
        #: segment objects being fetched in the background, by object key
        self._prefetched: dict[str, Future[pa.Buffer]] = {}
        self._next = 0
        self._closed = False
        self.metadata_max_age_ms = metadata_max_age_ms
        #: subscribed topics (None: assigned partitions), which take in new partitions
        self._subscription: list[str] | None = None
        self._metadata_at = time.monotonic()

    # -- assignment ----------------------------------------------------------------------

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Read exactly these partitions (replaces the assignment)."""
        self._check_open()
        tps = []
        for tp in partitions:
            topic, partition = tp
            meta = self._topic(topic)
            validate_partition(partition, meta.partition_count, topic)
            tps.append(TopicPartition(topic, partition))
        self._subscription = None
        self._set_assignment(tps)

    def _set_assignment(self, tps: Iterable[TopicPartition]) -> None:
        self._assignment = sorted(set(tps))
        self._positions = {tp: p for tp, p in self._positions.items() if tp in self._assignment}
        self._plans = {tp: p for tp, p in self._plans.items() if tp in self._assignment}
        self._blocks = {tp: b for tp, b in self._blocks.items() if tp in self._assignment}

    def subscribe(self, topics: Iterable[str]) -> None:
        """Read every partition of these topics (no group rebalancing: this consumer gets
        them all)."""
        if isinstance(topics, str):
            topics = [topics]
        topics = list(topics)
        self.assign(TopicPartition(t, p) for t in topics for p in range(self._topic(t).partition_count))
        self._subscription = topics

    def assignment(self) -> list[TopicPartition]:
        return list(self._assignment)

    def _topic(self, name: str) -> TopicMeta:
        validate_topic_name(name)  # a typed error for a name that is not even a string
        meta = self._meta.get(name)
        if meta is None:
            meta = self._meta[name] = self._topics.get(name)
        return meta

    def _refresh(self, name: str) -> TopicMeta:
        """Look ``name`` up again (a newer schema version, more partitions)."""
        meta = self._meta[name] = self._topics.get(name, refresh=True)
        return meta

    def refresh_metadata(self) -> None:
        """Look the assigned topics up again now: a newer schema version applies from the
        next poll, and a subscription takes in partitions added to its topics. Polls do
        this every ``metadata_max_age_ms`` by themselves."""
        self._check_open()
        self._metadata_at = time.monotonic()
        for name in sorted({tp.topic for tp in self._assignment} | set(self._subscription or [])):
            try:
                self._refresh(name)
            except UnknownTopicOrPartitionError:
                continue  # deleted: reading it reports that, as before
        if self._subscription is not None:
            grown = [TopicPartition(t, p) for t in self._subscription for p in range(self._meta[t].partition_count)]
            if set(grown) != set(self._assignment):
                self._set_assignment(grown)

    def _in_version(self, topic: str, table: pa.Table, version: int) -> pa.Table:
        """Rows read in schema ``version`` of ``topic`` (with metadata columns) in the
        latest version this consumer knows (no work when it is the same)."""
        meta = self._topic(topic)
        if version == meta.schema_version:
            return table
        return meta.projection_from(version).apply(table)

    def _check_open(self) -> None:
        if self._closed:
            raise IllegalStateError("the consumer is closed")

    def _check_assigned(self, tp: TopicPartition) -> TopicPartition:
        tp = TopicPartition(*tp)
        if tp not in self._assignment:
            raise IllegalStateError(f"{tp.topic}-{tp.partition} is not assigned to this consumer")
        return tp

    # -- positions -----------------------------------------------------------------------

    def _initial_position(self, tp: TopicPartition) -> int:
        if self.group_id is not None:
            committed = self.committed([tp])[tp]
            if committed is not None:
                return committed
        return self._reset(tp)

    def _reset(self, tp: TopicPartition) -> int:
        meta = self._topic(tp.topic)
        offsets, _ = plan_fetch(self._db, meta.topic_id, tp.partition, None, self.isolation_level)
        if offsets is None:
            raise IllegalStateError(f"{tp.topic}-{tp.partition} was deleted")
        if self.auto_offset_reset == "earliest":
            return offsets.log_start_offset
        if self.auto_offset_reset == "latest":
            return offsets.end(self.isolation_level)
        raise OffsetOutOfRangeError(f"no committed offset for {tp.topic}-{tp.partition} and auto_offset_reset=none")

    def position(self, tp: TopicPartition) -> int:
        """The offset of the next record this consumer will return from ``tp``."""
        self._check_open()
        tp = self._check_assigned(tp)
        if tp not in self._positions:
            self._positions[tp] = self._initial_position(tp)
        return self._positions[tp]

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Continue reading ``tp`` at ``offset`` (between log start and high watermark)."""
        self._check_open()
        tp = self._check_assigned(tp)
        meta = self._topic(tp.topic)
        check_offset(self._db, meta.topic_id, meta.name, tp.partition, offset, allow_below_start=False)
        self._positions[tp] = int(offset)
        self._plans.pop(tp, None)

    def seek_to_beginning(self, tps: Iterable[TopicPartition] | None = None) -> None:
        for tp in tps or self._assignment:
            tp = self._check_assigned(tp)
            meta = self._topic(tp.topic)
            offsets, _ = plan_fetch(self._db, meta.topic_id, tp.partition, None, self.isolation_level)
            assert offsets is not None
            self._positions[tp] = offsets.log_start_offset

    def seek_to_end(self, tps: Iterable[TopicPartition] | None = None) -> None:
        for tp in tps or self._assignment:
            tp = self._check_assigned(tp)
            meta = self._topic(tp.topic)
            offsets, _ = plan_fetch(self._db, meta.topic_id, tp.partition, None, self.isolation_level)
            assert offsets is not None
            self._positions[tp] = offsets.end(self.isolation_level)

    # -- polling -------------------------------------------------------------------------

    def poll(self, max_records: int | None = None, timeout_s: float = 0.0,
             max_bytes: int = DEFAULT_POLL_BYTES) -> pa.Table:
        """Records in offset order within each partition, with the columns ``_topic``,
        ``_partition``, ``_offset``, ``_timestamp`` then the topic's: about ``max_bytes``
        of decoded data (8 MiB by default; at least one record), and at most
        ``max_records`` records when given. read_committed returns records below the last
        stable offset only, and never those of aborted transactions. An empty table when
        nothing arrives within ``timeout_s``."""
        if self._metrics is None:
            return self._poll(max_records, timeout_s, max_bytes)
        try:
            table = self._poll(max_records, timeout_s, max_bytes)
        except TxnBrokerError as error:
            self._metrics.failed(error)
            raise
        if table.num_rows:
            topics = table.column("_topic").unique().to_pylist()
            for topic in topics:
                part = table if len(topics) == 1 else table.filter(pc.equal(table.column("_topic"), topic))
                self._metrics.polled(topic, part.num_rows, part.nbytes)
        return table

    def _poll(self, max_records: int | None, timeout_s: float, max_bytes: int) -> pa.Table:
        self._check_open()
        if max_records is not None and (not isinstance(max_records, int) or isinstance(max_records, bool)
                                        or max_records <= 0):
            raise InvalidConfigError(f"max_records must be a positive int or None, got {max_records!r}")
        if not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes <= 0:
            raise InvalidConfigError(f"max_bytes must be a positive int, got {max_bytes!r}")
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or math.isnan(timeout_s) \
                or timeout_s < 0:
            raise InvalidConfigError(f"timeout_s must be a non-negative number of seconds, got {timeout_s!r}")
        if not self._assignment:
            raise IllegalStateError("poll() needs assign() or subscribe() first")
        if (time.monotonic() - self._metadata_at) * 1000 >= self.metadata_max_age_ms:
            self.refresh_metadata()
        sliced = self._slice_current_block(max_records, max_bytes)
        if sliced is not None:
            return sliced
        deadline = time.monotonic() + float(timeout_s)
        delay = 0.02
        while True:
            saved = dict(self._positions)
            try:
                fetched = self._fetch(max_records, max_bytes)
            except BaseException:
                # records read from earlier partitions were never returned: do not skip them
                self._positions = saved
                raise
            if fetched or time.monotonic() >= deadline:
                break
            time.sleep(min(delay, max(deadline - time.monotonic(), 0)))
            delay = min(delay * 2, 0.25)
        if not fetched:
            return read_schema(self._topic(self._assignment[0].topic).reader_schema).empty_table()
        tables = [self._in_version(topic, table, version) for topic, table, version in fetched]
        if len(tables) == 1:
            return tables[0]
        if len({topic for topic, _, _ in fetched}) > 1:  # topics' columns differ: union them by name
            return pa.concat_tables(tables, promote_options="permissive")
        return pa.concat_tables(tables)

    def _slice_current_block(self, max_records: int | None, max_bytes: int) -> pa.Table | None:
        """The poll when the next partition's current block holds all of it (the common
        case of small polls): what :meth:`_fetch` would return, without its bookkeeping.
        None otherwise."""
        if max_records is None:
            return None
        n = len(self._assignment)
        tp = self._assignment[self._next % n]
        plan = self._plans.get(tp)
        if plan is None or plan.block is None or plan.block_version != self._topic(tp.topic).schema_version:
            return None
        position, offsets = plan.position, plan.block_offsets
        if not (plan.block_start <= position and max_records * plan.row_bytes <= max_bytes
                and self._positions.get(tp) == position):
            return None
        if offsets is None:
            row, available = position - plan.block_start, plan.block_stop - position
        else:  # a compacted segment: its rows' offsets have gaps
            row = row_index(offsets, plan.block_start, position)
            available = row_index(offsets, plan.block_start, plan.block_stop) - row
        if max_records > available:
            return None
        if offsets is None:
            after = position + max_records
        else:
            after = plan.block_stop if available == max_records else int(offsets[row + max_records - 1]) + 1
        plan.position = self._positions[tp] = after
        self._next = (self._next + 1) % n
        return plan.block.slice(row, max_records)

    def _fetch(self, max_records: int | None, max_bytes: int) -> list[tuple[str, pa.Table, int]]:
        """(topic, records, their schema version) of each partition read, taking turns
        between partitions."""
        fetched: list[tuple[str, pa.Table, int]] = []
        records = math.inf if max_records is None else max_records
        budget = [float(max_bytes)]  # spent by _read_plan
        n = len(self._assignment)
        for i in range(n):
            if records <= 0 or budget[0] <= 0:
                break
            tp = self._assignment[(self._next + i) % n]
            got = self._fetch_partition(tp, records, budget, first=not fetched)
            if got is not None and got[0].num_rows:
                fetched.append((tp.topic, *got))
                records -= got[0].num_rows
        self._next = (self._next + 1) % n
        return fetched

    def _plan(self, tp: TopicPartition, position: int | None) -> _Plan:
        """The partition's plan from ``position``: the one an earlier poll made while it
        still covers ``position``, else a new one (one database read). ``position`` None:
        the partition has no position yet and starts at its log start (no group offset,
        auto_offset_reset=earliest), found in the same read."""
        plan = self._plans.get(tp)
        if plan is not None and plan.position == position and position < plan.end:
            return plan
        meta = self._topic(tp.topic)
        offsets, segments = plan_fetch(self._db, meta.topic_id, tp.partition, position or 0,
                                       self.isolation_level)
        if offsets is None:
            raise IllegalStateError(f"{tp.topic}-{tp.partition} was deleted")
        if position is None:
            position = self._positions[tp] = offsets.log_start_offset
        elif position < offsets.log_start_offset or position > offsets.high_watermark:
            position = self._positions[tp] = self._reset(tp)  # out of range: reset like Kafka
            offsets, segments = plan_fetch(self._db, meta.topic_id, tp.partition, position,
                                           self.isolation_level)
            assert offsets is not None
        end = offsets.end(self.isolation_level)
        if segments:  # plan_fetch stops after max_segments: the plan covers what it listed
            end = min(end, segments[-1].end_offset)
        plan = self._plans[tp] = _Plan(position, end, segments)
        return plan

    def _fetch_partition(self, tp: TopicPartition, limit: float, budget: list[float], *,
                         first: bool) -> tuple[pa.Table, int] | None:
        for attempt in (1, 2):
            position = self._positions.get(tp)
            if position is None and (self.group_id is not None or self.auto_offset_reset != "earliest"):
                position = self.position(tp)
            plan = self._plan(tp, position)
            try:
                return self._read_plan(tp, plan, limit, budget, first=first)
            except CorruptSegmentError:
                # deleted since the plan was made (retention, gc): plan again, once
                del self._plans[tp]
                if attempt == 2:
                    raise
        return None

    def _read_plan(self, tp: TopicPartition, plan: _Plan, limit: float, budget: list[float], *,
                   first: bool) -> tuple[pa.Table, int] | None:
        """Up to ``limit`` records and about ``budget[0]`` bytes (spent here) from the plan:
        slices of the current segment's block, the next block loaded when one runs out;
        with the schema version they are in."""
        position, end = plan.position, plan.end
        parts: list[tuple[pa.Table, int]] = []
        try:
            while position < end and limit > 0 and budget[0] > 0:
                if not plan.block_start <= position < plan.block_stop:
                    position = self._next_block(tp, plan, position)
                    if position >= plan.block_stop:
                        break  # only skipped segments up to the plan's end
                offsets = plan.block_offsets
                if offsets is None:
                    row, available = position - plan.block_start, plan.block_stop - position
                else:  # a compacted segment: offsets have gaps (aborted records dropped)
                    row = row_index(offsets, plan.block_start, position)
                    available = row_index(offsets, plan.block_start, plan.block_stop) - row
                    if available <= 0:
                        position = plan.block_stop  # only gaps left in this block
                        continue
                count = min(available, int(min(limit, budget[0] // plan.row_bytes)))
                if count <= 0:
                    if parts or not first:
                        break
                    count = 1  # a poll returns at least one record, however large
                assert plan.block is not None
                parts.append((plan.block.slice(row, count), plan.block_version))
                if offsets is None:
                    position += count
                else:
                    position = plan.block_stop if count == available else int(offsets[row + count - 1]) + 1
                limit -= count
                budget[0] -= count * plan.row_bytes
        finally:
            plan.position = self._positions[tp] = position
        if not parts:
            return None
        if len(parts) == 1:
            return parts[0]
        version = max(v for _, v in parts)  # blocks read before a newer version was seen
        return pa.concat_tables([self._in_version(tp.topic, t, v) if v != version else t
                                 for t, v in parts]), version

    def _next_block(self, tp: TopicPartition, plan: _Plan, position: int) -> int:
        """Make the block of the plan's segment holding ``position`` current, moving past
        segments the isolation level skips; the position to read from. A block is a whole
        segment with its metadata columns, built once (and kept for the partition across
        plans), so that polls only slice it."""
        segments, i = plan.segments, plan.index
        while i < len(segments) and (segments[i].end_offset <= position
                                     or segments[i].skipped_at(self.isolation_level)):
            position = max(position, min(segments[i].end_offset, plan.end))
            i += 1
        plan.index = i
        plan.block, plan.block_start, plan.block_stop, plan.block_offsets = None, position, position, None
        if i == len(segments) or position >= plan.end:
            return position
        seg = segments[i]
        position = max(position, seg.base_offset)
        block = self._blocks.get(tp)
        if block is None or block.key != seg.object_key:
            if block is not None:
                self._cache.discard(block.key)  # read past (a seek back decodes it again)
            pending = self._prefetched.pop(seg.object_key, None)
            meta = self._topic(tp.topic)
            if seg.schema_version > meta.schema_version:  # written in a version made since
                meta = self._refresh(tp.topic)
            # the segment's rows in the latest version known, field ids off (readers' tables);
            # columns that version dropped are not even decoded
            projection = meta.projection_from(seg.schema_version)
            table = self._cache.get(seg, None if pending is None else pending.result, projection.dropped)
            self._prefetch(segments, i + 1)
            rows = projection.apply(table)
            block = self._blocks[tp] = _Block(seg.object_key, self._metadata.add(rows, tp.topic, tp.partition,
                                                                                seg.base_offset),
                                              max(table.nbytes / max(table.num_rows, 1), 1.0),
                                              row_offsets(table) if seg.has_gaps else None, meta.schema_version)
        plan.block, plan.block_start, plan.block_offsets = block.table, seg.base_offset, block.offsets
        plan.block_stop, plan.row_bytes = min(seg.end_offset, plan.end), block.row_bytes
        plan.block_version = block.version
        return position

    def _prefetch(self, segments: list[PlannedSegment], i: int) -> None:
        """Fetch the object of the first segment from ``segments[i]`` this consumer will
        read (not one its isolation level skips) in the background, while polls slice the
        current one: one segment ahead per partition, as Kafka's consumer fetches ahead.
        It is decoded when a poll reaches it, in the polling thread (decoding elsewhere
        costs more CPU: memory allocated by one thread and freed by another is reused
        less)."""
        while i < len(segments) and segments[i].skipped_at(self.isolation_level):
            i += 1
        if i == len(segments) or segments[i].object_key in self._prefetched:
            return
        if len(self._prefetched) > 2 * len(self._assignment):  # left by seeks: let them go
            self._prefetched.clear()
        self._prefetched[segments[i].object_key] = prefetch_pool().submit(fetch_segment, self._cache.store,
                                                                         segments[i])

    # -- group offsets -------------------------------------------------------------------

    def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        """The group's committed offsets (next offset to read); None where it has none
        (with their metadata: ``committed_metadata``)."""
        return {tp: None if c is None else c.offset for tp, c in self.committed_metadata(partitions).items()}

    def committed_metadata(self, partitions: Iterable[TopicPartition]
                           ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offsets with the metadata and leader epoch they were
        committed with; None where it has none."""
        self._check_open()
        group = self._require_group()
        return committed_offsets(self._db, self._topics, group, partitions)

    def commit(self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None = None) -> None:
        """Commit ``offsets`` (default: the current positions) for the group, outside any
        transaction. Use Producer.send_offsets_to_transaction for exactly-once."""
        self._check_open()
        group = self._require_group()
        if offsets is None:
            offsets = dict(self._positions)
        commit_offsets(self._db, self._topics, group, {TopicPartition(*tp): o for tp, o in offsets.items()})

    def _require_group(self) -> str:
        if self.group_id is None:
            raise IllegalStateError("this consumer has no group_id")
        return self.group_id

    def close(self) -> None:
        self._closed = True
        for pending in self._prefetched.values():
            pending.cancel()
        self._prefetched.clear()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
