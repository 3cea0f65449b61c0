"""fsck: check the metadata against object storage.

``check(db, store, settings)`` reports **problems** (inconsistencies: the broker may return wrong data
or fail to read) and **warnings** (orphan objects: unreferenced objects, which are gc's
business, not an inconsistency). Problem kinds, stable for scripts:

===================================  ==========================================================
``missing_object``                   a registered segment's object is not in storage
``size_mismatch``                    a segment's object size differs from its recorded size
``offset_gap``                       offsets of ``[log start, high watermark)`` no segment covers
``offset_overlap``                   offsets two segments cover, or a segment outside
                                     ``[log start, high watermark)``
``segment_without_transaction_entry``  a transactional segment whose transaction does not list
                                     its partition (readers would treat it as committed)
``marker_without_transaction``       a control marker (``txn_partitions`` row) whose
                                     transaction does not exist
``marker_outcome_mismatch``          a marker that disagrees with its transaction's outcome
===================================  ==========================================================

With topics that have ``iceberg.enabled``, each one's Iceberg table is checked against the
topic too (:mod:`txn_broker.iceberg.check`: ``iceberg_offsets_ahead``,
``iceberg_rows_beyond_offsets``, ``iceberg_offset_overlap``, ``iceberg_missing_file``).

Warning kind: ``orphan_object``. Segments purged by gc (aborted, object deleted) are not
expected in storage. Metadata is read in pages, one partition snapshot at a time; storage
is listed once per partition plus once for orphans. A segment registered or purged while
fsck runs is re-checked before it is reported, so fsck can run next to live traffic.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from .config import Settings
from .database import Database, Tx
from .log.keys import parse_segment_key, partition_prefix
from .log.partition import partition_offsets, partitions_page
from .orphans import db_now_ms, default_grace_ms, find_orphans
from .storage import ObjectInfo, ObjectStore

PROBLEM_KINDS = (
    "missing_object", "size_mismatch", "offset_gap", "offset_overlap",
    "segment_without_transaction_entry", "marker_without_transaction", "marker_outcome_mismatch",
    "iceberg_offsets_ahead", "iceberg_rows_beyond_offsets", "iceberg_offset_overlap", "iceberg_missing_file",
)
WARNING_KINDS = ("orphan_object",)
#: findings listed per kind; the rest are only counted
MAX_LISTED = 1000
_PAGE = 500


@dataclass(frozen=True)
class Finding:
    """One problem or warning. ``kind``: see the module docstring; ``message``: one line for
    people; the other fields locate it (None where they do not apply). ``size_bytes``: the
    segment's recorded size, or an orphan object's size; ``age_ms``: an orphan's age."""

    kind: str
    message: str
    topic: str | None = None
    partition: int | None = None
    object_key: str | None = None
    txn_id: int | None = None
    offset: int | None = None
    size_bytes: int | None = None
    age_ms: int | None = None


@dataclass
class FsckReport:
    """``problems``: inconsistencies; ``warnings``: orphans. ``counts``: findings per kind
    (``problems`` and ``warnings`` list at most :data:`MAX_LISTED` of each kind)."""

    problems: list[Finding] = field(default_factory=list)
    warnings: list[Finding] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    partitions_checked: int = 0
    segments_checked: int = 0
    objects_checked: int = 0

    @property
    def ok(self) -> bool:
        """No inconsistency (orphan warnings allowed)."""
        return not self.problems

    def add(self, finding: Finding) -> None:
        n = self.counts.get(finding.kind, 0)
        self.counts[finding.kind] = n + 1
        if n < MAX_LISTED:
            (self.warnings if finding.kind in WARNING_KINDS else self.problems).append(finding)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "problems": [dataclasses.asdict(f) for f in self.problems],
            "warnings": [dataclasses.asdict(f) for f in self.warnings],
            "counts": dict(self.counts),
            "partitions_checked": self.partitions_checked,
            "segments_checked": self.segments_checked,
            "objects_checked": self.objects_checked,
        }


@dataclass(frozen=True)
class _Stored:
    """A live (not purged) segment whose object must exist with this size."""

    key: str
    size: int
    offset: int
    txn_id: int | None


def check(db: Database, store: ObjectStore, settings: Settings, *,
          progress: Callable[[str], None] | None = None,
          iceberg: Callable[[], Iterable[tuple[str, int | None, str]]] | None = None) -> FsckReport:
    """Check every partition, the transaction markers and the store; never changes anything.
    ``iceberg``: the problems of the topics' Iceberg tables (the broker passes it when a
    topic has ``iceberg.enabled``).
    Raises DatabaseUnavailableError / StorageUnavailableError when it cannot read."""
    say = progress or (lambda _message: None)
    report = FsckReport()
    after = (-1, -1)
    while True:
        page = db.read(partial(partitions_page, after=after, limit=_PAGE))
        for p in page:
            _check_partition(db, store, report, p.topic_id, p.topic, p.partition_no)
            if report.partitions_checked % 100 == 0:
                say(f"checked {report.partitions_checked} partitions")
        if len(page) < _PAGE:
            break
        after = (page[-1].topic_id, page[-1].partition_no)
    say("checking transaction markers")
    _check_markers(db, report)
    say("looking for orphan objects")
    _check_orphans(db, store, settings, report)
    if iceberg is not None:
        say("checking Iceberg tables")
        for kind, partition, message in iceberg():
            report.add(Finding(kind, message, partition=partition))
    return report


def _check_partition(db: Database, store: ObjectStore, report: FsckReport, topic_id: int, topic: str,
                     partition: int) -> None:
    listed = {o.key: o for o in store.list(partition_prefix(topic_id, partition))}
    report.objects_checked += len(listed)
    where: dict[str, Any] = {"topic": topic, "partition": partition}
    key = {"topic_id": topic_id, "partition_no": partition}

    def snapshot(tx: Tx) -> tuple[list[Finding], list[_Stored], int]:
        findings: list[Finding] = []
        stored: list[_Stored] = []
        offsets = partition_offsets(tx, topic_id, partition)
        if offsets is None:
            return findings, stored, 0  # deleted meanwhile
        start, hw = offsets.log_start_offset, offsets.high_watermark
        expected = start
        count = 0
        after = -1
        while True:
            rows = tx.all("segments_page", after_offset=after, limit=_PAGE, **key)
            for s in rows:
                count += 1
                end = s.base_offset + s.record_count
                if s.base_offset > expected:
                    findings.append(Finding(
                        "offset_gap", f"{topic}-{partition}: no segment holds offsets {expected}.."
                        f"{s.base_offset - 1}", offset=expected, **where))
                elif s.base_offset < expected and not (expected == start and s.base_offset < start < end):
                    # (a segment holding the log start is fine: DeleteRecords moved it inside one)
                    what = (f"starts below the log start offset {start}" if s.base_offset < start else
                            f"overlaps the previous segment, which ends at {expected}")
                    findings.append(Finding(
                        "offset_overlap", f"{topic}-{partition}: segment {s.base_offset}..{end - 1} {what}",
                        object_key=s.object_key, offset=s.base_offset, **where))
                if end > hw:
                    findings.append(Finding(
                        "offset_overlap", f"{topic}-{partition}: segment {s.base_offset}..{end - 1} lies "
                        f"past the high watermark {hw}", object_key=s.object_key, offset=s.base_offset,
                        **where))
                if s.txn_id is not None and s.entry_txn_id is None:
                    findings.append(Finding(
                        "segment_without_transaction_entry",
                        f"{topic}-{partition}: segment {s.base_offset}..{end - 1} belongs to transaction "
                        f"{s.txn_id}, which does not list this partition", object_key=s.object_key,
                        txn_id=s.txn_id, offset=s.base_offset, **where))
                if s.purged_ms is None:
                    stored.append(_Stored(s.object_key, s.size_bytes, s.base_offset, s.txn_id))
                expected = max(expected, end)
            if len(rows) < _PAGE:
                break
            after = rows[-1].base_offset
        if expected < hw:
            findings.append(Finding(
                "offset_gap", f"{topic}-{partition}: no segment holds offsets {expected}..{hw - 1} "
                f"(high watermark {hw})", offset=expected, **where))
        return findings, stored, count

    findings, stored, count = db.read(snapshot)
    report.partitions_checked += 1
    report.segments_checked += count
    for finding in findings:
        report.add(finding)
    for s in stored:
        info: ObjectInfo | None = listed.get(s.key) or store.head(s.key)
        if info is None:
            if _still_live(db, s.key):
                report.add(Finding("missing_object", f"{topic}-{partition}: the object of segment at "
                                   f"offset {s.offset} is missing: {s.key}", object_key=s.key,
                                   offset=s.offset, txn_id=s.txn_id, size_bytes=s.size, **where))
        elif info.size != s.size:
            report.add(Finding("size_mismatch", f"{topic}-{partition}: object {s.key} is {info.size} "
                               f"bytes, its segment at offset {s.offset} records {s.size}",
                               object_key=s.key, offset=s.offset, txn_id=s.txn_id, size_bytes=s.size,
                               **where))


def _still_live(db: Database, key: str) -> bool:
    """Whether the segment is still registered and not purged (gc may have just removed it)."""
    row = db.read(lambda tx: tx.one("segment_state_by_key", object_key=key))
    return row is not None and row.purged_ms is None


def _topic_name(tx: Tx, topic_id: int) -> str | None:
    row = tx.one("get_topic_by_id", topic_id=topic_id)
    return row.name if row else None


def _check_markers(db: Database, report: FsckReport) -> None:
    def work(tx: Tx) -> list[Finding]:
        findings = []
        for r in tx.all("fsck_entries_without_transaction", limit=MAX_LISTED + 1):
            topic = _topic_name(tx, r.topic_id)
            findings.append(Finding(
                "marker_without_transaction",
                f"{topic}-{r.partition_no}: transaction {r.txn_id} has a partition entry "
                f"(marker {r.marker or 'none yet'}) but no transaction record",
                topic=topic, partition=r.partition_no, txn_id=r.txn_id))
        for r in tx.all("fsck_marker_outcome_mismatches", limit=MAX_LISTED + 1):
            topic = _topic_name(tx, r.topic_id)
            findings.append(Finding(
                "marker_outcome_mismatch",
                f"{topic}-{r.partition_no}: transaction {r.txn_id} of {r.transactional_id!r} has marker "
                f"{r.marker or 'none'} but outcome {r.outcome or 'none (open)'}",
                topic=topic, partition=r.partition_no, txn_id=r.txn_id))
        return findings

    for finding in db.read(work):
        report.add(finding)


def _check_orphans(db: Database, store: ObjectStore, settings: Settings, report: FsckReport) -> None:
    grace = default_grace_ms(settings)
    names: dict[int, str | None] = {}
    for orphan in find_orphans(db, store, db_now_ms(db)):
        topic, partition = None, None
        place = parse_segment_key(orphan.key)
        if place is not None:
            topic_id, partition = place
            if topic_id not in names:
                names[topic_id] = db.read(partial(_topic_name, topic_id=topic_id))
            topic = names[topic_id]
        when = ("older than the gc grace period: `txn-broker gc` deletes it" if orphan.age_ms >= grace else
                "within the gc grace period (possibly an upload not registered yet)")
        report.add(Finding("orphan_object", f"object {orphan.key} ({orphan.size} bytes, "
                           f"{orphan.age_ms // 1000} s old) is not referenced by any segment; {when}",
                           topic=topic, partition=partition, object_key=orphan.key, size_bytes=orphan.size,
                           age_ms=orphan.age_ms))
