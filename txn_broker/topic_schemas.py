"""Schema versions of a topic: field ids given to a new or changed schema, the rules a
change must keep (Iceberg's structural rules always, Schema Registry's compatibility
modes on top), which versions writers may still send in, and a send brought to the
latest version (docs/semantics.md, "Schema evolution").

Every version is kept with field ids (:mod:`txn_broker.log.field_ids`). A stored schema
without ids (a topic made before schema versions existed) reads as
``assign_fresh_ids`` of itself: deterministic, so every reader agrees.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from .errors import IncompatibleSchemaError, SchemaMismatchError
from .log.batches import to_table, validate_topic_schema
from .log.field_ids import FIRST_TOPIC_FIELD_ID, assign_fresh_ids, field_id, iter_field_ids, max_field_id
from .log.projection import DEFAULT_KEY, declared_default, missing, project


@dataclass(frozen=True)
class SchemaVersion:
    """One version of a topic's schema: its number, the schema with field ids, when and
    by whom it was made."""

    version: int
    schema: pa.Schema
    created_ms: int
    created_by: str

    def to_json(self) -> dict[str, Any]:
        return {"version": self.version, "created_ms": self.created_ms, "created_by": self.created_by,
                "fields": fields_json(self.schema)}


def fields_json(schema: pa.Schema) -> list[dict[str, Any]]:
    """The top-level fields of ``schema`` as JSON values: name, type, nullable, id (and
    the declared default, when there is one)."""
    out = []
    for f in schema:
        entry: dict[str, Any] = {"name": f.name, "type": str(f.type), "nullable": f.nullable, "id": field_id(f)}
        has_default, value = declared_default(f)
        if has_default:
            entry["default"] = value
        out.append(entry)
    return out


def with_default(field: pa.Field, value: object) -> pa.Field:
    """``field`` declaring ``value`` (JSON-able, of the field's type) as its default: what
    rows written before the field existed read as, and what a send lacking it holds."""
    return field.with_metadata({**(field.metadata or {}), DEFAULT_KEY: json.dumps(value).encode()})


def has_all_ids(schema: pa.Schema) -> bool:
    return all(fid is not None for _, fid in iter_field_ids(schema))


def with_ids(schema: pa.Schema) -> pa.Schema:
    """``schema`` as stored, or, when it carries no field ids (a topic made before schema
    versions), ``assign_fresh_ids`` of it."""
    return schema if has_all_ids(schema) else assign_fresh_ids(schema)[0]


def last_field_id(stored: int, schema: pa.Schema) -> int:
    """The topic's last given field id: as stored, or (0: ids given lazily) the largest
    id of its latest schema."""
    return stored if stored > 0 else max_field_id(schema)


def new_topic_schema(schema: pa.Schema) -> tuple[pa.Schema, int]:
    """A new topic's version 1: ``schema`` checked, with fresh ids; and its last id."""
    schema = validate_topic_schema(schema)
    check_defaults(schema)
    return assign_fresh_ids(schema, FIRST_TOPIC_FIELD_ID)


# -- giving ids to a changed schema --------------------------------------------------------


class _Ids:
    def __init__(self, last: int) -> None:
        self.last = last

    def fresh(self, field: pa.Field) -> pa.Field:
        """``field`` with a new id, and new ids inside its type (Iceberg's order)."""
        schema, self.last = assign_fresh_ids(pa.schema([field]), self.last + 1)
        return schema.field(0)


def evolve_ids(latest: pa.Schema, last_id: int, proposed: pa.Schema) -> tuple[pa.Schema, int]:
    """``proposed`` with field ids, matched against ``latest``: a field carrying an id
    keeps it (that is how a rename is expressed: the field with its old id and a new
    name); a field without one takes the id of the latest's field of that name, unless
    another field claimed that id; a new field takes the next id after ``last_id``.
    Returns the schema and the new last id. IncompatibleSchemaError for an id the
    latest does not have."""
    ids = _Ids(last_id)
    fields = _evolve_fields(list(latest), list(proposed), ids, "")
    return pa.schema(fields, metadata=proposed.metadata), ids.last


def _evolve_fields(old: list[pa.Field], new: list[pa.Field], ids: _Ids, path: str) -> list[pa.Field]:
    old_by_id = {field_id(f): f for f in old}
    old_by_name = {f.name: f for f in old}
    claimed = [field_id(f) for f in new if field_id(f) is not None]
    for f in new:
        fid = field_id(f)
        if fid is not None and fid not in old_by_id:
            raise IncompatibleSchemaError(
                f"field {path}{f.name!r} carries field id {fid}, which the latest schema has not"
                f"{' here' if path else ''}; a new field carries no id (it is given the next one)",
                field=path + f.name, rule="unknown field id")
    if len(set(claimed)) != len(claimed):
        raise IncompatibleSchemaError(f"two fields{' of ' + path if path else ''} carry the same field id",
                                      field=path.rstrip("."), rule="duplicate field id")
    out = []
    for f in new:
        fid = field_id(f)
        match = old_by_id[fid] if fid is not None else old_by_name.get(f.name)
        if match is not None and fid is None and field_id(match) in claimed:
            match = None  # that id went to another field (renamed to it): this one is new
        if match is None:
            out.append(ids.fresh(f))
            continue
        metadata = {**(f.metadata or {}), b"PARQUET:field_id": str(field_id(match)).encode()}
        out.append(f.with_type(_evolve_type(match.type, f.type, ids, path + f.name + ".")).with_metadata(metadata))
    return out


def _evolve_type(old: pa.DataType, new: pa.DataType, ids: _Ids, path: str) -> pa.DataType:
    if pa.types.is_struct(old) and pa.types.is_struct(new):
        return pa.struct(_evolve_fields([old.field(i) for i in range(old.num_fields)],
                                        [new.field(i) for i in range(new.num_fields)], ids, path))
    if _is_list(old) and _is_list(new):
        element = _same_slot(old.value_field, new.value_field, ids, path + "element.")
        if pa.types.is_large_list(new):
            return pa.large_list(element)
        if pa.types.is_fixed_size_list(new):
            return pa.list_(element, new.list_size)
        return pa.list_(element)
    if pa.types.is_map(old) and pa.types.is_map(new):
        key = _same_slot(old.key_field, new.key_field, ids, path + "key.")
        item = _same_slot(old.item_field, new.item_field, ids, path + "value.")
        return pa.map_(key, item, keys_sorted=new.keys_sorted)
    if pa.types.is_nested(new):  # a different kind of type: the checks refuse it; ids for the message
        return ids.fresh(pa.field("x", new)).type
    return new


def _same_slot(old: pa.Field, new: pa.Field, ids: _Ids, path: str) -> pa.Field:
    """A list's element or a map's key or value: it keeps the old one's id."""
    metadata = {**(new.metadata or {}), b"PARQUET:field_id": str(field_id(old)).encode()}
    return new.with_type(_evolve_type(old.type, new.type, ids, path)).with_metadata(metadata)


def _is_list(t: pa.DataType) -> bool:
    return bool(pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t))


# -- the rules -----------------------------------------------------------------------------


def check_defaults(schema: pa.Schema) -> None:
    """Every declared default (``txn_broker:default``) is JSON of a value of its field's
    type; IncompatibleSchemaError otherwise."""
    for f in schema:
        raw = (f.metadata or {}).get(DEFAULT_KEY)
        if raw is None:
            continue
        try:
            value = json.loads(raw)
            pa.scalar(value, f.type)
        except (ValueError, TypeError, pa.ArrowException) as error:
            raise IncompatibleSchemaError(
                f"field {f.name!r}: default {raw.decode(errors='replace')} is not a JSON value of type "
                f"{f.type} ({error})", field=f.name, rule="invalid default") from None


def check_change(versions: list[SchemaVersion], proposed: pa.Schema, mode: str) -> None:
    """IncompatibleSchemaError naming the field and the rule when ``proposed`` (with ids,
    from :func:`evolve_ids`) may not follow ``versions`` (oldest first) under ``mode``.

    Always: the structural rules (Iceberg's), checked as "the new schema reads data of
    the latest": a field may be added when it is nullable or declares a default,
    dropped, renamed, moved, widened (int to a wider int, float to double, a decimal's
    precision up at the same scale) or made nullable; nothing else. The mode adds Schema
    Registry's checks: BACKWARD the same against the latest (already done),
    BACKWARD_TRANSITIVE against every version; FORWARD "the latest reads data of the new
    schema", FORWARD_TRANSITIVE every version does; FULL both against the latest,
    FULL_TRANSITIVE both against every version; NONE nothing more."""
    check_defaults(proposed)
    latest = versions[-1]
    _can_read(list(latest.schema), list(proposed), "", f"the new schema cannot read data of version {latest.version}")
    transitive = mode.endswith("_TRANSITIVE")
    others = versions if transitive else [latest]
    if mode.startswith(("BACKWARD", "FULL")):
        for v in others:
            _can_read(list(v.schema), list(proposed), "",
                      f"{mode}: the new schema cannot read data of version {v.version}")
    if mode.startswith(("FORWARD", "FULL")):
        for v in others:
            _can_read(list(proposed), list(v.schema), "",
                      f"{mode}: version {v.version} cannot read data of the new schema")


def _can_read(writer: list[pa.Field], reader: list[pa.Field], path: str, context: str) -> None:
    """Whether data written with ``writer``'s fields reads under ``reader``'s, by id."""
    by_id = {field_id(f): f for f in writer}
    for r in reader:
        name = path + r.name
        w = by_id.get(field_id(r))
        if w is None:
            if not r.nullable and not declared_default(r)[0]:
                raise IncompatibleSchemaError(
                    f"{context}: field {name!r} is required (not nullable) and has no default, and "
                    "the data lacks it; add it as nullable or with a default "
                    "(field metadata txn_broker:default)", field=name, rule="required field without a default")
            continue
        if w.nullable and not r.nullable:
            raise IncompatibleSchemaError(
                f"{context}: field {name!r} would become required (not nullable); only required to "
                "optional is allowed", field=name, rule="optional to required")
        _can_read_type(w.type, r.type, name, context)


def _can_read_type(w: pa.DataType, r: pa.DataType, name: str, context: str) -> None:
    if pa.types.is_struct(w) and pa.types.is_struct(r):
        _can_read([w.field(i) for i in range(w.num_fields)], [r.field(i) for i in range(r.num_fields)],
                  name + ".", context)
        return
    if _is_list(w) and _is_list(r) and pa.types.is_fixed_size_list(w) == pa.types.is_fixed_size_list(r):
        _can_read([w.value_field.with_name("element")], [r.value_field.with_name("element")], name + ".", context)
        return
    if pa.types.is_map(w) and pa.types.is_map(r):
        _can_read([w.key_field.with_name("key"), w.item_field.with_name("value")],
                  [r.key_field.with_name("key"), r.item_field.with_name("value")], name + ".", context)
        return
    if not promotes(w, r):
        raise IncompatibleSchemaError(
            f"{context}: field {name!r} changes type from {w} to {r}, which is not a widening "
            "(int to a wider int, float to double, a decimal's precision up at the same scale)",
            field=name, rule="type change is not a widening")


_SIGNED = [pa.int8(), pa.int16(), pa.int32(), pa.int64()]
_UNSIGNED = [pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64()]
_FLOATS = [pa.float16(), pa.float32(), pa.float64()]


def promotes(w: pa.DataType, r: pa.DataType) -> bool:
    """Whether values of type ``w`` read as type ``r`` without loss (equal, or a widening)."""
    if w.equals(r):
        return True
    for ladder in (_SIGNED, _UNSIGNED, _FLOATS):
        if w in ladder and r in ladder:
            return ladder.index(w) < ladder.index(r)
    if pa.types.is_decimal(w) and pa.types.is_decimal(r):
        return bool(w.scale == r.scale and w.precision <= r.precision and w.byte_width <= r.byte_width)
    return False


# -- writers -------------------------------------------------------------------------------


def writer_versions(versions: Mapping[int, SchemaVersion], latest: int, mode: str) -> list[SchemaVersion]:
    """The versions a writer may send in, newest first: the latest, and under the mode the
    one before (BACKWARD, FORWARD, FULL) or every one (``*_TRANSITIVE``); NONE the latest
    only."""
    if mode == "NONE":
        numbers = [latest]
    elif mode.endswith("_TRANSITIVE"):
        numbers = sorted(versions, reverse=True)
    else:
        numbers = [v for v in (latest, latest - 1) if v in versions]
    return [versions[v] for v in numbers]


def to_version(data: object, schema: pa.Schema, topic: str) -> pa.Table:
    """A send as a table of exactly ``schema`` (with its ids): columns it lacks are filled
    with their default or nulls when nullable or defaulted; SchemaMismatchError
    otherwise (or for anything :func:`txn_broker.log.batches.to_table` refuses). Rows
    (dicts) lacking a defaulted column get its default, each row on its own."""
    if isinstance(data, list) and data and all(isinstance(row, Mapping) for row in data):
        defaults = {f.name: declared_default(f)[1] for f in schema if declared_default(f)[0]}
        if defaults:
            data = [{**defaults, **row} for row in data]
    given = _given_columns(data)
    if given is None:
        return _labelled(to_table(data, schema, topic), schema)
    absent = [f for f in schema if f.name not in given]
    required = [f.name for f in absent if not f.nullable and not declared_default(f)[0]]
    if required:
        raise SchemaMismatchError(f"records for topic {topic!r} lack the required column(s) {required}")
    if not absent:
        return _labelled(to_table(data, schema, topic), schema)
    present = pa.schema([f for f in schema if f.name in given])
    if len(present) == 0:
        if isinstance(data, list):  # dicts that name no column: records of nulls (every column nullable here)
            return _labelled(to_table(data, schema, topic), schema)
        raise SchemaMismatchError(f"records for topic {topic!r} hold none of its columns {schema.names}")
    table = to_table(data, present, topic)
    columns = [table.column(f.name) if f.name in given else pa.chunked_array([missing(table.num_rows, f)], f.type)
               for f in schema]
    return pa.Table.from_arrays(columns, schema=schema)


def _given_columns(data: object) -> set[str] | None:
    if isinstance(data, pa.Table | pa.RecordBatch):
        return set(data.schema.names)
    if isinstance(data, list) and data and all(isinstance(row, Mapping) for row in data):
        return {str(k) for row in data for k in row}
    return None


def _labelled(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` (of ``schema``'s types) with ``schema``'s field metadata: no copy."""
    return pa.Table.from_arrays(table.columns, schema=schema)


def conform_send(data: object, versions: Mapping[int, SchemaVersion], latest: int, mode: str,
                 topic: str) -> pa.Table:
    """A send as a table of the latest version: taken as the latest version, else as the
    newest older version the mode lets writers send in, converted. SchemaMismatchError
    (the latest version's complaint, and the versions tried) when none matches; nothing
    is written then."""
    tried = writer_versions(versions, latest, mode)
    first: SchemaMismatchError | None = None
    for v in tried:
        try:
            table = to_version(data, v.schema, topic)
        except SchemaMismatchError as error:
            first = first or error
            continue
        return table if v.version == latest else project(table, v.schema, versions[latest].schema)
    assert first is not None
    if len(tried) == 1:
        raise first
    raise SchemaMismatchError(
        f"{first} (nor does it match any schema version writers may send in under "
        f"schema.compatibility={mode}: tried versions {[v.version for v in tried]})") from None
