"""The one reader of record files (txn_broker.read_records), shared by `txn-broker produce`
and the Airflow ProduceToTopicOperator: the stricter rules, on every format."""

from __future__ import annotations

import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from txn_broker import guess_format, read_records
from txn_broker.errors import InvalidInputError, SchemaMismatchError

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string()), ("raw", pa.binary())])


def test_a_column_the_topic_lacks_is_an_error_in_every_format(tmp_path):
    csv = tmp_path / "a.csv"
    csv.write_text("id,name,extra\n1,a,x\n")
    jsonl = tmp_path / "a.jsonl"
    jsonl.write_text(json.dumps({"id": 1, "name": "a", "extra": "x"}) + "\n")
    parquet = tmp_path / "a.parquet"
    pq.write_table(pa.table({"id": [1], "extra": ["x"]}), parquet)
    for path in (csv, jsonl, parquet):
        with pytest.raises(SchemaMismatchError, match="extra"):
            read_records(path, SCHEMA)


def test_missing_columns_are_null_unless_not_nullable(tmp_path):
    ok = tmp_path / "ok.csv"
    ok.write_text("id\n1\n2\n")
    assert read_records(ok, SCHEMA).to_pylist() == [{"id": 1, "name": None, "raw": None},
                                                    {"id": 2, "name": None, "raw": None}]
    bad = tmp_path / "bad.csv"
    bad.write_text("name\na\n")
    with pytest.raises(SchemaMismatchError, match="non-nullable"):
        read_records(bad, SCHEMA)


def test_csv_empty_cells_are_null_and_quoted_empty_strings_stay(tmp_path):
    path = tmp_path / "e.csv"
    path.write_text('id,name,raw\n1,,\n2,"",aGk=\n')
    assert read_records(path, SCHEMA).to_pylist() == [{"id": 1, "name": None, "raw": None},
                                                      {"id": 2, "name": "", "raw": b"hi"}]


def test_tsv_and_gzip(tmp_path):
    path = tmp_path / "t.tsv.gz"
    with gzip.open(path, "wt") as handle:
        handle.write("id\tname\n7\tseven\n")
    assert guess_format(str(path)) == "csv"
    assert read_records(path, SCHEMA).to_pylist() == [{"id": 7, "name": "seven", "raw": None}]


def test_unknown_format_and_unreadable_file(tmp_path):
    with pytest.raises(InvalidInputError, match="format"):
        read_records(tmp_path / "x.txt", SCHEMA)
    with pytest.raises(InvalidInputError, match="cannot read"):
        read_records(tmp_path / "missing.csv", SCHEMA)
