"""Field ids: fresh ids in Iceberg's own order, read back at every depth, stripped."""

from __future__ import annotations

import itertools

import pyarrow as pa
from pyiceberg.io.pyarrow import pyarrow_to_schema
from pyiceberg.schema import assign_fresh_schema_ids

from txn_broker.log.field_ids import (
    FIRST_TOPIC_FIELD_ID,
    assign_fresh_ids,
    field_id,
    iter_field_ids,
    max_field_id,
    strip_field_ids,
)

NESTED = pa.schema([
    pa.field("id", pa.string(), nullable=False),
    pa.field("address", pa.struct([("street", pa.string()), ("zip", pa.int32())])),
    pa.field("tags", pa.list_(pa.string())),
    pa.field("headers", pa.map_(pa.string(), pa.binary())),
    pa.field("points", pa.list_(pa.struct([("x", pa.float64()), ("y", pa.float64())]))),
    pa.field("amount", pa.decimal128(12, 2)),
])


def test_fresh_ids_start_after_the_metadata_columns_and_cover_every_nested_field():
    schema, last = assign_fresh_ids(NESTED)
    paths = dict(iter_field_ids(schema))
    assert all(fid is not None for fid in paths.values())
    ids = sorted(paths.values())
    assert ids == list(range(FIRST_TOPIC_FIELD_ID, last + 1))
    # a struct's own fields first: the six top-level fields are 5..10
    assert [field_id(f) for f in schema] == list(range(5, 11))
    assert paths[("address", "street")] == 11 and paths[("address", "zip")] == 12
    assert paths[("tags", "element")] == 13
    assert paths[("headers", "key")] == 14 and paths[("headers", "value")] == 15
    assert max_field_id(schema) == last == 18


def test_fresh_ids_are_the_ones_iceberg_would_give():
    schema, _ = assign_fresh_ids(NESTED)
    iceberg = pyarrow_to_schema(schema)
    counter = itertools.count(FIRST_TOPIC_FIELD_ID)
    fresh = assign_fresh_schema_ids(iceberg, lambda: next(counter))
    assert fresh == iceberg


def test_ids_are_replaced_and_stripped_at_every_depth():
    once, _ = assign_fresh_ids(NESTED, first_id=100)
    again, last = assign_fresh_ids(once)
    assert [field_id(f) for f in again] == list(range(5, 11)) and last == 18
    plain = strip_field_ids(again)
    assert all(fid is None for _, fid in iter_field_ids(plain))
    assert plain.equals(NESTED)
    assert max_field_id(plain) == FIRST_TOPIC_FIELD_ID - 1
