"""Garbage collection: deleting the objects no reader can need any more.

``collect_garbage(db, store, settings)`` does five things, each idempotent and safe to run while
producers, consumers and other gc runs are active:

1. **Aborted transactions.** The segments of an aborted transaction are *purged*: their
   rows stay, so their offsets remain occupied and no offset moves, but they are marked so
   that readers at every isolation level skip them without loading their object, and
   their objects are queued for deletion.
2. **Retention** (topic configs ``retention.ms`` and ``retention.bytes``,
   :mod:`txn_broker.log.truncation`). Whole segments at the head of a partition are
   truncated, as in Kafka: the partition's log start offset
   moves past them and their rows are deleted, and their objects are queued for deletion.
   A segment goes only when every segment before it goes too, when it breaches retention
   (its newest record is older than ``retention.ms``, or the partition stays at least
   ``retention.bytes`` without it) and when it ends at or below the partition's last stable
   offset: the log start never passes the last stable offset, so gc never truncates into a
   transaction that is still open, nor past records a read_committed reader has not been
   able to see yet. Group offsets below the new log start stay as they are; consumers reset
   them (Kafka's out-of-range semantics).
3. **Compaction** (topic configs ``segment.bytes`` and ``min.compaction.lag.ms``,
   :mod:`txn_broker.compaction`). Runs of small committed segments below the last stable
   offset are merged into segments of about ``segment.bytes``, without the records of
   aborted transactions; the merged segments' objects are queued for deletion.
4. **The deletion queue.** Queued objects are deleted once they have waited
   ``delete_delay_ms`` (default 60 s, Kafka's ``file.delete.delay.ms``), so that a reader
   that planned its fetch just before the metadata changed can still load them.
5. **Orphans**: objects under ``topics/`` that no metadata references (see
   :mod:`txn_broker.orphans`), once older than ``orphan_grace_ms``.
6. **Iceberg warehouse orphans**: files under ``iceberg/`` (the default Iceberg catalog's
   warehouse) that no table references, once older than ``orphan_grace_ms``
   (:mod:`txn_broker.iceberg.warehouse`; only when there is such a warehouse).

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
from typing import Any

from .compaction import compact as compact_topics
from .config import Settings
from .database import Database, Tx
from .errors import InvalidConfigError
from .iceberg.settings import WAREHOUSE_PREFIX
from .log.partition import partitions_page
from .log.truncation import LogTruncation, Retention, truncate_partition
from .orphans import Orphan, db_now_ms, default_grace_ms, find_orphans
from .storage import ObjectStore
from .topics import Topics

log = logging.getLogger(__name__)

#: how long a queued object is kept after its metadata changed (Kafka's file.delete.delay.ms)
DEFAULT_DELETE_DELAY_MS = 60_000
_PAGE = 500
_DELETE_BATCH = 1000

Progress = Callable[[str], None]


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
    #: compaction (txn_broker/compaction.py): small segments merged, their objects queued
    compacted_segments: int = 0
    compacted_bytes: int = 0
    #: merged segments written (dry run: planned)
    compaction_outputs: int = 0
    #: merges refused because their inputs changed meanwhile (left for the next run)
    compaction_conflicts: int = 0
    #: files under iceberg/ no table references, older than the grace period, deleted
    iceberg_orphans_deleted: int = 0
    iceberg_orphan_bytes: int = 0
    #: ... younger than the grace period (a publisher's files not committed yet), kept
    iceberg_orphans_within_grace: int = 0

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def collect_garbage(db: Database, store: ObjectStore, settings: Settings, *, dry_run: bool = False,
                    orphan_grace_ms: int | None = None, delete_delay_ms: int = DEFAULT_DELETE_DELAY_MS,
                    progress: Progress | None = None, compact: bool = True) -> GcReport:
    """Run every gc step (module docstring) and report what was done.

    ``orphan_grace_ms``: unregistered objects younger than this are kept (default
    :func:`txn_broker.orphans.default_grace_ms`: at least a day). ``delete_delay_ms``:
    how long queued objects wait. ``dry_run``: change nothing, report what would be done.
    ``compact``: also merge small segments (step 3 of the module docstring).
    Raises InvalidConfigError for negative durations; DatabaseUnavailableError or
    StorageUnavailableError (retriable: whatever was done stays done, the rest is picked
    up by the next run)."""
    grace = default_grace_ms(settings) if orphan_grace_ms is None else _duration("orphan_grace_ms", orphan_grace_ms)
    delay = _duration("delete_delay_ms", delete_delay_ms)
    say = progress or (lambda _message: None)
    report = GcReport(dry_run=dry_run, orphan_grace_ms=grace, delete_delay_ms=delay)
    say("purging aborted transactions")
    _purge_aborted(db, report)
    say("applying retention")
    _apply_retention(db, report, say)
    if compact:
        say("compacting small segments")
        _compact(db, store, settings, report, say)
    say("deleting queued objects")
    _delete_queued(db, store, report)
    say("looking for orphan objects")
    _delete_orphans(db, store, report, say)
    _delete_warehouse_orphans(db, store, report, say)
    log.info("gc%s: %s", " (dry run)" if dry_run else "", json.dumps(report.to_dict()))
    return report


def _duration(name: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InvalidConfigError(f"{name} must be a non-negative number of milliseconds, got {value!r}")
    return value


# -- 1. aborted transactions --------------------------------------------------------------


def _purge_aborted(db: Database, report: GcReport) -> None:
    after = (-1, -1, -1)
    while True:

        def page(tx: Tx, a: tuple[int, int, int] = after) -> list[Any]:
            return tx.all("unpurged_aborts", after_txn_id=a[0], after_topic_id=a[1],
                          after_partition_no=a[2], limit=_PAGE)

        entries = db.read(page)
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

        segments, size = db.read(purge) if report.dry_run else db.run(purge)
        report.aborted_segments += segments
        report.aborted_bytes += size
        if len(entries) < _PAGE:
            return
        last = entries[-1]
        after = (last.txn_id, last.topic_id, last.partition_no)


# -- 2. retention -------------------------------------------------------------------------


def _apply_retention(db: Database, report: GcReport, say: Progress) -> None:
    after = (-1, -1)
    done = 0
    while True:
        page = db.read(partial(partitions_page, after=after, limit=_PAGE))
        for p in page:
            retention = Retention.of(p.config)
            if not retention.limited:
                continue
            truncation = truncate_partition(db, p.topic_id, p.topic, p.partition_no, retention,
                                            dry_run=report.dry_run)
            if truncation is not None:
                report.retention_segments += truncation.segments
                report.retention_bytes += truncation.size_bytes
                report.truncations.append(truncation)
        done += len(page)
        if len(page) < _PAGE:
            return
        say(f"applying retention: {done} partitions checked")
        after = (page[-1].topic_id, page[-1].partition_no)


# -- 3. compaction ------------------------------------------------------------------------


def _compact(db: Database, store: ObjectStore, settings: Settings, report: GcReport, say: Progress) -> None:
    topics = Topics(db, settings)
    done = compact_topics(db, store, settings, partial(topics.get, refresh=True), dry_run=report.dry_run,
                          progress=lambda message: say(f"compacting: {message}"))
    report.compacted_segments += done.segments_replaced
    report.compacted_bytes += done.bytes_replaced
    report.compaction_outputs += done.segments_written
    report.compaction_conflicts += done.conflicts


# -- 4. the deletion queue ----------------------------------------------------------------


def _delete_queued(db: Database, store: ObjectStore, report: GcReport) -> None:
    delay = report.delete_delay_ms
    if report.dry_run:
        report.objects_deleted = int(db.read(
            lambda tx: tx.scalar("due_object_deletion_count", delay_ms=delay)))
    else:
        while True:

            def due_page(tx: Tx) -> list[Any]:
                return tx.all("due_object_deletions", delay_ms=delay, limit=_DELETE_BATCH)

            due = db.read(due_page)
            if not due:
                break
            keys = [r.object_key for r in due]
            store.delete(keys)  # absent keys are ignored: a retry after a crash is fine
            rows: list[Mapping[str, Any]] = [{"object_key": k} for k in keys]

            def forget(tx: Tx, rows: list[Mapping[str, Any]] = rows) -> None:
                tx.execute_many("forget_object_deletion", rows)

            db.run(forget)
            report.objects_deleted += len(keys)
    report.objects_waiting = int(db.read(lambda tx: tx.scalar("waiting_object_deletions", delay_ms=delay)))


# -- 5. orphans ---------------------------------------------------------------------------


def _delete_orphans(db: Database, store: ObjectStore, report: GcReport, say: Progress) -> None:
    batch: list[Orphan] = []

    def delete(orphans: list[Orphan]) -> None:
        if not report.dry_run and orphans:
            store.delete([o.key for o in orphans])
            for o in orphans:
                log.info("deleted orphan object %s (%d bytes, %d ms old)", o.key, o.size, o.age_ms)
        report.orphans_deleted += len(orphans)
        report.orphan_bytes += sum(o.size for o in orphans)

    for orphan in find_orphans(db, store, db_now_ms(db)):
        if orphan.age_ms < report.orphan_grace_ms:
            report.orphans_within_grace += 1
            continue
        batch.append(orphan)
        if len(batch) >= _DELETE_BATCH:
            delete(batch)
            batch = []
            say(f"orphans: {report.orphans_deleted} deleted so far")
    delete(batch)


# -- 6. Iceberg warehouse orphans ---------------------------------------------------------


def _delete_warehouse_orphans(db: Database, store: ObjectStore, report: GcReport, say: Progress) -> None:
    if next(iter(store.list(WAREHOUSE_PREFIX)), None) is None:
        return  # no default Iceberg catalog here: nothing to read pyiceberg for
    say("looking for Iceberg warehouse orphans")
    from .iceberg.catalog import open_catalog
    from .iceberg.settings import IcebergSettings
    from .iceberg.warehouse import find_warehouse_orphans

    catalog = open_catalog(IcebergSettings(), db.url.render_as_string(hide_password=False), store)
    try:
        due = []
        for orphan in find_warehouse_orphans(catalog, store, db_now_ms(db)):
            if orphan.age_ms < report.orphan_grace_ms:
                report.iceberg_orphans_within_grace += 1
            else:
                due.append(orphan)
        if due and not report.dry_run:
            store.delete([o.key for o in due])
            for o in due:
                log.info("deleted Iceberg orphan file %s (%d bytes, %d ms old)", o.key, o.size, o.age_ms)
        report.iceberg_orphans_deleted += len(due)
        report.iceberg_orphan_bytes += sum(o.size for o in due)
    finally:
        engine = getattr(catalog, "engine", None)
        if engine is not None:
            engine.dispose()
