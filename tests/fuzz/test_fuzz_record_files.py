"""Record files that are malformed in every way a file can be (issue 31): the four that used
to escape as untyped errors (a CSV header naming a column twice, JSON nested 100,000 deep,
an integer of more than 4300 digits, a corrupt .gz), a JSON Lines line longer than the
topic's bound (standard input fed from /dev/zero included), and a Hypothesis fuzzer that
mutates valid CSV, JSON Lines and Parquet files (plain and gzipped) of a typed topic. Each is
a success or exit 2 with one typed error, never anything else, and a refused file leaves
nothing written. The CLI runs in-process, as in test_fuzz_cli.py."""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fuzz.conftest import unique
from fuzz.test_fuzz_cli import run_cli, visible
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import txn_broker
from txn_broker.errors import InvalidInputError

pytestmark = pytest.mark.integration

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("name", pa.string()),
                    pa.field("ts", pa.timestamp("ms", tz="UTC")), pa.field("raw", pa.binary()),
                    pa.field("tags", pa.list_(pa.string()))])
ROWS = [{"id": 1, "name": "a", "ts": "2024-01-01T00:00:00Z", "raw": "eA==", "tags": ["x"]},
        {"id": 2, "name": "é,\"b\"", "ts": 1_700_000_000_000, "raw": None, "tags": []}]
HOSTILE = [b"[" * 5000, b"9" * 5000, b"\x00\xff", b'"ts":253402300800000', b"id,id\n", b"\r\n\r\n", b'\\ud800"',
           b"\x1f\x8b\x08"]


def _valid(fmt: str) -> bytes:
    if fmt == "jsonl":
        return "".join(json.dumps(r) + "\n" for r in ROWS).encode()
    if fmt == "csv":
        return b'id,name,ts,raw\n1,a,2024-01-01T00:00:00Z,eA==\n2,"\xc3\xa9,""b""",2023-11-14T22:13:20Z,\n'
    out = io.BytesIO()
    pq.write_table(txn_broker.read_records(_write(_valid("jsonl"), ".jsonl"), SCHEMA), out)
    return out.getvalue()


def _write(data: bytes, suffix: str) -> str:
    with tempfile.NamedTemporaryFile(suffix=suffix, delete=False) as f:
        f.write(data)
    return f.name


def _produce(broker, data: bytes, suffix: str) -> tuple[int, str, int]:
    """(exit code, stderr, records visible) of producing the file into a fresh topic."""
    topic = unique("files")
    broker.create_topic(topic, partitions=1, schema=SCHEMA)
    path = _write(data, suffix)
    try:
        code, _out, stderr = run_cli(broker, "produce", topic, "--file", path, "--transactional-id", "f-" + topic)
        try:  # the library's reader: the same answer
            txn_broker.read_records(path, SCHEMA)
            read_ok = True
        except InvalidInputError:
            read_ok = False
    finally:
        os.unlink(path)
    assert (code == 0) == read_ok, (code, stderr)
    return code, stderr, visible(broker, topic)


@pytest.mark.parametrize("broker", ["sqlite"], indirect=True)  # reading files is the same on both
def test_the_four_malformed_files_of_issue_31_exit_2(broker):
    cases = {
        ".csv": b"id,name,id\n1,a,2\n",
        ".jsonl": b'{"id": 1, "tags": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n",
        ".json": b'{"id": ' + b"7" * 4301 + b"}\n",
        ".jsonl.gz": gzip.compress(_valid("jsonl"))[:-10] + b"corrupt",
        ".csv.gz": b"\x1f\x8b\x08\x00 not gzip at all",
    }
    for suffix, data in cases.items():
        code, stderr, written = _produce(broker, data, suffix)
        assert code == 2 and written == 0, (suffix, stderr)
        assert stderr.startswith("error: ") and len(stderr.strip().splitlines()) == 1, stderr


@pytest.mark.parametrize("broker", ["sqlite"], indirect=True)
def test_a_line_longer_than_the_topic_allows_is_refused_without_reading_it_all(broker, tmp_path):
    topic = unique("long")
    broker.create_topic(topic, partitions=1, schema=SCHEMA, config={"max.message.bytes": 1000})
    path = tmp_path / "long.jsonl"
    path.write_text(json.dumps(ROWS[0]) + "\n" + json.dumps({"id": 3, "name": "x" * 9000}) + "\n")
    code, _out, stderr = run_cli(broker, "produce", topic, "--file", str(path))
    assert code == 2 and "line 2 is longer than 8000 bytes" in stderr, stderr
    assert visible(broker, topic) == 0
    # an endless line on standard input, in a real process: refused after 8 KB, not after
    # memory ran out
    url = broker._db.url.render_as_string(hide_password=False)
    with open("/dev/zero", "rb") as zeros:
        run = subprocess.run([str(Path(sys.executable).with_name("txn-broker")), "--database-url", url,
                              "--storage-url", broker._store.url, "produce", topic, "--file", "-",
                              "--format", "jsonl"], stdin=zeros, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "line 1 is longer than 8000 bytes" in run.stderr, run.stderr


def _mutate(data: bytes, edits: list[tuple[int, int, int]]) -> bytes:
    out = bytearray(data)
    for kind, pos, value in edits:
        pos %= max(len(out), 1)
        if kind == 0 and out:
            out[pos] = value % 256
        elif kind == 1:
            del out[pos:]
        elif kind == 2:
            out[pos:pos] = bytes([value % 256])
        else:
            out[pos:pos] = HOSTILE[value % len(HOSTILE)]
    return bytes(out)


@pytest.mark.parametrize("broker", ["sqlite"], indirect=True)
@settings(max_examples=120, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(fmt=st.sampled_from(["jsonl", "csv", "parquet"]), gz=st.booleans(),
       edits=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 10_000), st.integers(0, 255)), max_size=4))
@example(fmt="csv", gz=False, edits=[(3, 0, 4)])  # a duplicate header
@example(fmt="jsonl", gz=False, edits=[(3, 7, 0)])  # deep nesting
@example(fmt="jsonl", gz=True, edits=[(1, 30, 0)])  # a truncated .gz
def test_fuzz_record_files(broker, fmt, gz, edits):
    data = _mutate(_valid(fmt), edits)
    suffix = "." + fmt
    if gz:
        data, suffix = (gzip.compress(data) if len(edits) % 2 else _mutate(gzip.compress(data), edits)), suffix + ".gz"
    code, stderr, written = _produce(broker, data, suffix)
    assert code in (0, 2), stderr
    if code:
        assert written == 0, "a refused file leaves nothing written"
