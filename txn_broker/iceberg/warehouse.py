"""The default catalog's warehouse (``iceberg/`` in the broker's storage): which of its
files no table needs any more, for gc.

A file under ``iceberg/`` is needed when a table of the default catalog references it
from any snapshot it retains (snapshots the publisher expired, :mod:`.history`, no longer
count), or is its current or a previous metadata file: data files,
manifests, manifest lists, metadata files. Everything else there is an orphan: the data
files of a publisher killed before its commit (or that lost a commit race and could not
delete them), and the files of a table dropped with its topic. Orphans younger than the
grace period are kept: a publisher writes its files before it commits them. An empty
directory marker (a key ending in ``/``, which pyarrow's S3 file system writes when it
deletes a file) is no file of a table: it is an orphan only once nothing else lies under it.

The listing is taken before the tables are read, so a file committed while gc runs is
either referenced by what gc reads or younger than the grace period.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from ..orphans import Orphan
from ..storage import ObjectStore
from .settings import WAREHOUSE_PREFIX

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table


def table_files(table: Table) -> set[str]:
    """Every file a table references: its metadata files (current and logged), and for
    every snapshot it retains, the manifest list, the manifests and their data files.

    Manifests are immutable and shared: each snapshot's manifest list names the manifests
    of the snapshots before it too, so each manifest is read once, however many retained
    snapshots name it (a table of S appends has about S manifests, not S squared reads).
    Expiring old snapshots (:mod:`.history`) keeps both counts small."""
    metadata = table.metadata
    files = {table.metadata_location, *(entry.metadata_file for entry in metadata.metadata_log)}
    for snapshot in metadata.snapshots:
        files.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(table.io):
            if manifest.manifest_path in files:
                continue  # read for an earlier snapshot
            files.add(manifest.manifest_path)
            # a deleted entry records the removal of a file that only the snapshots before
            # this one hold: needed only if one of those is still retained (then its own
            # manifests name the file live)
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
                files.add(entry.data_file.file_path)
    return files


def catalog_files(catalog: Catalog) -> set[str]:
    """The files every table of ``catalog`` references."""
    files: set[str] = set()
    for namespace in catalog.list_namespaces():
        for identifier in catalog.list_tables(namespace):
            files |= table_files(catalog.load_table(identifier))
    return files


def find_warehouse_orphans(catalog: Catalog, store: ObjectStore, now_ms: int) -> Iterator[Orphan]:
    """Every file under ``iceberg/`` in ``store`` that no table of the default ``catalog``
    references (module docstring), with its age by ``now_ms``."""
    listed = list(store.list(WAREHOUSE_PREFIX))
    if not listed:
        return
    needed = catalog_files(catalog)
    base = store.url.rstrip("/") + "/"
    parents = {info.key[:i + 1] for info in listed for i, c in enumerate(info.key[:-1]) if c == "/"}
    for info in listed:
        if info.key.endswith("/") and info.key in parents:
            continue  # the marker of a directory that still holds files
        if base + info.key not in needed:
            yield Orphan(info.key, info.size, info.modified_ms, now_ms - info.modified_ms)
