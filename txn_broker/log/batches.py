"""Record batches as the log takes them: topic schemas, validation of sends, record sizes
and keyed partitioning. How a batch is stored is :mod:`txn_broker.log.segment_format`."""

from __future__ import annotations

import base64
import zlib
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import RecordTooLargeError, SchemaMismatchError
from .time_range import check_time_range

#: Kafka's record shape, used when a topic is created without a schema
DEFAULT_SCHEMA = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("headers", pa.map_(pa.string(), pa.binary())),
    ]
)

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
        table = _conform(data, schema, topic)
        check_time_range(table, topic)
        return table
    if isinstance(data, list) and all(isinstance(row, Mapping) for row in data):
        extra = {k for row in data for k in row} - set(schema.names)
        if extra:
            raise SchemaMismatchError(
                f"topic {topic!r} has no column(s) {sorted(map(str, extra))}; schema: {schema}"
            )
        try:
            table = pa.Table.from_pylist(data, schema=schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as error:
            raise SchemaMismatchError(f"records do not match topic {topic!r}: {error}") from None
        check_time_range(table, topic)
        return table
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
    """Approximate bytes of each record: the sum of its values' sizes (binary and string
    lengths, fixed widths), nested lists, maps and structs included. Computed per column
    from the arrays' offsets, without a Python step per record."""
    sizes = np.zeros(table.num_rows, dtype=np.int64)
    for column in table.columns:
        if _fixed_width(column.type):
            sizes += max(column.type.bit_width // 8, 1)
        elif column.num_chunks:
            sizes += np.concatenate([_value_sizes(chunk) for chunk in column.chunks])
    return sizes


def _largest_record_bound(table: pa.Table) -> int:
    """An upper bound of every record's size: the largest value of each column, summed."""
    bound = 0
    for column in table.columns:
        t = column.type
        if _fixed_width(t):
            bound += max(t.bit_width // 8, 1)
        elif _is_binary_like(t):
            bound += int(pc.max(pc.binary_length(column)).as_py() or 0)
        else:
            bound += max((int(_value_sizes(chunk).max()) for chunk in column.chunks if len(chunk)), default=0)
    return bound


def _value_sizes(array: pa.Array) -> np.ndarray:
    """Bytes of each value of ``array``; a null string, binary or list counts 0."""
    t = array.type
    n = len(array)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    if pa.types.is_dictionary(t):
        indices = array.indices.fill_null(0).to_numpy(zero_copy_only=False)
        return _value_sizes(array.dictionary)[indices]
    if _is_binary_like(t):
        return pc.binary_length(array).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_map(t):
        # offsets (of this slice) index into the whole child array
        bounds = array.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
        out = _span_sums(_value_sizes(array.values), bounds[:-1], bounds[1:])
    elif pa.types.is_fixed_size_list(t):
        width = t.list_size
        first = (np.arange(n, dtype=np.int64) + array.offset) * width
        out = _span_sums(_value_sizes(array.values), first, first + width)
    elif pa.types.is_struct(t):
        out = np.zeros(n, dtype=np.int64)
        for i in range(t.num_fields):
            out += _value_sizes(array.field(i))  # field() applies this slice's offset
    elif _fixed_width(t):
        return np.full(n, max(t.bit_width // 8, 1), dtype=np.int64)
    else:  # unions, list views, extension types: measured one by one
        return np.fromiter((array.slice(i, 1).nbytes for i in range(n)), dtype=np.int64, count=n)
    if array.null_count:
        out[array.is_null().to_numpy(zero_copy_only=False)] = 0
    return out


def _span_sums(values: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """``values[starts[i]:ends[i]].sum()`` for every i, from one cumulative sum."""
    cumulative = np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(values, dtype=np.int64)])
    return cumulative[ends] - cumulative[starts]


def _is_binary_like(t: pa.DataType) -> bool:
    return bool(pa.types.is_binary(t) or pa.types.is_string(t) or pa.types.is_large_binary(t)
                or pa.types.is_large_string(t) or pa.types.is_binary_view(t) or pa.types.is_string_view(t))


def _fixed_width(t: pa.DataType) -> bool:
    if pa.types.is_dictionary(t):  # its bit width is the index's; its values count
        return False
    try:
        return bool(t.bit_width)
    except ValueError:  # variable width or nested
        return False


def check_record_sizes(table: pa.Table, max_bytes: int, topic: str) -> None:
    """RecordTooLargeError naming the first record larger than ``max_bytes``."""
    if table.num_rows == 0 or table.nbytes <= max_bytes or _largest_record_bound(table) <= max_bytes:
        return
    sizes = record_sizes(table)
    worst = int(sizes.max())
    if worst > max_bytes:
        row = int(sizes.argmax())
        raise RecordTooLargeError(
            f"record {row} of the batch is {worst} bytes; topic {topic!r} allows "
            f"max.message.bytes={max_bytes}"
        )


#: keys sampled to decide whether hashing the distinct keys only pays off
_KEY_SAMPLE = 4096


def key_partitions(column: pa.ChunkedArray | pa.Array, partition_count: int) -> np.ndarray:
    """A stable partition per key: crc32 of the key's bytes (its UTF-8 text for non-binary
    types), modulo the partition count. Null keys get -1 (the caller spreads them).

    Every writer (``producer.send(key=...)``, the Spark data source) must agree on this,
    and data already written depends on it: never change the function. The work is one
    ``zlib.crc32`` per key, with no other per-record Python: keys are taken as bytes
    (string columns are reinterpreted, not encoded), and when a sample shows that keys
    repeat, the column is dictionary-encoded and only its distinct keys are hashed."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    if pa.types.is_large_binary(column.type) or pa.types.is_large_string(column.type):
        keys = column.cast(pa.large_binary())  # UTF-8 text is its own bytes: no copy
    elif pa.types.is_binary(column.type) or pa.types.is_string(column.type):
        keys = column.cast(pa.binary())
    else:
        keys = pc.cast(column, pa.string()).cast(pa.binary())
    nulls = keys.is_null().to_numpy(zero_copy_only=False) if keys.null_count else None
    if nulls is not None:
        keys = keys.fill_null(b"")
    if len(keys) > 2 * _KEY_SAMPLE and _keys_repeat(keys):
        encoded = pc.dictionary_encode(keys)
        crcs = _crc32(encoded.dictionary)[encoded.indices.to_numpy(zero_copy_only=False)]
    else:
        crcs = _crc32(keys)
    out = crcs % partition_count
    if nulls is not None:
        out[nulls] = -1
    return out


def _keys_repeat(keys: pa.Array) -> bool:
    """Whether an evenly spread sample of ``keys`` holds fewer than half distinct values."""
    step = len(keys) // _KEY_SAMPLE
    sample = keys.take(pa.array(np.arange(0, step * _KEY_SAMPLE, step, dtype=np.int64)))
    return int(pc.count_distinct(sample).as_py()) * 2 < _KEY_SAMPLE


def _crc32(keys: pa.Array) -> np.ndarray:
    crcs = np.fromiter(map(zlib.crc32, keys.to_pylist()), dtype=np.uint32, count=len(keys))
    return crcs.astype(np.int64)
