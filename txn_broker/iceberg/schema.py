"""The Iceberg table of a topic, as an Arrow schema with field ids (no pyiceberg here):
``_partition`` (id 2, int), ``_offset`` (id 3, long), ``_timestamp`` (id 4, timestamptz in
microseconds), then the topic's own fields with their ids. ``_topic`` is not a column:
the table is the topic.

Types an Iceberg table cannot hold without loss are refused when a topic enables Iceberg
(:func:`check_representable`): unsigned 32- and 64-bit integers (Iceberg's int and long are
signed), unions, durations, time of day other than microseconds, 16-bit floats are widened
(lossless) and dictionary columns are read as their values.
"""

from __future__ import annotations

import pyarrow as pa

from ..errors import IcebergSchemaError
from ..log.field_ids import METADATA_FIELD_IDS, assign_fresh_ids, field_id, max_field_id, with_field_id

#: the table's metadata columns, in order, with their ids
METADATA_FIELDS = (
    with_field_id(pa.field("_partition", pa.int32(), nullable=False), METADATA_FIELD_IDS["_partition"]),
    with_field_id(pa.field("_offset", pa.int64(), nullable=False), METADATA_FIELD_IDS["_offset"]),
    with_field_id(pa.field("_timestamp", pa.timestamp("us", tz="UTC"), nullable=False),
                  METADATA_FIELD_IDS["_timestamp"]),
)


def topic_fields_with_ids(topic_schema: pa.Schema) -> pa.Schema:
    """The topic's schema with its field ids: the ones it carries, or, for a schema
    without ids, fresh ids from 5 in Iceberg's order (``log.field_ids``)."""
    if all(field_id(f) is not None for f in topic_schema) and max_field_id(topic_schema) >= 5:
        return topic_schema
    return assign_fresh_ids(topic_schema)[0]


def table_schema(topic_schema: pa.Schema) -> pa.Schema:
    """The Arrow schema of a topic's table (module docstring); IcebergSchemaError for a
    type it cannot hold."""
    check_representable(topic_schema)
    fields = [f.with_type(_table_type(f.type)) for f in topic_fields_with_ids(topic_schema)]
    return pa.schema([*METADATA_FIELDS, *fields])


def check_representable(topic_schema: pa.Schema) -> None:
    """IcebergSchemaError naming the first field whose type an Iceberg table cannot hold."""
    for f in topic_schema:
        _check(f.type, f.name)


def _check(t: pa.DataType, path: str) -> None:
    if pa.types.is_struct(t):
        for i in range(t.num_fields):
            _check(t.field(i).type, f"{path}.{t.field(i).name}")
    elif pa.types.is_map(t):
        _check(t.key_type, f"{path}.key")
        _check(t.item_type, f"{path}.value")
    elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        _check(t.value_type, f"{path}.element")
    elif pa.types.is_dictionary(t):
        _check(t.value_type, path)
    elif pa.types.is_uint32(t) or pa.types.is_uint64(t):
        raise IcebergSchemaError(
            f"field {path!r} is {t}: Iceberg's integers are signed (int is 32-bit, long 64-bit), so an unsigned "
            f"{t.bit_width}-bit value may not fit; use int64 (or a decimal) in the topic's schema to enable iceberg")
    elif pa.types.is_union(t) or pa.types.is_duration(t) or pa.types.is_interval(t) or pa.types.is_null(t):
        raise IcebergSchemaError(f"field {path!r} is {t}, which an Iceberg table has no type for")
    elif pa.types.is_time(t) and not (pa.types.is_time64(t) and t.unit == "us"):
        raise IcebergSchemaError(f"field {path!r} is {t}: Iceberg's time is in microseconds (time64[us])")
    elif pa.types.is_timestamp(t) and t.tz is not None and t.tz.upper() not in ("UTC", "+00:00", "ETC/UTC", "Z"):
        raise IcebergSchemaError(f"field {path!r} is {t}: Iceberg's timestamptz is in UTC")
    elif pa.types.is_decimal(t) and t.precision > 38:
        raise IcebergSchemaError(f"field {path!r} is {t}: Iceberg's decimals have at most 38 digits")


def _table_type(t: pa.DataType) -> pa.DataType:
    """The type a column is written as: the Iceberg type's Arrow form (small unsigned
    integers as int, timestamps in microseconds, dictionaries as their values)."""
    if pa.types.is_struct(t):
        return pa.struct([t.field(i).with_type(_table_type(t.field(i).type)) for i in range(t.num_fields)])
    if pa.types.is_map(t):
        return pa.map_(t.key_field.with_type(_table_type(t.key_type)),
                       t.item_field.with_type(_table_type(t.item_type)))
    if pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t) or pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(_table_type(t.value_type)))
    if pa.types.is_dictionary(t):
        return _table_type(t.value_type)
    if pa.types.is_uint8(t) or pa.types.is_uint16(t) or pa.types.is_int8(t) or pa.types.is_int16(t):
        return pa.int32()
    if pa.types.is_float16(t):
        return pa.float32()
    if pa.types.is_timestamp(t):
        return pa.timestamp("us", tz="UTC" if t.tz is not None else None)
    if pa.types.is_date64(t):
        return pa.date32()
    if pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return pa.binary()
    return t
