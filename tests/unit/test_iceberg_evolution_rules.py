"""The table-side rules of schema evolution (txn_broker.iceberg.evolution), on pyiceberg
schemas: what a table's schema becomes for a topic schema, by field id."""

from __future__ import annotations

from types import SimpleNamespace

import pyarrow as pa
import pytest

pytest.importorskip("pyiceberg")

from pyiceberg.io.pyarrow import pyarrow_to_schema  # noqa: E402

from txn_broker.errors import IcebergSchemaError  # noqa: E402
from txn_broker.iceberg.evolution import _check_ids, target_schema  # noqa: E402
from txn_broker.iceberg.schema import table_schema  # noqa: E402
from txn_broker.log.field_ids import with_field_id  # noqa: E402


def _f(name: str, t: pa.DataType, fid: int, nullable: bool = True) -> pa.Field:
    return with_field_id(pa.field(name, t, nullable=nullable), fid)


def _table(*fields: pa.Field):
    return pyarrow_to_schema(table_schema(pa.schema(fields)))


def _topic(*fields: pa.Field) -> SimpleNamespace:
    return SimpleNamespace(schema=pa.schema(fields))


def test_rename_widen_drop_and_add_by_id():
    current = _table(_f("a", pa.int32(), 5, nullable=False), _f("b", pa.string(), 6), _f("c", pa.float32(), 7))
    target = target_schema(current, _topic(_f("a", pa.int64(), 5, nullable=False), _f("bee", pa.string(), 6),
                                           _f("d", pa.string(), 8, nullable=False)))
    fields = {f.field_id: f for f in target.fields}
    assert [f.name for f in target.fields] == ["_partition", "_offset", "_timestamp", "a", "bee", "d"]
    assert str(fields[5].field_type) == "long" and fields[5].required  # required before: stays
    assert fields[6].name == "bee"
    assert 7 not in fields
    assert not fields[8].required  # added: optional, the files written before lack it


def test_a_child_added_to_an_existing_struct_is_optional_a_new_structs_children_are_not():
    inner = pa.struct([_f("x", pa.int64(), 7, nullable=False)])
    current = _table(_f("s", inner, 5))
    grown = pa.struct([_f("x", pa.int64(), 7, nullable=False), _f("y", pa.int64(), 8, nullable=False)])
    fresh = pa.struct([_f("z", pa.int64(), 9, nullable=False)])
    target = target_schema(current, _topic(_f("s", grown, 5), _f("t", fresh, 6)))
    s, t = target.find_field(5).field_type, target.find_field(6).field_type
    assert s.field(7).required and not s.field(8).required
    assert t.field(9).required and not target.find_field(6).required


@pytest.mark.parametrize("old, new", [(pa.int64(), pa.int32()), (pa.string(), pa.int64()),
                                      (pa.float64(), pa.float32())])
def test_a_change_iceberg_cannot_take_is_refused_naming_the_field(old, new):
    current = _table(_f("a", old, 5))
    with pytest.raises(IcebergSchemaError, match="'a'"):
        target_schema(current, _topic(_f("a", new, 5)))


def test_an_id_of_a_dropped_column_is_not_given_again():
    current = _table(_f("a", pa.int64(), 5))
    target = target_schema(current, _topic(_f("a", pa.int64(), 5), _f("back", pa.string(), 6)))
    _check_ids(current, target, last_column_id=5)  # a new id: fine
    with pytest.raises(IcebergSchemaError, match="never given twice"):
        _check_ids(current, target, last_column_id=6)  # id 6 was a column the table dropped
