"""What another engine may write to a topic's table, built with pyiceberg for the tests.

pyiceberg 0.12 writes no delete files (its deletes rewrite data files), but Spark, Trino
and Flink write position deletes (merge-on-read). :func:`add_position_deletes` commits one
as they do: a Parquet file of ``(file_path, pos)`` in a manifest of content ``deletes``,
added by a snapshot of its own."""

from __future__ import annotations

import uuid
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

#: Iceberg's reserved field ids of a position delete file's columns
FILE_PATH_ID, POS_ID = 2147483546, 2147483545


def add_position_deletes(table: Any, data_file: Any, positions: list[int],
                         properties: dict[str, str] | None = None) -> Any:
    """Delete the rows at ``positions`` of ``data_file`` (a DataFile of ``table``'s current
    snapshot) with a position delete file; returns the table after the commit."""
    from pyiceberg.manifest import (
        DataFile,
        DataFileContent,
        FileFormat,
        ManifestContent,
        ManifestEntry,
        ManifestEntryStatus,
        ManifestFile,
        ManifestWriterV2,
    )
    from pyiceberg.table.snapshots import Operation
    from pyiceberg.table.update.snapshot import _FastAppendFiles

    schema = pa.schema([
        pa.field("file_path", pa.string(), nullable=False, metadata={b"PARQUET:field_id": str(FILE_PATH_ID).encode()}),
        pa.field("pos", pa.int64(), nullable=False, metadata={b"PARQUET:field_id": str(POS_ID).encode()}),
    ])
    rows = pa.table({"file_path": [data_file.file_path] * len(positions), "pos": positions}, schema=schema)
    path = f"{table.location().rstrip('/')}/data/position-deletes-{uuid.uuid4().hex}.parquet"
    with table.io.new_output(path).create() as stream:
        pq.write_table(rows, stream)
        size = stream.tell()
    delete_file = DataFile.from_args(
        content=DataFileContent.POSITION_DELETES, file_path=path, file_format=FileFormat.PARQUET,
        partition=data_file.partition, record_count=len(positions), file_size_in_bytes=size,
        spec_id=data_file.spec_id)

    class _DeleteManifestWriter(ManifestWriterV2):
        def content(self) -> ManifestContent:
            return ManifestContent.DELETES

        @property
        def _meta(self) -> dict[str, str]:
            return {**super()._meta, "content": "deletes"}

    class _AddDeletes(_FastAppendFiles):
        def _process_manifests(self, manifests: list[ManifestFile]) -> list[ManifestFile]:
            writer = _DeleteManifestWriter(self._transaction.table_metadata.spec(), self.schema(),
                                           self.new_manifest_output(), self._snapshot_id, self._compression)
            with writer:
                writer.add(ManifestEntry.from_args(status=ManifestEntryStatus.ADDED, snapshot_id=self._snapshot_id,
                                                   sequence_number=None, file_sequence_number=None,
                                                   data_file=delete_file))
            return [*manifests, writer.to_manifest_file()]

    with table.transaction() as txn:
        with _AddDeletes(operation=Operation.DELETE, transaction=txn, io=table.io,
                         snapshot_properties=properties or {}):
            pass
    return table.refresh()
