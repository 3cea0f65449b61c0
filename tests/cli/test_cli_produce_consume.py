"""``txn-broker produce`` and ``consume`` through the console script, on both backends."""

from __future__ import annotations

import base64
import json
import os
import pty
import subprocess

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _cli import TXN_BROKER, cli_env, error_line, run, run_json

from txn_broker import TopicPartition
from txn_broker.log.batches import key_partitions

pytestmark = pytest.mark.integration

SCHEMA = pa.schema([
    pa.field("id", pa.int64(), nullable=False),
    pa.field("name", pa.string()),
    pa.field("amount", pa.float64()),
    pa.field("ts", pa.timestamp("ms", tz="UTC")),
    pa.field("raw", pa.binary()),
    pa.field("tags", pa.list_(pa.string())),
])
META = ["_topic", "_partition", "_offset", "_timestamp"]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_produce_every_format_then_consume(backend, tmp_path):
    broker = backend.connect()
    broker.create_topic("orders", partitions=3, schema=SCHEMA)
    jsonl = write_jsonl(tmp_path / "in.jsonl", [
        {"id": 1, "name": "a", "amount": 1.5, "ts": "2024-05-01T12:00:00.123Z",
         "raw": base64.b64encode(b"\x00\xffbytes").decode(), "tags": ["x", "y"]},
        {"id": 2, "name": "b", "amount": "NaN", "ts": 1714564800000},
        {"id": 3},
        {"id": 1, "name": "same key as the first"},
    ])
    produced = run_json(backend, "produce", "orders", "--file", jsonl, "--key", "id")
    assert set(produced) == {"topic", "records", "transactional_id", "producer_id", "producer_epoch", "partitions"}
    assert produced["records"] == 4 and produced["transactional_id"] is None
    assert sum(p["records"] for p in produced["partitions"]) == 4
    assert all(set(p) == {"partition", "first_offset", "last_offset", "records"} for p in produced["partitions"])

    csv = "id,name,amount,ts,raw\n4,d,2.5,2024-05-01T12:00:00Z,aGk=\n5,e,,,\n"
    human = run(backend, "produce", "orders", "--file", "-", "--format", "csv", stdin=csv)
    assert human.out.splitlines()[0] == "Produced 2 records to orders."
    assert human.err == ""  # no progress bar when stderr is not a terminal

    parquet = tmp_path / "in.parquet"
    pq.write_table(pa.table({"id": pa.array([6, 7], pa.int32()), "name": ["f", "g"],
                             "tags": [["p"], None]}), parquet)
    run(backend, "produce", "orders", "--file", str(parquet))

    records = run(backend, "consume", "orders", "--from-beginning").jsonl()
    assert len(records) == 8
    assert list(records[0]) == [*META, *SCHEMA.names]
    by_id = {}
    for r in records:
        by_id.setdefault(r["id"], []).append(r)
    first = by_id[1][0] if by_id[1][0]["name"] == "a" else by_id[1][1]
    assert base64.b64decode(first["raw"]) == b"\x00\xffbytes"
    assert (first["ts"], first["amount"], first["tags"]) == ("2024-05-01T12:00:00.123Z", 1.5, ["x", "y"])
    assert (by_id[2][0]["amount"], by_id[2][0]["ts"]) == ("NaN", "2024-05-01T12:00:00.000Z")
    assert by_id[4][0]["raw"] == "aGk=" and by_id[5][0]["amount"] is None
    assert by_id[6][0]["tags"] == ["p"] and by_id[7][0]["tags"] is None
    # --key: a stable hash of the column, so equal keys share a partition
    expected = key_partitions(pa.array([1, 2, 3]), 3)
    for key, partition in zip([1, 2, 3], expected, strict=True):
        assert {r["_partition"] for r in by_id[key]} == {int(partition)}

    # what consume prints, produce reads back unchanged
    copy = write_jsonl(tmp_path / "copy.jsonl", [{k: v for k, v in r.items() if not k.startswith("_")}
                                                  for r in records])
    broker.create_topic("copy", partitions=1, schema=SCHEMA)
    run(backend, "produce", "copy", "--file", copy)
    copied = run(backend, "consume", "copy", "--from-beginning", "--isolation-level", "read_uncommitted").jsonl()
    assert [{k: v for k, v in r.items() if not k.startswith("_")} for r in copied] == \
        [{k: v for k, v in r.items() if not k.startswith("_")} for r in records]

    # a group: --max-records, --commit, then resume where it stopped, then caught up
    part = run(backend, "consume", "orders", "--group", "g", "--from-beginning", "--max-records", "3", "--commit")
    assert len(part.jsonl()) == 3 and "committed offsets of group 'g'" in part.err
    rest = run(backend, "consume", "orders", "--group", "g", "--commit").jsonl()
    assert len(rest) == 5
    assert sorted((r["_partition"], r["_offset"]) for r in part.jsonl() + rest) == \
        sorted((r["_partition"], r["_offset"]) for r in records)
    assert run(backend, "consume", "orders", "--group", "g").out == ""
    committed = broker.committed_offsets("g", [TopicPartition("orders", p) for p in range(3)])
    assert committed == {tp: hw for tp, hw in broker.end_offsets(committed).items()}

    # without a group or --from-beginning: start at the end, print nothing
    assert run(backend, "consume", "orders").out == ""
    table = run(backend, "consume", "orders", "--from-beginning", "--max-records", "2", "--format", "table")
    lines = table.out.splitlines()
    assert lines[0].split() == ["TOPIC", "PARTITION", "OFFSET", "TIMESTAMP", "ID", "NAME", "AMOUNT", "TS", "RAW",
                                "TAGS"]
    assert len(lines) == 3


def test_transactional_produce_is_all_or_nothing(backend, tmp_path):
    broker = backend.connect()
    broker.create_topic("t", partitions=2, schema=pa.schema([pa.field("id", pa.int64(), nullable=False),
                                                             ("v", pa.string())]))
    good = write_jsonl(tmp_path / "good.jsonl", [{"id": i, "v": f"v{i}"} for i in range(10)])
    committed = run_json(backend, "produce", "t", "--file", good, "--transactional-id", "load.1")
    assert committed["transactional_id"] == "load.1" and committed["records"] == 10
    assert broker.describe_transaction("load.1").state == "CompleteCommit"

    # the first 20,000-record chunk is sent before line 25,001 turns out to be bad
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(f'{{"id": {i}, "v": "x"}}\n' for i in range(25_000)) + '{"id": "oops"}\n')
    failed = run(backend, "produce", "t", "--file", str(bad), "--transactional-id", "load.2", expect=2)
    assert "line 25001" in error_line(failed) and "'id'" in error_line(failed)
    aborted = broker.describe_transaction("load.2")
    assert aborted.state == "CompleteAbort" and aborted.partitions  # it had started, then aborted
    assert sum(broker.end_offsets([TopicPartition("t", p) for p in range(2)], "read_uncommitted").values()) == 10

    # without a transactional id, the chunks sent before the error stay
    run(backend, "produce", "t", "--file", str(bad), expect=2)
    assert sum(broker.end_offsets([TopicPartition("t", p) for p in range(2)]).values()) == 10 + 20_000


def test_produce_errors(backend, tmp_path):
    broker = backend.connect()
    broker.create_topic("t", schema=pa.schema([pa.field("id", pa.int64(), nullable=False)]))
    path = write_jsonl(tmp_path / "in.jsonl", [{"id": 1}, {"id": 2, "extra": True}])
    cases = [
        (["produce", "t", "--file", path], "line 2: the topic has no column(s) ['extra']"),
        (["produce", "nope", "--file", path], "unknown topic 'nope'"),
        (["produce", "t", "--file", path, "--key", "nope"], "--key 'nope' is not a column"),
    ]
    for args, expected in cases:
        assert expected in error_line(run(backend, *args, expect=2))
    assert "--format" in error_line(run(backend, "produce", "t", "--file", str(tmp_path / "in.txt"), expect=2))
    assert broker.describe_topic("t").partitions[0].high_watermark == 0


def test_produce_shows_progress_on_a_terminal(backend, tmp_path):
    backend.connect().create_topic("t", schema=pa.schema([("id", pa.int64())]))
    path = write_jsonl(tmp_path / "in.jsonl", [{"id": i} for i in range(50_000)])
    leader, follower = pty.openpty()
    proc = subprocess.Popen([str(TXN_BROKER), "produce", "t", "--file", path], env=cli_env(backend),
                            stdout=subprocess.PIPE, stderr=follower)
    os.close(follower)
    seen = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    out, _ = proc.communicate(timeout=300)
    os.close(leader)
    assert proc.returncode == 0, seen
    assert b"Produced 50,000 records" in out
    assert b"produce t  [" in seen and b"records" in seen and b"\r" in seen
