"""Reading data of one schema version under another, by field id: the one function every
reader uses (the consumer, the Spark data source, the Kafka listener's JSON mapping) and
writers use to bring a send in an older version to the latest.

A field of the target schema takes the values of the source field with the same id,
whatever its name or position there (a renamed or moved field keeps its values); a
widened type is cast (int to long, float to double, a wider decimal); a field the source
lacks reads as its declared default (field metadata ``txn_broker:default``, a JSON
literal) or null; a source field the target lacks is dropped. Structs are matched field
by field the same way, and so are the elements of lists. When the two schemas are the
same version, :func:`project` only relabels the columns (no copy of any data).

A reader of many segments plans the reading of a version once (:class:`Projection`, kept
per topic and version by :meth:`txn_broker.topics.TopicMeta.projection_from`): which
source column each target field takes and how, the output schema, and the source columns
the target drops, which a segment's decoding then skips (:attr:`Projection.dropped`).

Columns of the table that are not fields of the source (the metadata columns, such as
``_timestamp`` in a segment) are kept in front, as they are.
"""

from __future__ import annotations

import json

import pyarrow as pa

from .field_ids import field_id, iter_field_ids, strip_field_ids

#: the field metadata key holding a field's declared default, a JSON literal
DEFAULT_KEY = b"txn_broker:default"


def declared_default(field: pa.Field) -> tuple[bool, object]:
    """(whether ``field`` declares a default, the default)."""
    raw = (field.metadata or {}).get(DEFAULT_KEY)
    if raw is None:
        return False, None
    return True, json.loads(raw)


def same_field(a: pa.Field, b: pa.Field) -> bool:
    """Whether two fields hold the same data the same way: equal types (names of nested
    fields included) and equal field ids at every depth."""
    if not a.type.equals(b.type):
        return False
    return [i for _, i in iter_field_ids(pa.schema([a.with_name("f")]))] == \
        [i for _, i in iter_field_ids(pa.schema([b.with_name("f")]))]


def same_schema(a: pa.Schema, b: pa.Schema) -> bool:
    """Whether data of ``a`` reads unchanged under ``b`` (same fields, order and ids)."""
    return len(a) == len(b) and all(x.name == y.name and same_field(x, y) for x, y in zip(a, b, strict=True))


class Projection:
    """The reading of data of ``source`` under ``target`` (module docstring), planned once:
    :meth:`apply` does only the per-table work. ``keep_ids`` False: the output's fields
    carry no metadata (what readers' tables look like)."""

    def __init__(self, source: pa.Schema, target: pa.Schema, *, keep_ids: bool = True) -> None:
        self.source, self.target = source, target
        self.identity = same_schema(source, target)
        self.out_fields = list(target if keep_ids else strip_field_ids(target))
        self.source_names = frozenset(source.names)
        by_id = {field_id(f): f for f in source if field_id(f) is not None}
        #: per target field: the source field it reads (None: it reads as its default), and
        #: whether its column is taken as it is
        self.steps: list[tuple[pa.Field, pa.Field | None, bool]] = []
        for f in target:
            have = f if self.identity else by_id.get(field_id(f))
            self.steps.append((f, have, have is not None and (self.identity or same_field(have, f))))
        used = {have.name for _, have, _ in self.steps if have is not None}
        #: source columns the target lacks: a segment's decoding may skip them
        self.dropped = frozenset(n for n in source.names if n not in used)
        self._missing: dict[int, pa.Array] = {}  # per target field: its default values, sliced per table

    def apply(self, table: pa.Table) -> pa.Table:
        """``table`` (columns of ``source``, after any columns that are not source fields,
        which are kept in front; columns in :attr:`dropped` may be absent) under
        ``target``."""
        names = table.schema.names
        leading = [i for i, name in enumerate(names) if name not in self.source_names]
        fields = [table.schema.field(i) for i in leading]
        columns: list[pa.ChunkedArray | pa.Array] = [table.column(i) for i in leading]
        for i, (f, have, as_is) in enumerate(self.steps):
            if have is None:
                columns.append(self._defaults(i, f, table.num_rows))
            elif as_is:
                columns.append(table.column(have.name))
            else:
                column = table.column(have.name)
                columns.append(pa.chunked_array([convert(chunk, have, f) for chunk in column.chunks], f.type))
        return pa.Table.from_arrays(columns, schema=pa.schema([*fields, *self.out_fields],
                                                              metadata=table.schema.metadata))

    def _defaults(self, i: int, f: pa.Field, n: int) -> pa.Array:
        values = self._missing.get(i)
        if values is None or len(values) < n:
            values = self._missing[i] = missing(n, f)
        return values.slice(0, n)


def project(table: pa.Table, source: pa.Schema, target: pa.Schema, *, keep_ids: bool = True) -> pa.Table:
    """``table`` (columns of ``source``, after any columns that are not source fields) read
    under ``target``, by field id (module docstring). ``keep_ids`` False: the output's
    fields carry no metadata (what readers' tables look like). A reader of many tables of
    one version plans it once instead: :class:`Projection`."""
    return Projection(source, target, keep_ids=keep_ids).apply(table)


def missing(n: int, field: pa.Field) -> pa.Array:
    """``n`` values of a field the data lacks: its declared default, else nulls."""
    has_default, value = declared_default(field)
    if not has_default or value is None:
        return pa.nulls(n, field.type)
    return pa.repeat(pa.scalar(value, field.type), n)


def convert(array: pa.Array, source: pa.Field, target: pa.Field) -> pa.Array:
    """One array of ``source`` as ``target`` (matched by id at every depth)."""
    if same_field(source, target):
        return array if array.type.equals(target.type) else array.cast(target.type)
    s, t = source.type, target.type
    if pa.types.is_struct(s) and pa.types.is_struct(t):
        by_id = {field_id(s.field(i)): (i, s.field(i)) for i in range(s.num_fields)}
        children = []
        for j in range(t.num_fields):
            child = t.field(j)
            found = by_id.get(field_id(child))
            if found is None:
                children.append(missing(len(array), child))
            else:
                children.append(convert(array.field(found[0]), found[1], child))
        mask = array.is_null() if array.null_count else None
        return pa.StructArray.from_arrays(children, fields=list(t), mask=mask)
    if _is_list(s) and _is_list(t) and not pa.types.is_fixed_size_list(s) and not pa.types.is_fixed_size_list(t):
        values = convert(array.values, s.value_field, t.value_field)
        mask = array.is_null() if array.null_count else None
        cls = pa.LargeListArray if pa.types.is_large_list(t) else pa.ListArray
        offsets = array.offsets if pa.types.is_large_list(t) == pa.types.is_large_list(s) else \
            array.offsets.cast(pa.int64() if pa.types.is_large_list(t) else pa.int32())
        return cls.from_arrays(offsets, values, type=t, mask=mask)
    return array.cast(t)  # a promotion of a primitive type (or a map's, list's inner one)


def _is_list(t: pa.DataType) -> bool:
    return bool(pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t))
