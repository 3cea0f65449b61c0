from __future__ import annotations

import pyarrow as pa
import pytest

from txn_broker.errors import RecordTooLargeError, SchemaMismatchError
from txn_broker.records import (
    DEFAULT_SCHEMA,
    check_record_sizes,
    decode_segment,
    encode_segment,
    key_partitions,
    record_sizes,
    schema_from_text,
    schema_to_text,
    to_table,
    validate_topic_schema,
)

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])


def test_schema_round_trips_through_text():
    assert schema_from_text(schema_to_text(SCHEMA)).equals(SCHEMA)
    assert schema_from_text(schema_to_text(DEFAULT_SCHEMA)).equals(DEFAULT_SCHEMA)


def test_dicts_become_a_table_of_the_topic_schema():
    table = to_table([{"id": 1, "name": "a"}, {"id": 2}], SCHEMA, "t")
    assert table.schema.equals(SCHEMA)
    assert table.column("name").to_pylist() == ["a", None]


@pytest.mark.parametrize(
    "data",
    [
        [{"id": "not an int"}],
        [{"id": 1, "unknown": 2}],
        pa.table({"id": pa.array([1], pa.int32()), "name": ["x"]}),
        pa.table({"id": [1]}),
        pa.table({"id": pa.array([None], pa.int64()), "name": ["x"]}),
        "a string",
        [1, 2, 3],
    ],
)
def test_data_not_matching_the_schema_is_refused(data):
    with pytest.raises(SchemaMismatchError):
        to_table(data, SCHEMA, "t")


def test_columns_are_reordered_to_the_schema():
    table = to_table(pa.table({"name": ["x"], "id": pa.array([1], pa.int64())}), SCHEMA, "t")
    assert table.schema.names == ["id", "name"]


@pytest.mark.parametrize(
    "schema",
    [pa.schema([]), pa.schema([("_offset", pa.int64())]), pa.schema([("a", pa.int8()), ("a", pa.int8())])],
)
def test_invalid_topic_schemas(schema):
    with pytest.raises(SchemaMismatchError):
        validate_topic_schema(schema)


def test_record_sizes_and_limit():
    table = pa.table({"key": [b"k", b"kk"], "value": [b"x" * 10, b"y" * 3000]})
    assert list(record_sizes(table)) == [11, 3002]
    check_record_sizes(table, 3002, "t")
    with pytest.raises(RecordTooLargeError, match="record 1"):
        check_record_sizes(table, 3001, "t")


def test_nested_columns_are_measured_too():
    table = pa.table({"headers": pa.array([{"a": b"x" * 5000}], pa.map_(pa.string(), pa.binary()))})
    with pytest.raises(RecordTooLargeError):
        check_record_sizes(table, 1000, "t")


def test_key_partitions_are_stable_and_spread():
    keys = pa.array([f"order-{i}" for i in range(1000)])
    first = key_partitions(keys, 8)
    assert (first == key_partitions(keys, 8)).all()
    assert set(first.tolist()) == set(range(8))
    # equal keys land together, whatever else is in the batch
    assert key_partitions(pa.array(["order-7"]), 8)[0] == first[7]


def test_null_keys_are_marked_for_spreading():
    assert key_partitions(pa.array([None, "a"]), 4)[0] == -1


def test_segment_encoding_round_trips():
    table = pa.table({"id": [1, 2, 3]})
    assert decode_segment(encode_segment(table)).equals(table)
