"""Field ids: the stable number of every field of a topic's schema, nested fields included.

A field keeps its id when it is renamed, moved or widened; a new field takes the next id
of its topic; a dropped field's id is never used again. Readers match columns by id, so
data written under an older schema version reads under the latest one with no rewrite,
and the topic's Iceberg table has the same ids.

Ids live in Arrow field metadata under ``PARQUET:field_id`` (a decimal string): the key
pyarrow writes into a Parquet file's field ids, pyiceberg reads, and Spark matches with
``spark.sql.parquet.fieldId.read.enabled``.

Ids 1-4 belong to the metadata columns every reader gets (``_topic``, ``_partition``,
``_offset``, ``_timestamp``); a topic's own fields start at 5. Fresh ids are given in
Iceberg's order: a struct's fields first, then, field by field, the ids inside each
field's type (a list's element; a map's key, then value), depth first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pyarrow as pa

#: the Arrow field metadata key holding a field's id
FIELD_ID_KEY = b"PARQUET:field_id"
#: the metadata columns' ids, in the order readers get them
METADATA_FIELD_IDS = {"_topic": 1, "_partition": 2, "_offset": 3, "_timestamp": 4}
#: the id of a topic's first own field
FIRST_TOPIC_FIELD_ID = 5

_Take = Callable[[], int]


def field_id(field: pa.Field) -> int | None:
    """The field's id, or None when it carries none."""
    metadata = field.metadata or {}
    raw = metadata.get(FIELD_ID_KEY)
    return None if raw is None else int(raw)


def with_field_id(field: pa.Field, fid: int) -> pa.Field:
    return field.with_metadata({**(field.metadata or {}), FIELD_ID_KEY: str(fid).encode()})


def assign_fresh_ids(schema: pa.Schema, first_id: int = FIRST_TOPIC_FIELD_ID) -> tuple[pa.Schema, int]:
    """``schema`` with a fresh id on every field, nested ones included, from ``first_id``
    in Iceberg's order (module docstring); ids it carried are replaced. Returns the schema
    and the last id given (``first_id - 1`` for an empty schema). Schema-level metadata
    is kept."""
    counter = iter(range(first_id, 2**31))
    last = first_id - 1

    def take() -> int:
        nonlocal last
        last = next(counter)
        return last

    fields = _fresh_struct_fields(list(schema), take)
    return pa.schema(fields, metadata=schema.metadata), last


def _fresh_struct_fields(fields: list[pa.Field], take: _Take) -> list[pa.Field]:
    ids = [take() for _ in fields]  # a struct's own fields first
    return [with_field_id(f.with_type(_fresh_type(f.type, take)), fid) for f, fid in zip(fields, ids, strict=True)]


def _fresh_type(t: pa.DataType, take: _Take) -> pa.DataType:
    if pa.types.is_struct(t):
        return pa.struct(_fresh_struct_fields([t.field(i) for i in range(t.num_fields)], take))
    if pa.types.is_map(t):
        key_id, item_id = take(), take()
        key = with_field_id(t.key_field.with_type(_fresh_type(t.key_type, take)), key_id)
        item = with_field_id(t.item_field.with_type(_fresh_type(t.item_type, take)), item_id)
        return pa.map_(key, item, keys_sorted=t.keys_sorted)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        element_id = take()
        element = with_field_id(t.value_field.with_type(_fresh_type(t.value_type, take)), element_id)
        if pa.types.is_large_list(t):
            return pa.large_list(element)
        if pa.types.is_fixed_size_list(t):
            return pa.list_(element, t.list_size)
        return pa.list_(element)
    return t


def iter_field_ids(schema: pa.Schema) -> Iterator[tuple[tuple[str, ...], int | None]]:
    """Every field's path (names from the top; ``element``, ``key``, ``value`` inside
    lists and maps) and id, depth first."""
    for f in schema:
        yield from _walk(f, ())


def _walk(f: pa.Field, prefix: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], int | None]]:
    path = (*prefix, f.name)
    yield path, field_id(f)
    t = f.type
    if pa.types.is_struct(t):
        for i in range(t.num_fields):
            yield from _walk(t.field(i), path)
    elif pa.types.is_map(t):
        yield from _walk(t.key_field.with_name("key"), path)
        yield from _walk(t.item_field.with_name("value"), path)
    elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        yield from _walk(t.value_field.with_name("element"), path)


def max_field_id(schema: pa.Schema) -> int:
    """The largest id in ``schema`` (``FIRST_TOPIC_FIELD_ID - 1`` when it has none)."""
    return max((fid for _, fid in iter_field_ids(schema) if fid is not None), default=FIRST_TOPIC_FIELD_ID - 1)


def strip_field_ids(schema: pa.Schema) -> pa.Schema:
    """``schema`` without field metadata at any depth (what readers' tables are compared
    by when ids do not matter)."""
    return pa.schema([_strip(f) for f in schema], metadata=schema.metadata)


def _strip(f: pa.Field) -> pa.Field:
    t = f.type
    if pa.types.is_struct(t):
        t = pa.struct([_strip(t.field(i)) for i in range(t.num_fields)])
    elif pa.types.is_map(t):
        t = pa.map_(_strip(t.key_field), _strip(t.item_field), keys_sorted=t.keys_sorted)
    elif pa.types.is_large_list(t):
        t = pa.large_list(_strip(t.value_field))
    elif pa.types.is_fixed_size_list(t):
        t = pa.list_(_strip(t.value_field), t.list_size)
    elif pa.types.is_list(t):
        t = pa.list_(_strip(t.value_field))
    return f.with_type(t).remove_metadata()
