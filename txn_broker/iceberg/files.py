"""Writing a topic's committed rows as the table's Parquet data files (imports pyiceberg).

A data file holds rows of one partition over one offset range, in offset order; its name
says which (``data/_partition=P/<first>-<end>-<uuid>.parquet``), so retention can drop
whole files below a partition's log start. Columns carry their Iceberg field ids
(Parquet's field_id); the Iceberg column statistics (counts, bounds, sizes) come from the
Parquet footer the writer produced, not from a second read.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table

#: rows per Parquet row group (Iceberg readers plan splits by row group)
ROW_GROUP_ROWS = 1 << 20


@dataclass(frozen=True)
class WrittenFile:
    partition: int
    first_offset: int
    end_offset: int
    rows: int
    size_bytes: int
    path: str
    data_file: DataFile


def conform(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    """Rows read from segments (``_partition``, ``_offset``, ``_timestamp``, the topic's
    columns) as the table's Arrow schema: ids on every field, Iceberg's types."""
    columns = []
    for f in schema:
        column = rows.column(f.name)
        columns.append(column if column.type.equals(f.type) else column.cast(f.type))
    return pa.Table.from_arrays(columns, schema=schema)


def write_data_file(table: Table, schema: pa.Schema, rows: pa.Table, partition: int,
                    first_offset: int, end_offset: int) -> WrittenFile:
    """Write ``rows`` (already conformed to ``schema``) as one Parquet data file of
    ``table``, and describe it for a snapshot."""
    from pyiceberg.io.pyarrow import (
        compute_statistics_plan,
        data_file_statistics_from_parquet_metadata,
        parquet_path_to_id_mapping,
    )
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat

    metadata = table.metadata
    iceberg_schema = metadata.schema()
    name = f"{first_offset:020d}-{end_offset:020d}-{uuid.uuid4().hex}.parquet"
    path = f"{table.location().rstrip('/')}/data/_partition={partition}/{name}"
    output = table.io.new_output(path)
    collector: list[pq.FileMetaData] = []
    with output.create(overwrite=False) as stream:
        pq.write_table(rows, stream, compression="zstd", row_group_size=ROW_GROUP_ROWS,
                       metadata_collector=collector, store_schema=False)
        size = stream.tell()
    statistics = data_file_statistics_from_parquet_metadata(
        parquet_metadata=collector[0],
        stats_columns=compute_statistics_plan(iceberg_schema, metadata.properties),
        parquet_column_mapping=parquet_path_to_id_mapping(iceberg_schema),
    )
    data_file = DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=path,
        file_format=FileFormat.PARQUET,
        partition=statistics.partition(metadata.spec(), iceberg_schema),
        file_size_in_bytes=size,
        sort_order_id=None,
        spec_id=metadata.default_spec_id,
        equality_ids=None,
        key_metadata=None,
        **statistics.to_serialized_dict(),
    )
    return WrittenFile(partition, first_offset, end_offset, rows.num_rows, size, path, data_file)
