"""Record batches: topic schemas, validation of sends, sizes, keyed partitioning and the
segment format (one Arrow IPC file per segment, a ``_timestamp`` column first)."""

from __future__ import annotations

import base64
import zlib
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .errors import RecordTooLargeError, SchemaMismatchError

#: Kafka's record shape, used when a topic is created without a schema
DEFAULT_SCHEMA = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("headers", pa.map_(pa.string(), pa.binary())),
    ]
)
#: columns the broker adds in front of the topic's own on every read
METADATA_COLUMNS = ("_topic", "_partition", "_offset", "_timestamp")
TIMESTAMP_TYPE = pa.timestamp("ms", tz="UTC")

SendData = pa.Table | pa.RecordBatch | list[Mapping[str, Any]]


def schema_to_text(schema: pa.Schema) -> str:
    return base64.b64encode(schema.serialize().to_pybytes()).decode("ascii")


def schema_from_text(text: str) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))


def validate_topic_schema(schema: object) -> pa.Schema:
    if not isinstance(schema, pa.Schema):
        raise SchemaMismatchError(f"a topic schema must be a pyarrow.Schema, got {type(schema).__name__}")
    if len(schema) == 0:
        raise SchemaMismatchError("a topic schema needs at least one column")
    names = schema.names
    if len(set(names)) != len(names):
        raise SchemaMismatchError(f"duplicate column names in schema: {names}")
    for name in names:
        if not name or name.startswith("_"):
            raise SchemaMismatchError(
                f"column name {name!r} is reserved: names starting with '_' belong to the broker"
            )
    return schema.remove_metadata()


def to_table(data: object, schema: pa.Schema, topic: str) -> pa.Table:
    """The send's data as a table of exactly the topic's schema, or SchemaMismatchError."""
    if isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    if isinstance(data, pa.Table):
        return _conform(data, schema, topic)
    if isinstance(data, list) and all(isinstance(row, Mapping) for row in data):
        extra = {k for row in data for k in row} - set(schema.names)
        if extra:
            raise SchemaMismatchError(
                f"topic {topic!r} has no column(s) {sorted(map(str, extra))}; schema: {schema}"
            )
        try:
            return pa.Table.from_pylist(data, schema=schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as error:
            raise SchemaMismatchError(f"records do not match topic {topic!r}: {error}") from None
    raise SchemaMismatchError(
        f"send() takes a pyarrow.Table, a RecordBatch or a list of dicts, got {type(data).__name__}"
    )


def _conform(table: pa.Table, schema: pa.Schema, topic: str) -> pa.Table:
    if set(table.schema.names) != set(schema.names) or len(table.schema) != len(schema):
        raise SchemaMismatchError(
            f"columns {table.schema.names} do not match topic {topic!r} columns {schema.names}"
        )
    table = table.select(schema.names)
    for field, have in zip(schema, table.schema, strict=True):
        if not have.type.equals(field.type):
            raise SchemaMismatchError(
                f"column {field.name!r} of topic {topic!r} is {field.type}, got {have.type}"
            )
        if not field.nullable and table.column(field.name).null_count:
            raise SchemaMismatchError(f"column {field.name!r} of topic {topic!r} is not nullable")
    return table.cast(schema) if not table.schema.equals(schema) else table


def record_sizes(table: pa.Table) -> np.ndarray:
    """Approximate bytes of each record (the sum of its values' sizes)."""
    sizes = np.zeros(table.num_rows, dtype=np.int64)
    for column in table.columns:
        t = column.type
        if pa.types.is_binary(t) or pa.types.is_string(t) or pa.types.is_large_binary(t) \
                or pa.types.is_large_string(t):
            lengths = pc.binary_length(column).fill_null(0)
            sizes += lengths.to_numpy(zero_copy_only=False).astype(np.int64)
        elif _fixed_width(t):
            sizes += max(t.bit_width // 8, 1)
        else:
            sizes += np.fromiter(
                (column.slice(i, 1).nbytes for i in range(table.num_rows)),
                dtype=np.int64, count=table.num_rows,
            )
    return sizes


def _fixed_width(t: pa.DataType) -> bool:
    try:
        return bool(t.bit_width)
    except ValueError:  # variable width or nested
        return False


def check_record_sizes(table: pa.Table, max_bytes: int, topic: str) -> None:
    if table.num_rows == 0 or table.nbytes <= max_bytes:
        return
    sizes = record_sizes(table)
    worst = int(sizes.max())
    if worst > max_bytes:
        row = int(sizes.argmax())
        raise RecordTooLargeError(
            f"record {row} of the batch is {worst} bytes; topic {topic!r} allows "
            f"max.message.bytes={max_bytes}"
        )


def key_partitions(column: pa.ChunkedArray | pa.Array, partition_count: int) -> np.ndarray:
    """A stable partition per key: crc32 of the key's bytes (its UTF-8 text for non-binary
    types), modulo the partition count. Null keys get -1 (the caller spreads them)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if not (pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type)):
        column = pc.cast(column, pa.string())
    out = np.empty(len(column), dtype=np.int64)
    for i, value in enumerate(column.to_pylist()):
        if value is None:
            out[i] = -1
        else:
            raw = value if isinstance(value, bytes) else value.encode("utf-8")
            out[i] = zlib.crc32(raw) % partition_count
    return out


def encode_segment(table: pa.Table) -> bytes:
    """One segment object: an Arrow IPC file."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def decode_segment(data: bytes) -> pa.Table:
    return pa.ipc.open_file(pa.py_buffer(data)).read_all()


def with_timestamp(table: pa.Table, now_ms: int) -> pa.Table:
    ts = pa.array(np.full(table.num_rows, now_ms, dtype="datetime64[ms]"), type=pa.timestamp("ms"))
    return table.add_column(0, pa.field("_timestamp", TIMESTAMP_TYPE), ts.cast(TIMESTAMP_TYPE))


def read_schema(topic_schema: pa.Schema) -> pa.Schema:
    """The schema of what consumers get: metadata columns, then the topic's own."""
    return pa.schema(
        [
            pa.field("_topic", pa.string()),
            pa.field("_partition", pa.int32()),
            pa.field("_offset", pa.int64()),
            pa.field("_timestamp", TIMESTAMP_TYPE),
            *topic_schema,
        ]
    )


def concat(tables: Iterable[pa.Table], schema: pa.Schema) -> pa.Table:
    tables = list(tables)
    return pa.concat_tables(tables) if tables else schema.empty_table()
