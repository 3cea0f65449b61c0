"""The publisher: a topic's committed records into its Iceberg table, exactly once.

One publish of a topic:

0. **The schema.** The table's schema follows the topic's latest schema version by field
   id (:mod:`.evolution`), before any file is written: the snapshot that first holds
   rows of a new version has the new schema.
1. **Where the table stands.** The table's current snapshot (or, if another writer
   added snapshots without it, its nearest ancestor that has one) records in its summary,
   under ``txn-broker.offsets``, the next offset of every partition it holds.
2. **The cut.** Every partition's last stable offset is read in one database snapshot and
   lowered where needed so that no committed transaction is cut (:mod:`txn_broker.log.cut`):
   each partition's range ``[published, cut)`` then holds whole transactions only.
3. **The files.** Each partition's committed records of its range (read_committed: the
   segments of aborted transactions are never read) are written as Parquet data files of
   about ``iceberg.target.file.bytes``, ``iceberg.publish.threads`` partitions at a time.
   If any partition fails, the files already written are deleted and its error is raised:
   no commit.
4. **The commit.** One snapshot appends them all, its summary recording the new offsets.
   The commit asserts that the table's current snapshot is still the one read in step 1
   (Iceberg's optimistic commit; pyiceberg's own retry is switched off for these tables):
   if another publisher committed first, this one's files are deleted (what a crash leaves
   is gc's) and it starts again from step 1 with the winner's offsets.

5. **Retention.** Data files whose records all lie below their partition's log start
   offset (gc truncated the topic there) are removed from the table by one more snapshot
   (Iceberg's delete of whole files; its summary keeps the same offsets). A file that
   straddles the log start stays until all of its records are below it.

6. **History.** Snapshots older than ``iceberg.snapshot.max.age.ms`` are expired
   (:mod:`.history`); gc deletes the files only they needed.

A publisher that dies anywhere leaves the table at its last commit; the next publish
resumes from that commit's offsets, so no record is published twice or skipped.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ..database import Database, Tx
from ..errors import (
    IcebergCommitConflictError,
    InvalidConfigError,
    TxnBrokerError,
    UnknownTopicOrPartitionError,
)
from ..faults import fault_point
from ..log.cut import atomic_ends
from ..log.field_ids import METADATA_FIELD_IDS
from ..log.partition import partition_offsets
from ..log.scan import scan_partition
from ..storage import ObjectStore
from ..topics import TopicMeta, Topics
from .catalog import TOPIC_ID_PROPERTY, catalog_call, catalog_error, ensure_table, open_catalog
from .evolution import evolve_table, table_schema_version
from .files import WrittenFile, conform, write_data_file
from .schema import table_schema
from .settings import IcebergSettings

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

log = logging.getLogger(__name__)

#: the snapshot summary key holding ``{partition: next offset}`` (JSON) of what the table holds
OFFSETS_PROPERTY = "txn-broker.offsets"
#: how many times one publish starts again after losing a commit race
MAX_ATTEMPTS = 5


@dataclass
class TopicPublish:
    """What one publish of a topic did. ``offsets``: the next offset per partition the
    table holds afterwards; ``snapshot_id``: the snapshot committed (None: nothing new)."""

    topic: str
    table: str
    offsets: dict[int, int]
    snapshot_id: int | None = None
    rows: int = 0
    files: int = 0
    bytes: int = 0
    attempts: int = 1
    elapsed_ms: int = 0
    #: data files removed from the table because retention truncated the topic below them
    expired_files: int = 0
    #: groups of small data files rewritten into one file each (replace snapshots)
    rewritten_groups: int = 0
    #: old snapshots expired (topic configs iceberg.snapshot.max.age.ms and .min.keep)
    expired_snapshots: int = 0
    partitions: dict[int, dict[str, int]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "table": self.table, "snapshot_id": self.snapshot_id, "rows": self.rows,
                "files": self.files, "bytes": self.bytes, "attempts": self.attempts, "elapsed_ms": self.elapsed_ms,
                "expired_files": self.expired_files, "rewritten_groups": self.rewritten_groups,
                "expired_snapshots": self.expired_snapshots,
                "offsets": {str(p): o for p, o in sorted(self.offsets.items())}}


def published_offsets(table: Table) -> dict[int, int]:
    """``{partition: next offset}`` the table holds: from its current snapshot's summary,
    or its nearest ancestor's that has one; empty for a table nothing was published to."""
    snapshot = table.current_snapshot()
    while snapshot is not None:
        text = (snapshot.summary.additional_properties if snapshot.summary else {}).get(OFFSETS_PROPERTY)
        if text is not None:
            return {int(p): int(o) for p, o in json.loads(text).items()}
        parent = snapshot.parent_snapshot_id
        snapshot = table.snapshot_by_id(parent) if parent is not None else None
    return {}


def _log_starts(tx: Tx, meta: TopicMeta) -> dict[int, int]:
    out = {}
    for p in range(meta.partition_count):
        offsets = partition_offsets(tx, meta.topic_id, p)
        if offsets is not None:
            out[p] = offsets.log_start_offset
    return out


def offsets_summary(offsets: dict[int, int]) -> str:
    return json.dumps({str(p): o for p, o in sorted(offsets.items())}, separators=(",", ":"))


def consistent_cut(db: Database, meta: TopicMeta, published: dict[int, int]) -> dict[int, tuple[int, int]]:
    """``{partition: (start, end)}``: from what the table holds (or the log start, when
    retention removed what was not published yet) to the partition's last stable offset,
    lowered so that no committed transaction is cut; all read in one snapshot."""

    def work(tx: Tx) -> dict[int, tuple[int, int]]:
        ranges: dict[tuple[int, int], tuple[int, int]] = {}
        for p in range(meta.partition_count):
            offsets = partition_offsets(tx, meta.topic_id, p)
            if offsets is None:
                raise UnknownTopicOrPartitionError(f"{meta.name}-{p} no longer exists")
            start = max(published.get(p, 0), offsets.log_start_offset)
            ranges[(meta.topic_id, p)] = (start, max(offsets.last_stable_offset, start))
        ends = atomic_ends(tx, ranges)
        return {p: (start, ends[(topic_id, p)]) for (topic_id, p), (start, _end) in ranges.items()}

    return db.read(work)


class Publisher:
    """Publishes topics with ``iceberg.enabled`` to their tables. One catalog connection,
    opened on first use; not thread-safe (one publisher per thread or process)."""

    def __init__(self, db: Database, store: ObjectStore, topics: Topics, settings: IcebergSettings,
                 database_url: str) -> None:
        self._db = db
        self._store = store
        self._topics = topics
        self.settings = settings
        self._database_url = database_url
        self._catalog: Catalog | None = None

    @property
    def catalog(self) -> Catalog:
        if self._catalog is None:
            self._catalog = open_catalog(self.settings, self._database_url, self._store)
        return self._catalog

    def close(self) -> None:
        """Release the catalog's connections (the default catalog's database pool)."""
        engine = getattr(self._catalog, "engine", None)
        if engine is not None:
            engine.dispose()
        self._catalog = None

    def enabled_topics(self, names: Iterable[str] | None = None) -> list[TopicMeta]:
        """The topics to publish: ``names`` (each must exist and have ``iceberg.enabled``,
        InvalidConfigError otherwise), or every topic that has it."""
        if names is None:
            metas = [self._topics.get(n, refresh=True) for n in self._topics.names()]
            return [m for m in metas if m.config.get("iceberg.enabled")]
        out = []
        for name in names:
            meta = self._topics.get(name, refresh=True)
            if not meta.config.get("iceberg.enabled"):
                raise InvalidConfigError(f"topic {name!r} does not have iceberg.enabled=true")
            out.append(meta)
        return out

    def table(self, meta: TopicMeta) -> Table:
        return ensure_table(self.catalog, self.settings, self._store, meta)

    def publish(self, meta: TopicMeta) -> TopicPublish:
        """Publish everything committed in ``meta``'s topic up to now (module docstring).
        Raises CatalogUnavailableError, DatabaseUnavailableError, StorageUnavailableError
        (retriable; nothing half-published), IcebergCommitConflictError after
        :data:`MAX_ATTEMPTS` lost races."""
        began = time.monotonic()
        table = self.table(meta)
        self._no_automatic_retry(table)
        name = f"{self.settings.namespace}.{meta.name}"
        from pyiceberg.exceptions import CommitFailedException

        for attempt in range(1, MAX_ATTEMPTS + 1):
            if attempt > 1:
                table = catalog_call(table.refresh, f"reload the table {name}")
                meta = self._topics.get(meta.name, refresh=True)
            if table_schema_version(table) > meta.schema_version:  # altered since meta was read
                meta = self._topics.get(meta.name, refresh=True)
            table, _evolved = evolve_table(table, meta)
            schema = table_schema(meta.schema)
            published = published_offsets(table)
            cut = consistent_cut(self._db, meta, published)
            after = {p: end for p, (_start, end) in cut.items()}
            result = TopicPublish(meta.name, name, after, attempts=attempt)
            if all(published.get(p) == end for p, end in after.items()):
                result.offsets = {p: published[p] for p in after}  # nothing new committed since
                result.expired_files = self.expire(table, meta)
                result.rewritten_groups = self.rewrite(table, meta, schema)
                result.expired_snapshots = self.expire_history(table, meta)
                result.elapsed_ms = int((time.monotonic() - began) * 1000)
                return result
            written: list[WrittenFile] = []
            try:
                self._write_partitions(table, schema, meta, cut, written)
            except UnknownTopicOrPartitionError:
                self._delete(table, written)
                if self._topics.get(meta.name, refresh=True).schema_version == meta.schema_version:
                    raise
                # a segment of a schema version newer than meta: the topic was altered
                # meanwhile; evolve the table to it and start again
                continue
            except BaseException:
                self._delete(table, written)  # nothing is committed; what a delete misses is gc's
                raise
            fault_point("iceberg.after_write")
            try:
                result.snapshot_id = self._commit(table, meta, written, after)
            except CommitFailedException:
                log.info("%s: another publisher committed first (attempt %d); starting again", name, attempt)
                self._delete(table, written)
                continue
            except TxnBrokerError:
                raise
            except Exception as error:
                # unknown outcome: the files stay (a committed snapshot may reference them;
                # if not, they are orphans for gc)
                raise catalog_error(error, f"commit to the table {name}") from None
            fault_point("iceberg.after_commit")
            # the commits below use ``table`` as each commit left it (pyiceberg updates a table
            # in place when it commits): no reload between them; a commit of another writer
            # meanwhile makes theirs fail harmlessly, to be tried at the next publish
            result.expired_files = self.expire(table, meta)
            result.rewritten_groups = self.rewrite(table, meta, schema)
            result.expired_snapshots = self.expire_history(table, meta)
            result.rows = sum(f.rows for f in written)
            result.files = len(written)
            result.bytes = sum(f.size_bytes for f in written)
            result.partitions = {p: {"start": s, "end": e} for p, (s, e) in cut.items() if s < e}
            result.elapsed_ms = int((time.monotonic() - began) * 1000)
            log.info("published %s: %d rows in %d files, offsets %s", name, result.rows, result.files, after)
            return result
        raise IcebergCommitConflictError(
            f"{name}: lost the commit race {MAX_ATTEMPTS} times to other publishers; try again")

    def evolve(self, meta: TopicMeta) -> bool:
        """Bring the topic's table to its latest schema version now (``alter_topic`` calls
        this; a publish does it too). Returns whether the table's schema changed."""
        fault_point("iceberg.before_evolve")
        return evolve_table(self.table(meta), meta)[1]

    def expire(self, table: Table, meta: TopicMeta) -> int:
        """Remove from the table, in one snapshot, the data files whose records all lie
        below their partition's log start offset; returns how many (0 also when another
        writer committed meanwhile: the next publish tries again)."""
        from pyiceberg.conversions import from_bytes
        from pyiceberg.exceptions import CommitFailedException
        from pyiceberg.types import LongType

        starts = self._db.read(partial(_log_starts, meta=meta))
        if not any(starts.values()) or table.current_snapshot() is None:
            return 0
        offset_id = METADATA_FIELD_IDS["_offset"]
        expired = []
        for task in catalog_call(lambda: list(table.scan().plan_files()), f"plan {table.name()}"):
            data_file = task.file
            partition = int(data_file.partition[0])
            upper = (data_file.upper_bounds or {}).get(offset_id)
            if upper is not None and int(from_bytes(LongType(), upper)) < starts.get(partition, 0):
                expired.append(data_file)
        if not expired:
            return 0
        properties = {OFFSETS_PROPERTY: offsets_summary(published_offsets(table)),
                      TOPIC_ID_PROPERTY: str(meta.topic_id), "txn-broker.retention": "expired"}

        def commit() -> bool:
            try:
                with table.transaction() as txn:
                    with txn.update_snapshot(snapshot_properties=properties).overwrite() as overwrite:
                        for data_file in expired:
                            overwrite.delete_data_file(data_file)
            except CommitFailedException:
                return False  # another writer committed first
            return True

        if not catalog_call(commit, f"expire files of {table.name()}"):
            return 0
        log.info("%s: %d data files below the log start removed", table.name(), len(expired))
        return len(expired)

    def expire_history(self, table: Table, meta: TopicMeta) -> int:
        """Expire the table's snapshots older than ``iceberg.snapshot.max.age.ms`` (keeping
        ``iceberg.snapshot.min.keep``; :mod:`.history`); returns how many."""
        from .history import expire_snapshots

        return expire_snapshots(table, meta, OFFSETS_PROPERTY)

    def rewrite(self, table: Table, meta: TopicMeta, schema: pa.Schema) -> int:
        """Rewrite groups of small data files into files of about the target size
        (:mod:`.small_files`); returns how many groups were swapped in."""
        from .small_files import rewrite_small_files

        if table.current_snapshot() is None:
            return 0
        properties = {OFFSETS_PROPERTY: offsets_summary(published_offsets(table)),
                      TOPIC_ID_PROPERTY: str(meta.topic_id)}
        return catalog_call(lambda: rewrite_small_files(table, schema, int(meta.config["iceberg.target.file.bytes"]),
                                                        properties), f"rewrite small files of {table.name()}")

    def _no_automatic_retry(self, table: Table) -> None:
        """pyiceberg retries a failed append on top of the winner's snapshot, which would
        publish the same offsets twice: the tables are made without it, and a table whose
        property was changed gets it back before anything is published."""
        if table.properties.get("commit.retry.num-retries") != "0":
            def reset() -> None:
                with table.transaction() as txn:
                    txn.set_properties({"commit.retry.num-retries": "0"})

            catalog_call(reset, f"set commit.retry.num-retries=0 on {table.name()}")

    def _write_partitions(self, table: Table, schema: pa.Schema, meta: TopicMeta,
                          cut: dict[int, tuple[int, int]], written: list[WrittenFile]) -> None:
        """Write every partition's range of ``cut``, ``iceberg.publish.threads`` partitions
        at a time: pyarrow releases the GIL while it decodes segments and writes Parquet, so
        one partition's reading can overlap another's writing. Each file is added to
        ``written`` as soon as it is stored. The first failure cancels the partitions not
        started, waits for the running ones and is raised as it is (a typed error of the
        reader or the storage); the caller then deletes ``written``."""
        ranges = [(p, start, end) for p, (start, end) in sorted(cut.items()) if start < end]
        threads = int(meta.config["iceberg.publish.threads"])
        if len(ranges) <= 1 or threads <= 1:
            for p, start, end in ranges:
                self._write_partition(table, schema, meta, p, start, end, written, decode_threads=True)
            return
        # each thread decompresses its own segments: pyarrow's pool would only compete with them
        with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="iceberg-write") as pool:
            futures = [pool.submit(self._write_partition, table, schema, meta, p, start, end, written,
                                   decode_threads=False) for p, start, end in ranges]
            done, _running = wait(futures, return_when=FIRST_EXCEPTION)
            failed = next((f for f in futures if f in done and f.exception() is not None), None)
            if failed is not None:
                for future in futures:
                    future.cancel()
                wait(futures)  # no thread is still writing when the caller deletes ``written``
                raise failed.exception()  # type: ignore[misc]

    def _write_partition(self, table: Table, schema: pa.Schema, meta: TopicMeta, partition: int,
                         start: int, end: int, written: list[WrittenFile], *, decode_threads: bool) -> None:
        target = int(meta.config["iceberg.target.file.bytes"])
        pending: list[pa.Table] = []
        pending_bytes = 0
        ratio = 1.0  # file bytes per in-memory byte, learnt from the files written so far

        def flush() -> None:
            nonlocal pending, pending_bytes, ratio
            rows = pa.concat_tables(pending)
            offsets = rows.column("_offset")
            first, last = offsets[0].as_py(), offsets[-1].as_py()
            done = write_data_file(table, schema, rows, partition, first, last + 1)
            ratio = max(done.size_bytes / max(rows.nbytes, 1), 0.01)
            written.append(done)
            pending, pending_bytes = [], 0

        versions = {number: v.schema for number, v in meta.versions.items()}
        for rows in scan_partition(self._db, self._store, meta.topic_id, meta.name, partition, start, end,
                                   schemas=versions, version=meta.schema_version, decode_threads=decode_threads):
            pending.append(conform(rows, schema))
            pending_bytes += pending[-1].nbytes
            if pending_bytes * ratio >= target:
                flush()
        if pending:
            flush()

    def _commit(self, table: Table, meta: TopicMeta, written: list[WrittenFile], offsets: dict[int, int]) -> int:
        from .transaction import transaction

        properties = {OFFSETS_PROPERTY: offsets_summary(offsets), TOPIC_ID_PROPERTY: str(meta.topic_id)}
        with transaction(table) as txn:
            with txn.update_snapshot(snapshot_properties=properties).fast_append() as append:
                for f in written:
                    append.append_data_file(f.data_file)
                snapshot_id = int(append.snapshot_id)
        return snapshot_id

    def _delete(self, table: Table, written: list[WrittenFile]) -> None:
        for f in written:
            try:
                table.io.delete(f.path)
            except Exception as error:  # left for gc's warehouse orphan scan
                log.info("could not delete %s after a lost commit race: %s", f.path, error)

