"""A topic's table follows the topic's schema versions, by Iceberg's rules, matched by
field id (imports pyiceberg).

The table's schema is the topic's latest version as :func:`.schema.table_schema` gives it,
with the topic's field ids. Going from the table's current schema to it, field by field
by id (pyiceberg's ``union_by_name`` matches by name, which would turn a rename into a
drop and an add):

* a field the table lacks is **added** with its id (a new column; old data files lack it,
  so Iceberg readers see null there: a v2 table has no column defaults, see
  docs/iceberg.md);
* a field whose name changed is **renamed** (same id: old files read under the new name);
* a field whose type widened (int to long, float to double, a decimal's precision) is
  **promoted**;
* a field the table has and the topic dropped is **deleted** from the schema (old files
  keep it; readers no longer see it);
* a field that became nullable becomes **optional**. A column is required in the table
  only if it was required there before (or the table is new): an added column is
  optional even when the topic declares it required with a default, because the files
  written before it lack it.

Anything else (a narrowing, another change of type, an id the table used before for
another column) is an IcebergSchemaError naming the field: nothing is committed. The
change is one metadata commit that also records the topic's schema version in the table
property ``txn-broker.schema-version``; it asserts the table's current schema is still the
one it was computed from, so two evolvers at once (``alter_topic`` and a publisher)
cannot lose a change. Data files are never rewritten: Iceberg readers match the columns
of every file by id.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ..errors import IcebergCommitConflictError, IcebergSchemaError
from .catalog import SCHEMA_VERSION_PROPERTY, catalog_call
from .schema import table_schema

if TYPE_CHECKING:
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table
    from pyiceberg.types import IcebergType, NestedField

    from ..topics import TopicMeta

log = logging.getLogger(__name__)

#: how many times an evolution starts again when another evolver committed first
MAX_ATTEMPTS = 5


def table_schema_version(table: Table) -> int:
    """The topic schema version the table's schema was last evolved to (1 for a table
    made before schema evolution, or never evolved)."""
    return int(table.properties.get(SCHEMA_VERSION_PROPERTY, "1"))


def target_schema(current: Schema, meta: TopicMeta) -> Schema:
    """The Iceberg schema the table should have for the topic's latest version, given
    its ``current`` one (module docstring); IcebergSchemaError for a change Iceberg's
    rules refuse."""
    from pyiceberg.io.pyarrow import pyarrow_to_schema
    from pyiceberg.schema import Schema, index_by_id

    wanted = pyarrow_to_schema(table_schema(meta.schema))
    known = index_by_id(current)
    fields = tuple(_field(f, known, parent_known=True, path=f.name) for f in wanted.fields)
    return Schema(*fields, schema_id=current.schema_id, identifier_field_ids=list(current.identifier_field_ids))


def _field(new: NestedField, known: dict[int, NestedField], *, parent_known: bool, path: str) -> NestedField:
    from pyiceberg.types import NestedField

    old = known.get(new.field_id)
    if old is not None:
        _check_type(old.field_type, new.field_type, path)
    required = new.required and (old.required if old is not None else not parent_known)
    return NestedField(new.field_id, new.name, _type(new.field_type, known, old is not None, path), required,
                       doc=new.doc)


def _type(t: IcebergType, known: dict[int, NestedField], exists: bool, path: str) -> IcebergType:
    """``t`` with the required flags of its nested fields relaxed as for top-level ones:
    a child added to a struct the table has is optional."""
    from pyiceberg.types import ListType, MapType, StructType

    if isinstance(t, StructType):
        return StructType(*(_field(f, known, parent_known=exists, path=f"{path}.{f.name}") for f in t.fields))
    if isinstance(t, ListType):
        element = _field(t.element_field, known, parent_known=exists, path=f"{path}.element")
        return ListType(t.element_id, element.field_type, element_required=element.required)
    if isinstance(t, MapType):
        key = _field(t.key_field, known, parent_known=exists, path=f"{path}.key")
        value = _field(t.value_field, known, parent_known=exists, path=f"{path}.value")
        return MapType(t.key_id, key.field_type, t.value_id, value.field_type, value_required=value.required)
    return t


def _check_type(old: IcebergType, new: IcebergType, path: str) -> None:
    """IcebergSchemaError unless ``old`` becomes ``new`` by Iceberg's promotion rules
    (nested types: the same kind; their fields are checked one by one)."""
    from pyiceberg.types import (
        DecimalType,
        DoubleType,
        FloatType,
        IntegerType,
        ListType,
        LongType,
        MapType,
        PrimitiveType,
        StructType,
    )

    if old == new:
        return
    for kind in (StructType, ListType, MapType):
        if isinstance(old, kind) and isinstance(new, kind):
            return
    if isinstance(old, IntegerType) and isinstance(new, LongType):
        return
    if isinstance(old, FloatType) and isinstance(new, DoubleType):
        return
    if (isinstance(old, DecimalType) and isinstance(new, DecimalType) and old.scale == new.scale
            and old.precision <= new.precision):
        return
    if isinstance(old, PrimitiveType) and isinstance(new, PrimitiveType):
        raise IcebergSchemaError(f"field {path!r}: the table's {old} cannot become {new} (Iceberg only widens "
                                 "int to long, float to double and a decimal's precision)")
    raise IcebergSchemaError(f"field {path!r}: the table's {old} cannot become {new}")


def _check_ids(current: Schema, target: Schema, last_column_id: int) -> None:
    """A field new to the table must have an id above every id the table ever used: an
    id below it that the current schema lacks belonged to a dropped column, whose data
    old files still hold."""
    from pyiceberg.schema import index_by_id

    known = index_by_id(current)
    for fid, f in index_by_id(target).items():
        if fid not in known and fid <= last_column_id:
            raise IcebergSchemaError(
                f"field {f.name!r} has id {fid}, which the table used for a column since dropped; "
                "a field id is never given twice")


def evolve_table(table: Table, meta: TopicMeta) -> tuple[Table, bool]:
    """Bring the table's schema to the topic's latest version (module docstring).
    Returns the table (as its last commit left it) and whether its schema changed. A table
    already evolved to a later version than ``meta``'s is left as it is (the caller's
    view of the topic is stale). Raises IcebergSchemaError (nothing committed),
    CatalogUnavailableError, IcebergCommitConflictError (retriable)."""
    from pyiceberg.exceptions import CommitFailedException

    name = table.name()
    for _attempt in range(MAX_ATTEMPTS):
        if table_schema_version(table) >= meta.schema_version and table.properties.get(SCHEMA_VERSION_PROPERTY):
            return table, False
        current = table.schema()
        target = target_schema(current, meta)
        if target.as_struct() == current.as_struct():
            if table.properties.get(SCHEMA_VERSION_PROPERTY) != str(meta.schema_version):
                # same columns (only a default changed, or a table made before versions were
                # recorded): record the version, so the next publish skips the comparison
                _record_version(table, meta)
            return table, False
        _check_ids(current, target, table.metadata.last_column_id)

        def commit(table: Table = table, current: Schema = current, target: Schema = target) -> bool:
            try:
                _commit(table, current, target, meta)
            except CommitFailedException:
                return False  # another writer changed the table first: compute again
            return True

        if not catalog_call(commit, f"evolve the schema of {'.'.join(name)}"):
            table = catalog_call(table.refresh, f"reload the table {'.'.join(name)}")
            continue
        log.info("%s: schema evolved to the topic's version %d", ".".join(name), meta.schema_version)
        return table, True  # pyiceberg updated it in place with the commit
    raise IcebergCommitConflictError(f"{'.'.join(name)}: other writers kept changing the table's schema; try again")


def _commit(table: Table, current: Schema, target: Schema, meta: TopicMeta) -> None:
    from pyiceberg.schema import Schema
    from pyiceberg.table.update import (
        AddSchemaUpdate,
        AssertCurrentSchemaId,
        SetCurrentSchemaUpdate,
        SetPropertiesUpdate,
    )

    metadata = table.metadata
    existing = next((s.schema_id for s in metadata.schemas if s.as_struct() == target.as_struct()), None)
    updates: tuple = ()
    if existing is None:
        schema_id = max(s.schema_id for s in metadata.schemas) + 1
        added = Schema(*target.fields, schema_id=schema_id, identifier_field_ids=list(target.identifier_field_ids))
        updates += (AddSchemaUpdate(schema=added), SetCurrentSchemaUpdate(schema_id=-1))  # type: ignore[call-arg]
    else:
        updates += (SetCurrentSchemaUpdate(schema_id=existing),)  # type: ignore[call-arg]
    updates += (SetPropertiesUpdate(updates={SCHEMA_VERSION_PROPERTY: str(meta.schema_version)}),)
    with table.transaction() as txn:
        requirement = AssertCurrentSchemaId(current_schema_id=current.schema_id)  # type: ignore[call-arg]
        txn._apply(updates, (requirement,))


def _record_version(table: Table, meta: TopicMeta) -> None:
    from pyiceberg.exceptions import CommitFailedException

    def record() -> None:
        try:
            with table.transaction() as txn:
                txn.set_properties({SCHEMA_VERSION_PROPERTY: str(meta.schema_version)})
        except CommitFailedException:
            pass  # another writer changed the table; the next evolution records it

    catalog_call(record, f"record the schema version of {'.'.join(table.name())}")
