"""The consumer: assigned or subscribed partitions, positions, polling at an isolation
level, and offsets committed for a consumer group (the next offset to read, as in Kafka)."""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from .errors import IllegalStateError, InvalidConfigError, OffsetOutOfRangeError
from .fetch import ISOLATION_LEVELS, READ_COMMITTED, SegmentCache, plan_fetch, read_rows, with_metadata
from .models import TopicPartition
from .names import validate_id, validate_partition
from .records import read_schema

if TYPE_CHECKING:
    from .broker import Broker
    from .topics import TopicMeta

RESETS = ("earliest", "latest", "none")


class Consumer:
    """Create with ``broker.consumer(group_id=None, isolation_level="read_committed",
    auto_offset_reset="earliest")``."""

    def __init__(self, broker: Broker, group_id: str | None = None,
                 isolation_level: str = READ_COMMITTED, auto_offset_reset: str = "earliest") -> None:
        if isolation_level not in ISOLATION_LEVELS:
            raise InvalidConfigError(f"isolation_level must be one of {ISOLATION_LEVELS}, got {isolation_level!r}")
        if auto_offset_reset not in RESETS:
            raise InvalidConfigError(f"auto_offset_reset must be one of {RESETS}, got {auto_offset_reset!r}")
        self._broker = broker
        self.group_id = None if group_id is None else validate_id("group id", group_id)
        self.isolation_level = isolation_level
        self.auto_offset_reset = auto_offset_reset
        self._assignment: list[TopicPartition] = []
        self._meta: dict[str, TopicMeta] = {}
        self._positions: dict[TopicPartition, int] = {}
        self._cache = SegmentCache(broker.store)
        self._next = 0
        self._closed = False

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
        self._assignment = sorted(set(tps))
        self._positions = {tp: p for tp, p in self._positions.items() if tp in self._assignment}

    def subscribe(self, topics: Iterable[str]) -> None:
        """Read every partition of these topics (no group rebalancing: this consumer gets
        them all)."""
        if isinstance(topics, str):
            topics = [topics]
        self.assign(TopicPartition(t, p) for t in topics for p in range(self._topic(t).partition_count))

    def assignment(self) -> list[TopicPartition]:
        return list(self._assignment)

    def _topic(self, name: str) -> TopicMeta:
        meta = self._meta.get(name)
        if meta is None:
            meta = self._meta[name] = self._broker.topics.get(name)
        return meta

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
        offsets, _ = plan_fetch(self._broker.db, meta.topic_id, tp.partition, None, self.isolation_level)
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
        self._broker.check_offset(meta, tp.partition, offset, allow_below_start=False)
        self._positions[tp] = int(offset)

    def seek_to_beginning(self, tps: Iterable[TopicPartition] | None = None) -> None:
        for tp in tps or self._assignment:
            tp = self._check_assigned(tp)
            meta = self._topic(tp.topic)
            offsets, _ = plan_fetch(self._broker.db, meta.topic_id, tp.partition, None, self.isolation_level)
            assert offsets is not None
            self._positions[tp] = offsets.log_start_offset

    def seek_to_end(self, tps: Iterable[TopicPartition] | None = None) -> None:
        for tp in tps or self._assignment:
            tp = self._check_assigned(tp)
            meta = self._topic(tp.topic)
            offsets, _ = plan_fetch(self._broker.db, meta.topic_id, tp.partition, None, self.isolation_level)
            assert offsets is not None
            self._positions[tp] = offsets.end(self.isolation_level)

    # -- polling -------------------------------------------------------------------------

    def poll(self, max_records: int = 500, timeout_s: float = 0.0) -> pa.Table:
        """Up to ``max_records`` records, in offset order within each partition, with the
        columns ``_topic``, ``_partition``, ``_offset``, ``_timestamp`` then the topic's.
        read_committed returns records below the last stable offset only, and never
        those of aborted transactions. An empty table when nothing arrives in time."""
        self._check_open()
        if not isinstance(max_records, int) or isinstance(max_records, bool) or max_records <= 0:
            raise InvalidConfigError(f"max_records must be a positive int, got {max_records!r}")
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or math.isnan(timeout_s) \
                or timeout_s < 0:
            raise InvalidConfigError(f"timeout_s must be a non-negative number of seconds, got {timeout_s!r}")
        if not self._assignment:
            raise IllegalStateError("poll() needs assign() or subscribe() first")
        deadline = time.monotonic() + float(timeout_s)
        delay = 0.02
        while True:
            saved = dict(self._positions)
            try:
                tables = self._fetch(max_records)
            except BaseException:
                # records read from earlier partitions were never returned: do not skip them
                self._positions = saved
                raise
            if tables or time.monotonic() >= deadline:
                break
            time.sleep(min(delay, max(deadline - time.monotonic(), 0)))
            delay = min(delay * 2, 0.25)
        if len({t.schema for t in tables}) > 1 or not tables:
            schemas = {tp.topic: read_schema(self._topic(tp.topic).schema) for tp in self._assignment}
            if not tables:
                return next(iter(schemas.values())).empty_table()
            return pa.concat_tables(tables, promote_options="permissive")
        return pa.concat_tables(tables)

    def _fetch(self, max_records: int) -> list[pa.Table]:
        tables: list[pa.Table] = []
        remaining = max_records
        n = len(self._assignment)
        for i in range(n):
            if remaining <= 0:
                break
            tp = self._assignment[(self._next + i) % n]
            got = self._fetch_partition(tp, remaining)
            if got is not None and got.num_rows:
                tables.append(got)
                remaining -= got.num_rows
        self._next = (self._next + 1) % n
        return tables

    def _fetch_partition(self, tp: TopicPartition, limit: int) -> pa.Table | None:
        meta = self._topic(tp.topic)
        position = self.position(tp)
        offsets, segments = plan_fetch(self._broker.db, meta.topic_id, tp.partition, position,
                                       self.isolation_level)
        if offsets is None:
            raise IllegalStateError(f"{tp.topic}-{tp.partition} was deleted")
        if position < offsets.log_start_offset or position > offsets.high_watermark:
            position = self._positions[tp] = self._reset(tp)  # out of range: reset like Kafka
            offsets, segments = plan_fetch(self._broker.db, meta.topic_id, tp.partition, position,
                                           self.isolation_level)
            assert offsets is not None
        end = offsets.end(self.isolation_level)
        parts = []
        for seg in segments:
            if limit <= 0 or position >= end:
                break
            if seg.skipped_at(self.isolation_level):
                position = min(seg.end_offset, end)
                continue
            rows = read_rows(self._cache.get(seg), seg, position, min(end, position + limit))
            parts.append(with_metadata(rows, tp.topic, tp.partition, position))
            position += rows.num_rows
            limit -= rows.num_rows
        self._positions[tp] = position
        return pa.concat_tables(parts) if parts else None

    # -- group offsets -------------------------------------------------------------------

    def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        """The group's committed offsets (next offset to read); None where it has none."""
        self._check_open()
        group = self._require_group()
        return self._broker.committed_offsets(group, [TopicPartition(*tp) for tp in partitions])

    def commit(self, offsets: Mapping[TopicPartition, int] | None = None) -> None:
        """Commit ``offsets`` (default: the current positions) for the group, outside any
        transaction. Use Producer.send_offsets_to_transaction for exactly-once."""
        self._check_open()
        group = self._require_group()
        if offsets is None:
            offsets = dict(self._positions)
        self._broker.commit_offsets(group, {TopicPartition(*tp): o for tp, o in offsets.items()})

    def _require_group(self) -> str:
        if self.group_id is None:
            raise IllegalStateError("this consumer has no group_id")
        return self.group_id

    def close(self) -> None:
        self._closed = True

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
