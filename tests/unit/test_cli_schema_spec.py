"""Parsing and printing topic schemas for the command line."""

from __future__ import annotations

import pyarrow as pa
import pytest

from txn_broker.cli.schema_spec import parse_schema, parse_type, schema_from_json, schema_to_json
from txn_broker.errors import SchemaMismatchError

TYPES = [
    pa.string(), pa.large_string(), pa.binary(), pa.large_binary(), pa.bool_(), pa.int8(), pa.int32(),
    pa.int64(), pa.uint16(), pa.float16(), pa.float32(), pa.float64(), pa.date32(), pa.date64(),
    pa.timestamp("ms"), pa.timestamp("us", tz="UTC"), pa.timestamp("ns", tz="Europe/Paris"), pa.time32("ms"),
    pa.time64("ns"), pa.duration("s"), pa.binary(16), pa.decimal128(10, 2), pa.decimal256(40, 5),
    pa.list_(pa.int64()), pa.large_list(pa.string()), pa.list_(pa.field("x", pa.int32(), nullable=False)),
    pa.map_(pa.string(), pa.binary()), pa.struct([("a", pa.int64()), ("b", pa.list_(pa.string()))]),
    pa.list_(pa.struct([("k", pa.map_(pa.string(), pa.timestamp("ms", tz="UTC")))])),
]


@pytest.mark.parametrize("type_", TYPES, ids=str)
def test_printed_types_parse_back(type_):
    assert parse_type(str(type_)).equals(type_)


@pytest.mark.parametrize(("text", "expected"), [
    ("int64", pa.int64()), ("bool", pa.bool_()), ("boolean", pa.bool_()), ("double", pa.float64()),
    ("float", pa.float32()), ("timestamp[ms]", pa.timestamp("ms")), ("decimal(5, 1)", pa.decimal128(5, 1)),
    ("list<string>", pa.list_(pa.string())), ("  map< string ,int32 >", pa.map_(pa.string(), pa.int32())),
    ("TIMESTAMP[ms, tz=UTC]", pa.timestamp("ms", tz="UTC")),
])
def test_aliases_and_spacing(text, expected):
    assert parse_type(text).equals(expected)


def test_schema_spec():
    schema = parse_schema("id:int64 not null, name : string,ts:timestamp[ms, tz=UTC],price:decimal128(10, 2),"
                          "tags:list<string>,attrs:map<string, binary> NOT NULL")
    assert schema.names == ["id", "name", "ts", "price", "tags", "attrs"]
    assert [f.nullable for f in schema] == [False, True, True, True, True, False]
    assert schema.field("ts").type == pa.timestamp("ms", tz="UTC")


@pytest.mark.parametrize(("spec", "message"), [
    ("", "at least one column"),
    ("id", "expected ':'"),
    ("id:int99", "unknown type 'int99'"),
    (":int64", "expected a column name"),
    ("a:int64,a:string", "duplicate column(s) ['a']"),
    ("a:timestamp[xs]", "unknown time unit 'xs'"),
    ("a:int64 extra", "unexpected 'extra'"),
    ("a:list<int64", "expected '>'"),
    ("a:decimal128(99, 2)", "precision"),
])
def test_bad_specs_name_the_problem(spec, message):
    with pytest.raises(SchemaMismatchError, match="bad schema") as error:
        parse_schema(spec)
    assert message in str(error.value)


def test_json_schema_round_trip():
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("at", pa.timestamp("ms", tz="UTC")),
                        ("m", pa.map_(pa.string(), pa.list_(pa.float64())))])
    document = schema_to_json(schema)
    assert document["fields"][0] == {"name": "id", "type": "int64", "nullable": False}
    assert schema_from_json(document).equals(schema)
    assert schema_from_json(document["fields"]).equals(schema)  # a bare list is accepted too


@pytest.mark.parametrize(("document", "message"), [
    ({"fields": []}, "expected"),
    ({"fields": [{"name": "a"}]}, "needs a string \"name\" and a string \"type\""),
    ({"fields": [{"name": "a", "type": "int64", "nullable": "no"}]}, "must be true or false"),
    ({"fields": [{"name": "a", "type": "int64", "comment": 1}]}, "unknown key(s) ['comment']"),
    ({"fields": [{"name": "a", "type": "int64", "id": 0}]}, "must be a positive integer"),
    ({"fields": [{"name": "a", "type": "int65"}]}, "field 'a'"),
])
def test_bad_json_schemas(document, message):
    with pytest.raises(SchemaMismatchError) as error:
        schema_from_json(document, "s.json")
    assert message in str(error.value) and "s.json" in str(error.value)
