"""Rewriting a table's small data files into larger ones: the shared planner and executor of
:mod:`txn_broker.rewrite`, with an Iceberg target. Each group of consecutive small files of
a partition becomes one file of about ``iceberg.target.file.bytes``, swapped in by one
snapshot that deletes the inputs and adds the output (the same rows, the same offsets: its
summary keeps ``txn-broker.offsets`` and says ``txn-broker.rewrite: replace``; Iceberg's own
``replace`` operation is what it is, but pyiceberg 0.12 writes it as ``overwrite``). The
commit fails if the table changed since it was read (another publish, an expiry, a second
rewrite), and the output is then deleted; the inputs stay in the table's older snapshots,
and gc deletes them once no retained snapshot references them.

A publisher that runs often writes a small file per partition per round; merging every
round would rewrite the same bytes again and again, so a group is rewritten once it has
:data:`MIN_INPUTS` files or reaches about the target size.

Each replace snapshot also merges the table's manifests (as Iceberg's ``merge_append``
does, for every manifest, not only from ``commit.manifest.min-count-to-merge`` on): a
publish's fast append adds one manifest and pyiceberg's overwrite one for its added and
one for its deleted entries, and a reader opens every manifest of the snapshot it plans
(each one a GET on S3). After a rewrite the current snapshot has one manifest per
``commit.manifest.target-size-bytes`` (8 MiB) of entries. A table property
``commit.manifest-merge.enabled=false`` turns the merge off.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from ..rewrite import NEAR_TARGET, RewriteFile, RewriteGroup, plan_rewrite, run_rewrite
from .files import WrittenFile, conform, write_data_file

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile, ManifestFile
    from pyiceberg.table import Table, Transaction
    from pyiceberg.table.update.snapshot import _OverwriteFiles

#: the summary key marking a snapshot that rewrote files and changed no row
REWRITE_PROPERTY = "txn-broker.rewrite"
#: a group of small files is rewritten once it has this many files (or about the target size)
MIN_INPUTS = 8


@dataclass
class _IcebergFiles:
    """One partition's data files as a :class:`txn_broker.rewrite.RewriteTarget`."""

    table: Table
    schema: pa.Schema
    partition: int
    files: dict[str, DataFile]
    properties: dict[str, str]

    def read(self, group: RewriteGroup) -> Iterable[pa.Table]:
        for f in group.files:
            with self.table.io.new_input(f.key).open() as stream:
                yield conform(pq.read_table(stream), self.schema)

    def write(self, group: RewriteGroup, tables: list[pa.Table]) -> WrittenFile:
        rows = pa.concat_tables(tables)
        offsets = rows.column("_offset")
        return write_data_file(self.table, self.schema, rows, self.partition, offsets[0].as_py(),
                               offsets[-1].as_py() + 1)

    def swap(self, group: RewriteGroup, output: WrittenFile) -> bool:
        from pyiceberg.exceptions import CommitFailedException

        try:
            with self.table.transaction() as txn:
                # pyiceberg 0.12 cannot write Iceberg's ``replace`` operation (its summary
                # code refuses it): an ``overwrite`` that deletes the inputs and adds the
                # output, its summary saying ``txn-broker.rewrite: replace`` (no row changed)
                properties = {**self.properties, REWRITE_PROPERTY: "replace"}
                with replace_snapshot(txn, properties) as replace:
                    for f in group.files:
                        replace.delete_data_file(self.files[f.key])
                    replace.append_data_file(output.data_file)
        except CommitFailedException:
            return False
        return True

    def discard(self, output: WrittenFile) -> None:
        self.table.io.delete(output.path)


def replace_snapshot(txn: Transaction, properties: dict[str, str]) -> _OverwriteFiles:
    """pyiceberg's overwrite of ``txn``'s table whose new snapshot has its manifests merged
    (module docstring); used as ``with replace_snapshot(txn, props) as replace:``."""
    from pyiceberg.table.snapshots import Operation

    return _merging_overwrite()(operation=Operation.OVERWRITE, transaction=txn, io=txn._table.io,
                                snapshot_properties=properties)


@functools.cache
def _merging_overwrite() -> type[_OverwriteFiles]:
    """The class of :func:`replace_snapshot` (built once, on first use: pyiceberg is
    imported only where a table is used)."""
    from pyiceberg.manifest import ManifestContent
    from pyiceberg.table import TableProperties
    from pyiceberg.table.update.snapshot import _ManifestMergeManager, _OverwriteFiles
    from pyiceberg.utils.properties import property_as_bool, property_as_int

    class _MergingOverwrite(_OverwriteFiles):
        def _process_manifests(self, manifests: list[ManifestFile]) -> list[ManifestFile]:
            props = self._transaction.table_metadata.properties
            if not property_as_bool(props, TableProperties.MANIFEST_MERGE_ENABLED, True):
                return manifests
            default = TableProperties.MANIFEST_TARGET_SIZE_BYTES_DEFAULT
            target = property_as_int(props, TableProperties.MANIFEST_TARGET_SIZE_BYTES, default)
            merger = _ManifestMergeManager(target_size_bytes=target or default,
                                           min_count_to_merge=1, merge_enabled=True, snapshot_producer=self)
            data = [m for m in manifests if m.content == ManifestContent.DATA]
            deletes = [m for m in manifests if m.content == ManifestContent.DELETES]
            merged = merger.merge_manifests(data) + deletes
            # the manifests this commit wrote and the merge replaced are no snapshot's:
            # deleted now rather than left to gc as orphans
            kept = {m.manifest_path for m in merged}
            for m in data:
                if m.manifest_path not in kept and m.manifest_path in self._written_manifests:
                    self._written_manifests.remove(m.manifest_path)
                    self._io.delete(m.manifest_path)
            return merged

    return _MergingOverwrite


def current_manifests(table: Table) -> list[ManifestFile]:
    """The current snapshot's manifests (one read of its manifest list, which pyiceberg
    does not cache); none for a table without a snapshot."""
    snapshot = table.current_snapshot()
    return [] if snapshot is None else snapshot.manifests(table.io)


def partition_files(table: Table, manifests: list[ManifestFile] | None = None) -> dict[int, list[DataFile]]:
    """The current snapshot's data files per partition, in offset order: its live manifest
    entries, read directly (the manifests in parallel) rather than through a pyiceberg scan
    plan, which also builds evaluators and a delete-file index for every call.
    ``manifests``: :func:`current_manifests`, when the caller read them already."""
    from pyiceberg.conversions import from_bytes
    from pyiceberg.manifest import DataFileContent, ManifestContent
    from pyiceberg.types import LongType
    from pyiceberg.utils.concurrent import ExecutorFactory

    data = [m for m in (current_manifests(table) if manifests is None else manifests)
            if m.content == ManifestContent.DATA]
    entries = ExecutorFactory.get_or_create().map(
        lambda m: m.fetch_manifest_entry(table.io, discard_deleted=True), data)
    by_partition: dict[int, list[tuple[int, DataFile]]] = {}
    for entry in (e for batch in entries for e in batch):
        f = entry.data_file
        if f.content != DataFileContent.DATA:
            continue
        lower = (f.lower_bounds or {}).get(3)
        first = int(from_bytes(LongType(), lower)) if lower is not None else 0
        by_partition.setdefault(int(f.partition[0]), []).append((first, f))
    return {p: [f for _first, f in sorted(files, key=lambda x: x[0])] for p, files in by_partition.items()}


def plan_small_files(files: list[DataFile], target_bytes: int) -> list[RewriteGroup]:
    """The groups of one partition's files (offset order) to rewrite now. The files of a
    partition cover consecutive published ranges (the offsets between two files are
    aborted ones), so each is given as starting where the previous ends."""
    from pyiceberg.conversions import from_bytes
    from pyiceberg.types import LongType

    planned: list[RewriteFile] = []
    for f in files:
        upper = (f.upper_bounds or {}).get(3)
        end = int(from_bytes(LongType(), upper)) + 1 if upper is not None else 0
        start = planned[-1].end if planned else 0
        planned.append(RewriteFile(f.file_path, start, max(end, start), int(f.file_size_in_bytes)))
    return [g for g in plan_rewrite(planned, target_bytes)
            if len(g.files) >= MIN_INPUTS or g.size >= NEAR_TARGET * target_bytes]


def could_rewrite(table: Table, target_bytes: int) -> bool:
    """Whether the table may hold a group to rewrite, from its current snapshot's summary
    alone: a group needs :data:`MIN_INPUTS` files or about the target size, so a table with
    fewer files and fewer bytes in all has none, and its manifests need not be read. True
    when the summary lacks the totals (a snapshot of another engine)."""
    snapshot = table.current_snapshot()
    summary = snapshot.summary if snapshot is not None and snapshot.summary else None
    if summary is None:
        return snapshot is not None
    files, size = summary.get("total-data-files"), summary.get("total-files-size")
    if files is None or size is None:
        return True
    return int(files) >= MIN_INPUTS or int(size) >= NEAR_TARGET * target_bytes


def has_delete_files(manifests: list[ManifestFile]) -> bool:
    """Whether a snapshot's manifests (:func:`current_manifests`) include delete manifests
    (position or equality deletes, which only another writer adds)."""
    from pyiceberg.manifest import ManifestContent

    return any(m.content == ManifestContent.DELETES for m in manifests)


def rewrite_small_files(table: Table, schema: pa.Schema, target_bytes: int, properties: dict[str, str]) -> int:
    """Rewrite the table's groups of small files (module docstring); returns how many
    groups were swapped in. Stops at the first refused swap (the table changed: the next
    publish plans again). A table with delete files (another writer's: the publisher writes
    none) is left alone: a rewrite reads data files whole, and would bring back the rows
    those delete files remove."""
    if not could_rewrite(table, target_bytes):
        return 0
    manifests = current_manifests(table)
    if has_delete_files(manifests):
        return 0
    done = 0
    for partition, files in sorted(partition_files(table, manifests).items()):
        by_path = {f.file_path: f for f in files}
        for group in plan_small_files(files, target_bytes):
            target = _IcebergFiles(table, schema, partition, by_path, properties)
            result = run_rewrite(target, group)
            if result.conflict:
                return done
            if result.swapped:
                done += 1  # the swap's commit updated ``table`` in place
    return done
