from __future__ import annotations

import os
import zlib

import pyarrow as pa
import pytest

from txn_broker.errors import InvalidConfigError, RecordTooLargeError, SchemaMismatchError
from txn_broker.log.batches import (
    DEFAULT_SCHEMA,
    check_record_sizes,
    key_partitions,
    record_sizes,
    schema_from_text,
    schema_to_text,
    to_table,
    validate_topic_schema,
)
from txn_broker.log.segment_format import COMPRESSION_TYPES, decode_segment, encode_segment

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


def _reference_partition(value, partitions):
    """The definition every writer must keep: crc32 of the key's bytes (UTF-8 text for
    anything that is not binary) modulo the partition count; -1 for a null key."""
    if value is None:
        return -1
    raw = value if isinstance(value, bytes) else str(value).encode("utf-8")
    return zlib.crc32(raw) % partitions


@pytest.mark.parametrize("column", [
    pa.array(["order-1", "ünïcödé", "", None, "x" * 5000, "order-1"]),
    pa.array([b"\x00\xff", b"", None, b"k" * 300], pa.binary()),
    pa.array(["a", None, "bb"], pa.large_string()),
    pa.array([b"a", b"bb"], pa.large_binary()),
    pa.array([f"order-{i}" for i in range(20)]).slice(5, 10),
    pa.chunked_array([pa.array(["a", "b"]), pa.array(["c", None])]),
    pa.array(["x", "y", "x"]).dictionary_encode(),
], ids=["string", "binary", "large_string", "large_binary", "sliced", "chunked", "dictionary"])
def test_key_partitions_keep_the_crc32_definition(column):
    values = column.to_pylist()
    assert key_partitions(column, 7).tolist() == [_reference_partition(v, 7) for v in values]


def test_key_partitions_of_repeated_keys_hash_the_distinct_ones_the_same_way():
    keys = [f"customer-{i % 97}" if i % 11 else None for i in range(30_000)]  # dictionary path
    assert key_partitions(pa.array(keys), 16).tolist() == [_reference_partition(k, 16) for k in keys]
    numbers = pa.array([i % 50 for i in range(20_000)], pa.int64())  # numbers: their decimal text
    assert key_partitions(numbers, 5).tolist() == [zlib.crc32(str(i % 50).encode()) % 5 for i in range(20_000)]


def _reference_size(value):
    """Bytes of one value as record_sizes defines them, walking the Python value."""
    if value is None:
        return 0
    if isinstance(value, bytes | str):
        return len(value.encode("utf-8") if isinstance(value, str) else value)
    if isinstance(value, dict):
        return sum(_reference_size(v) for v in value.values())
    if isinstance(value, list):
        return sum(_reference_size(v) for v in value)
    if isinstance(value, tuple):  # a map entry (key, value)
        return sum(_reference_size(v) for v in value)
    raise AssertionError(value)


def test_record_sizes_of_nested_columns_come_from_their_offsets():
    headers = pa.array([[("a", b"x" * 5)], None, [], [("bb", b"yy"), ("c", None)]], pa.map_(pa.string(), pa.binary()))
    tags = pa.array([["p", "qq"], [], None, ["rrr"]], pa.list_(pa.string()))
    nested = pa.array([{"s": "ab", "l": [b"c"]}, {"s": None, "l": None}, None, {"s": "d", "l": [b"ee", b"f"]}],
                      pa.struct([("s", pa.string()), ("l", pa.list_(pa.binary()))]))
    table = pa.table({"headers": headers, "tags": tags, "nested": nested})
    expected = [sum(_reference_size(v) for v in row.values()) for row in table.to_pylist()]
    assert record_sizes(table).tolist() == expected == [12, 0, 0, 12]
    sliced = table.slice(1, 3)  # offsets of a slice index into the whole child arrays
    assert record_sizes(sliced).tolist() == expected[1:]
    chunked = pa.concat_tables([table.slice(0, 2), table.slice(2, 2)])
    assert record_sizes(chunked).tolist() == expected


def test_record_sizes_count_fixed_widths_and_dictionary_values():
    table = pa.table({"id": pa.array([1, 2], pa.int64()), "flag": [True, False],
                      "kind": pa.array(["aaa", "b"]).dictionary_encode(),
                      "pair": pa.array([[1, 2], [3, 4]], pa.list_(pa.int32(), 2))})
    assert record_sizes(table).tolist() == [8 + 1 + 3 + 8, 8 + 1 + 1 + 8]


def test_a_large_value_in_the_default_headers_map_is_found_fast():
    headers = [[("h", b"v")]] * 200_000
    headers[123_456] = [("big", b"x" * 2_000_000)]
    table = pa.table({"headers": pa.array(headers, pa.map_(pa.string(), pa.binary()))})
    with pytest.raises(RecordTooLargeError, match="record 123456"):
        check_record_sizes(table, 1_048_588, "t")


@pytest.mark.parametrize("compression", COMPRESSION_TYPES)
def test_segments_round_trip_with_every_compression(compression):
    table = pa.table({"id": list(range(1000)), "text": [f"row {i % 7}" for i in range(1000)]})
    payload = encode_segment(table, compression)
    assert isinstance(payload, pa.Buffer)
    assert decode_segment(payload).equals(table)
    assert decode_segment(payload.to_pybytes()).equals(table)  # from bytes too
    if compression != "uncompressed":
        assert payload.size < encode_segment(table).size


@pytest.mark.parametrize("compression", ["lz4", "zstd"])
def test_a_large_segment_of_incompressible_values_is_stored_as_it_is(compression):
    """Kafka's record shape with null headers made by ``pa.nulls`` (whose slices carry their
    parent's offsets into an IPC file) and random values: not compressed, so a reader gets
    the values without a copy. Compressible values of the same shape are compressed."""
    n = 8_000
    headers = pa.nulls(n, DEFAULT_SCHEMA.field("headers").type)
    random_values = pa.array([os.urandom(1000) for _ in range(n)], pa.binary())
    table = pa.table({"key": pa.array([b"k%d" % i for i in range(n)]), "value": random_values, "headers": headers})
    payload = encode_segment(table, compression)
    assert payload.size >= encode_segment(table).size  # stored as it is
    values = decode_segment(payload).column("value").chunks[0].buffers()[2]
    assert payload.address <= values.address < payload.address + payload.size  # not copied
    text = table.set_column(1, "value", pa.array([b"value %d " % (i % 10) * 100 for i in range(n)]))
    assert encode_segment(text, compression).size < encode_segment(text).size / 10


@pytest.mark.parametrize("compression", COMPRESSION_TYPES)
def test_a_segment_cut_from_a_large_table_with_null_headers_holds_only_its_rows(compression):
    """``pa.nulls`` of a map type, sliced: the segment is about the size of the same rows
    built on their own (not 8 bytes more per row of the whole table), and reads back equal."""
    n = 100_000
    table = pa.table({"value": pa.array([os.urandom(20) for _ in range(n)], pa.binary()),
                      "headers": pa.nulls(n, DEFAULT_SCHEMA.field("headers").type)})
    part = table.slice(50_000, 1_000)
    alone = pa.table({"value": pa.array(part.column("value").to_pylist(), pa.binary()),
                      "headers": pa.array([None] * 1_000, DEFAULT_SCHEMA.field("headers").type)})
    payload = encode_segment(part, compression)
    assert payload.size < encode_segment(alone, compression).size + 1_000  # not 800 KB more
    assert decode_segment(payload).equals(part)


def test_unknown_compression_is_refused():
    with pytest.raises(InvalidConfigError, match="gzip"):
        encode_segment(pa.table({"id": [1]}), "gzip")
