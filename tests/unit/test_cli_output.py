"""Formatting for people (tables, sizes, durations, times) and value encodings of the CLI."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import io

import pyarrow as pa

from txn_broker import redact, url_secrets
from txn_broker.cli.output import Output, human_bytes, human_duration, iso_ms, render_table
from txn_broker.cli.records_io import json_rows, json_value


def test_table_aligns_numbers_right_and_text_left():
    text = render_table(["NAME", "COUNT", "NOTE"], [["a", 5, None], ["longer", 12345, "x" * 80]])
    lines = text.splitlines()
    assert lines[0] == "NAME    COUNT  NOTE"
    assert lines[1] == "a           5  -"
    assert lines[2].startswith("longer  12345  " + "x" * 59 + "…")
    assert len(lines[2]) == len("longer  12345  ") + 60


def test_table_without_rows_is_its_header():
    assert render_table(["A", "B"], []) == "A  B"


def test_human_units():
    assert [human_bytes(n) for n in (0, 1023, 1536, 5 * 1024**3)] == ["0 B", "1023 B", "1.5 KiB", "5.0 GiB"]
    assert [human_duration(ms) for ms in (5, 1500, 93_500, 7_200_000, 3 * 86_400_000)] == [
        "5ms", "1.5s", "1m33s", "2h00m", "3d00h"]
    assert human_duration(None) == human_bytes(None) == "-"
    assert iso_ms(1714564800123) == "2024-05-01T12:00:00.123Z"


def test_status_lines_only_on_a_terminal():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    quiet, tty = io.StringIO(), Tty()
    Output(err=quiet).progress("load", total_bytes=100).update(10, 50)
    progress = Output(err=tty).progress("load", total_bytes=100)
    progress.update(10, 50)
    assert quiet.getvalue() == ""
    assert tty.getvalue().startswith("\r\033[Kload  [############............]  50%  10 records  50 B")


def test_json_values():
    assert json_value(b"\x00\xff") == base64.b64encode(b"\x00\xff").decode()
    assert json_value(b"text", "utf8") == "text"
    assert json_value(float("nan")) == "NaN" and json_value(float("-inf")) == "-Infinity"
    zoned = dt.datetime(2024, 5, 1, 14, 0, 0, 123000, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    assert json_value(zoned) == "2024-05-01T12:00:00.123Z"
    assert json_value(dt.datetime(2024, 5, 1, 12, 0, 0, 123456)) == "2024-05-01T12:00:00.123456"
    assert json_value(dt.date(2024, 5, 1)) == "2024-05-01"
    assert json_value(decimal.Decimal("12.50")) == "12.50"
    assert json_value([("a", b"x")]) == {"a": "eA=="}
    assert json_value([(1, "one")]) == [[1, "one"]]
    table = pa.table({"m": pa.array([[("k", 1)]], pa.map_(pa.string(), pa.int64())),
                      "s": pa.array([{"x": 1.5}])})
    assert list(json_rows(table)) == [{"m": {"k": 1}, "s": {"x": 1.5}}]


def test_redaction():
    url = "postgresql+psycopg2://bob:pa55@db.example/x"
    assert url_secrets(url) == ["pa55"]
    assert redact(f"cannot reach {url}", url_secrets(url)) == \
        "cannot reach postgresql+psycopg2://bob:***@db.example/x"
    assert redact("see s3://k:secret@host and pa55 again", ["pa55"]) == "see s3://k:***@host and *** again"
    assert url_secrets("not a url: user:pw@") == ["not a url: user:pw@"]


def _read_jsonl(text, schema, binary_encoding="base64"):
    from txn_broker import RecordSource as Source

    source = Source("in.jsonl", "jsonl", schema, io.BytesIO(text.encode()), None, None, binary_encoding)
    return pa.concat_tables(table for table, _ in source.chunks())


def test_what_consume_prints_produce_reads_back():
    import json

    from txn_broker.log.batches import DEFAULT_SCHEMA

    schema = pa.schema([*DEFAULT_SCHEMA, pa.field("at", pa.timestamp("ms", tz="UTC")),
                        pa.field("s", pa.struct([("ts", pa.timestamp("ms", tz="UTC")), ("d", pa.decimal128(5, 2)),
                                                 ("f", pa.list_(pa.float64()))])),
                        pa.field("m", pa.map_(pa.int32(), pa.binary()))])
    table = pa.table({
        "key": [b"k\x00", None], "value": [b"\xff\xfe", b""], "headers": [[("trace", b"\x01")], []],
        "at": pa.array([1714564800123, None], pa.timestamp("ms", tz="UTC")),
        "s": [{"ts": dt.datetime(2024, 5, 1, tzinfo=dt.UTC), "d": decimal.Decimal("1.50"),
               "f": [1.5, float("nan")]}, None],
        "m": [[(7, b"seven")], None],
    }, schema=schema)
    text = "".join(json.dumps(row) + "\n" for row in json_rows(table))
    back = _read_jsonl(text, schema)
    assert back.schema.equals(schema)
    assert back.slice(1).equals(table.slice(1))
    assert back.column("s")[0].as_py()["f"][1] != back.column("s")[0].as_py()["f"][1]  # NaN survived
    for name in ("key", "value", "headers", "at", "m"):
        assert back.column(name).equals(table.column(name)), name


def test_jsonl_errors_name_line_column_and_value():
    import pytest

    from txn_broker.errors import InvalidInputError, SchemaMismatchError

    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("tags", pa.list_(pa.string()))])
    cases = [
        ('{"id": 1}\n{"id": "x"}\n', SchemaMismatchError, "in.jsonl line 2: column 'id' (int64) cannot hold \"x\""),
        ('{"id": 1}\n{"tags": []}\n', SchemaMismatchError, "line 2: column 'id' is not nullable"),
        ('{"id": 1, "tags": "a"}\n', SchemaMismatchError, "line 1: column 'tags'"),
        ('{"id": 1}\n[1]\n', SchemaMismatchError, "line 2: expected a JSON object"),
        ('{"id": 1}\n\n{"id": 2,,}\n', InvalidInputError, "line 3: not valid JSON"),
    ]
    for text, error, message in cases:
        with pytest.raises(error) as raised:
            _read_jsonl(text, schema)
        assert message in str(raised.value), (text, str(raised.value))
    mixed = _read_jsonl('{"id": 1.0}\n{"id": "2"}\n{"id": 3}\n', schema)
    assert mixed.column("id").to_pylist() == [1, 2, 3]
