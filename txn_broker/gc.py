"""Garbage collection: deleting the objects no reader can need any more.

``collect_garbage(broker)`` does four things, each idempotent and safe to run while
producers, consumers and other gc runs are active:

1. **Aborted transactions.** The segments of an aborted transaction are *purged*: their
   rows stay, so their offsets remain occupied and no offset moves, but they are marked so
   that readers at every isolation level skip them without loading their object, and
   their objects are queued for deletion.
2. **Retention** (topic configs ``retention.ms`` and ``retention.bytes``). Whole segments
   at the head of a partition are truncated, as in Kafka: the partition's log start offset
   moves past them and their rows are deleted, and their objects are queued for deletion.
   A segment goes only when every segment before it goes too, when it breaches retention
   (its newest record is older than ``retention.ms``, or the partition stays at least
   ``retention.bytes`` without it) and when it ends at or below the partition's last stable
   offset: the log start never passes the last stable offset, so gc never truncates into a
   transaction that is still open, nor past records a read_committed reader has not been
   able to see yet. Group offsets below the new log start stay as they are; consumers reset
   them (Kafka's out-of-range semantics).
3. **The deletion queue.** Queued objects are deleted once they have waited
   ``delete_delay_ms`` (default 60 s, Kafka's ``file.delete.delay.ms``), so that a reader
   that planned its fetch just before the metadata changed can still load them.
4. **Orphans**: objects under ``topics/`` that no metadata references (see
   :mod:`txn_broker.orphans`), once older than ``orphan_grace_ms``.

Order of operations: metadata first, in a database transaction, then objects. A crash
between the two leaves an object that is queued (deleted by the next run) or unreferenced
(an orphan for a later run); never a row pointing at a deleted object that a reader could
still be sent to. Committed data within retention and the segments of open transactions
are never touched: they are neither aborted, nor below the last stable offset, nor orphans.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from .database import Tx
from .errors import InvalidConfigError
from .fetch import partition_offsets
from .orphans import Orphan, db_now_ms, default_grace_ms, find_orphans

if TYPE_CHECKING:
    from .broker import Broker

log = logging.getLogger(__name__)

#: how long a queued object is kept after its metadata changed (Kafka's file.delete.delay.ms)
DEFAULT_DELETE_DELAY_MS = 60_000
_PAGE = 500
#: segments truncated per database transaction (keeps each partition lock short)
_TRUNCATE_BATCH = 1000
_DELETE_BATCH = 1000

Progress = Callable[[str], None]


@dataclass(frozen=True)
class LogTruncation:
    """Retention moved a partition's log start offset."""

    topic: str
    partition: int
    old_log_start_offset: int
    new_log_start_offset: int
    segments: int
    size_bytes: int


@dataclass
class GcReport:
    """What a gc run did (or, with ``dry_run``, would do). Counts per step; bytes are the
    segment sizes recorded in the metadata."""

    dry_run: bool
    orphan_grace_ms: int
    delete_delay_ms: int
    #: segments of aborted transactions purged (hidden from readers, objects queued)
    aborted_segments: int = 0
    aborted_bytes: int = 0
    #: segments truncated by retention (rows deleted, objects queued)
    retention_segments: int = 0
    retention_bytes: int = 0
    truncations: list[LogTruncation] = field(default_factory=list)
    #: queued objects deleted (dry run: due for deletion)
    objects_deleted: int = 0
    #: queued objects still waiting for their delete delay
    objects_waiting: int = 0
    #: unregistered objects older than the grace period deleted (dry run: that would be)
    orphans_deleted: int = 0
    orphan_bytes: int = 0
    #: unregistered objects younger than the grace period, kept
    orphans_within_grace: int = 0

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def collect_garbage(broker: Broker, *, dry_run: bool = False, orphan_grace_ms: int | None = None,
                    delete_delay_ms: int = DEFAULT_DELETE_DELAY_MS,
                    progress: Progress | None = None) -> GcReport:
    """Run every gc step (module docstring) and report what was done.

    ``orphan_grace_ms``: unregistered objects younger than this are kept (default
    :func:`txn_broker.orphans.default_grace_ms`: at least a day). ``delete_delay_ms``:
    how long queued objects wait. ``dry_run``: change nothing, report what would be done.
    Raises InvalidConfigError for negative durations; DatabaseUnavailableError or
    StorageUnavailableError (retriable: whatever was done stays done, the rest is picked
    up by the next run)."""
    grace = default_grace_ms(broker) if orphan_grace_ms is None else _duration("orphan_grace_ms", orphan_grace_ms)
    delay = _duration("delete_delay_ms", delete_delay_ms)
    say = progress or (lambda _message: None)
    report = GcReport(dry_run=dry_run, orphan_grace_ms=grace, delete_delay_ms=delay)
    say("purging aborted transactions")
    _purge_aborted(broker, report)
    say("applying retention")
    _apply_retention(broker, report, say)
    say("deleting queued objects")
    _delete_queued(broker, report)
    say("looking for orphan objects")
    _delete_orphans(broker, report, say)
    log.info("gc%s: %s", " (dry run)" if dry_run else "", json.dumps(report.to_dict()))
    return report


def _duration(name: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InvalidConfigError(f"{name} must be a non-negative number of milliseconds, got {value!r}")
    return value


def partitions_page(tx: Tx, after: tuple[int, int]) -> list[Any]:
    """One page of partitions (with topic name and config) after ``(topic_id, partition)``."""
    return tx.all("partitions_page", after_topic_id=after[0], after_partition_no=after[1], limit=_PAGE)


# -- 1. aborted transactions --------------------------------------------------------------


def _purge_aborted(broker: Broker, report: GcReport) -> None:
    after = (-1, -1, -1)
    while True:

        def page(tx: Tx, a: tuple[int, int, int] = after) -> list[Any]:
            return tx.all("unpurged_aborts", after_txn_id=a[0], after_topic_id=a[1],
                          after_partition_no=a[2], limit=_PAGE)

        entries = broker.db.read(page)
        if not entries:
            return
        keys = [{"txn_id": e.txn_id, "topic_id": e.topic_id, "partition_no": e.partition_no} for e in entries]

        def purge(tx: Tx, keys: list[dict[str, int]] = keys) -> tuple[int, int]:
            segments = size = 0
            for key in keys:
                totals = tx.one("aborted_segment_totals", **key)
                assert totals is not None
                segments += totals.segment_count
                size += totals.size_bytes
                if not report.dry_run:
                    tx.execute("queue_aborted_objects", **key)
                    tx.execute("purge_aborted_segments", **key)
                    tx.execute("mark_abort_purged", **key)
            return segments, size

        segments, size = broker.db.read(purge) if report.dry_run else broker.db.run(purge)
        report.aborted_segments += segments
        report.aborted_bytes += size
        if len(entries) < _PAGE:
            return
        last = entries[-1]
        after = (last.txn_id, last.topic_id, last.partition_no)


# -- 2. retention -------------------------------------------------------------------------


@dataclass(frozen=True)
class _Retention:
    ms: int
    bytes: int

    @classmethod
    def of(cls, config_json: str) -> _Retention:
        config = json.loads(config_json)
        return cls(int(config.get("retention.ms", -1)), int(config.get("retention.bytes", -1)))

    @property
    def limited(self) -> bool:
        return self.ms > 0 or self.bytes > 0


def _apply_retention(broker: Broker, report: GcReport, say: Progress) -> None:
    after = (-1, -1)
    done = 0
    while True:
        page = broker.db.read(partial(partitions_page, after=after))
        for p in page:
            retention = _Retention.of(p.config)
            if retention.limited:
                _truncate_partition(broker, report, p.topic_id, p.topic, p.partition_no, retention)
        done += len(page)
        if len(page) < _PAGE:
            return
        say(f"applying retention: {done} partitions checked")
        after = (page[-1].topic_id, page[-1].partition_no)


def _truncate_partition(broker: Broker, report: GcReport, topic_id: int, topic: str, partition: int,
                        retention: _Retention) -> None:
    key = {"topic_id": topic_id, "partition_no": partition}
    first_start: int | None = None
    total_segments = total_bytes = 0
    last_start = None
    planned_start: int | None = None  # dry run: where the previous batch would have left off
    while True:

        def work(tx: Tx, planned_start: int | None = planned_start) -> tuple[int, int, int, int] | None:
            if not report.dry_run:
                tx.one("lock_partition", **key)  # appends to this partition wait for us
            offsets = partition_offsets(tx, topic_id, partition)
            if offsets is None:
                return None  # the topic was deleted meanwhile
            start = offsets.log_start_offset if planned_start is None else planned_start
            plan = _plan_truncation(tx, key, start, offsets.last_stable_offset, retention)
            if plan is None:
                return None
            new_start, segments, size = plan
            if not report.dry_run:
                moved = tx.execute("advance_log_start", new_start=new_start, old_start=start, **key)
                if moved != 1:
                    return None  # another gc moved it first
                tx.execute("queue_truncated_objects", new_start=new_start, **key)
                tx.execute("delete_truncated_segments", new_start=new_start, **key)
            return start, new_start, segments, size

        result = broker.db.read(work) if report.dry_run else broker.db.run(work)
        if result is None:
            break
        start, new_start, segments, size = result
        first_start = start if first_start is None else first_start
        last_start = new_start
        total_segments += segments
        total_bytes += size
        planned_start = new_start if report.dry_run else None
        if segments < _TRUNCATE_BATCH:
            break
    if first_start is not None and last_start is not None:
        report.retention_segments += total_segments
        report.retention_bytes += total_bytes
        report.truncations.append(LogTruncation(topic, partition, first_start, last_start, total_segments,
                                                total_bytes))
        log.info("retention: %s-%d log start %d -> %d (%d segments, %d bytes)", topic, partition,
                 first_start, last_start, total_segments, total_bytes)


def _plan_truncation(tx: Tx, key: dict[str, int], start: int, last_stable_offset: int,
                     retention: _Retention) -> tuple[int, int, int] | None:
    """Where the log start may move from ``start``: past the longest run of whole segments
    (at most ``_TRUNCATE_BATCH``) that breach retention and end at or below the last stable
    offset. ``(new_start, segments, bytes)``, or None when nothing may go."""
    now = int(tx.scalar("now_ms"))
    excess = None
    if retention.bytes > 0:
        excess = int(tx.scalar("partition_live_bytes", start_offset=start, **key)) - retention.bytes
    new_start, segments, size = start, 0, 0
    rows = tx.all("segments_page", after_offset=start - 1, limit=_TRUNCATE_BATCH, **key)
    for s in rows:
        if s.base_offset != new_start:
            break  # a gap in the metadata: leave it to fsck, never truncate across it
        end = s.base_offset + s.record_count
        if end > last_stable_offset:
            break
        live_size = 0 if s.purged_ms is not None else s.size_bytes
        by_time = retention.ms > 0 and now - s.max_timestamp_ms > retention.ms
        by_size = excess is not None and excess - live_size >= 0
        if not (by_time or by_size):
            break
        if excess is not None:
            excess -= live_size
        new_start, segments, size = end, segments + 1, size + live_size
    return (new_start, segments, size) if segments else None


# -- 3. the deletion queue ----------------------------------------------------------------


def _delete_queued(broker: Broker, report: GcReport) -> None:
    delay = report.delete_delay_ms
    if report.dry_run:
        report.objects_deleted = int(broker.db.read(
            lambda tx: tx.scalar("due_object_deletion_count", delay_ms=delay)))
    else:
        while True:

            def due_page(tx: Tx) -> list[Any]:
                return tx.all("due_object_deletions", delay_ms=delay, limit=_DELETE_BATCH)

            due = broker.db.read(due_page)
            if not due:
                break
            keys = [r.object_key for r in due]
            broker.store.delete(keys)  # absent keys are ignored: a retry after a crash is fine
            rows: list[Mapping[str, Any]] = [{"object_key": k} for k in keys]

            def forget(tx: Tx, rows: list[Mapping[str, Any]] = rows) -> None:
                tx.execute_many("forget_object_deletion", rows)

            broker.db.run(forget)
            report.objects_deleted += len(keys)
    report.objects_waiting = int(broker.db.read(lambda tx: tx.scalar("waiting_object_deletions", delay_ms=delay)))


# -- 4. orphans ---------------------------------------------------------------------------


def _delete_orphans(broker: Broker, report: GcReport, say: Progress) -> None:
    batch: list[Orphan] = []

    def delete(orphans: list[Orphan]) -> None:
        if not report.dry_run and orphans:
            broker.store.delete([o.key for o in orphans])
            for o in orphans:
                log.info("deleted orphan object %s (%d bytes, %d ms old)", o.key, o.size, o.age_ms)
        report.orphans_deleted += len(orphans)
        report.orphan_bytes += sum(o.size for o in orphans)

    for orphan in find_orphans(broker, db_now_ms(broker)):
        if orphan.age_ms < report.orphan_grace_ms:
            report.orphans_within_grace += 1
            continue
        batch.append(orphan)
        if len(batch) >= _DELETE_BATCH:
            delete(batch)
            batch = []
            say(f"orphans: {report.orphans_deleted} deleted so far")
    delete(batch)
