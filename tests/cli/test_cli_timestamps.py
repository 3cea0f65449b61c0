"""Timestamps outside years 1..9999 (what every reader can show) are refused at produce,
through the CLI and the Python API, with nothing written; a consumer of data written before
the rule still prints every record, valid ones before and after the bad one included."""

from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa
import pytest
from _cli import error_line, run

from txn_broker import TopicPartition
from txn_broker.errors import TimestampOutOfRangeError
from txn_broker.log import batches

pytestmark = pytest.mark.integration

SCHEMA = pa.schema([pa.field("id", pa.string()), pa.field("ts", pa.timestamp("ms", tz="UTC")),
                    pa.field("days", pa.list_(pa.date32()))])
YEAR_10000_MS = 253402300800000


def _written(broker, topic: str) -> int:
    return broker.end_offsets([TopicPartition(topic, 0)])[TopicPartition(topic, 0)]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # the rule is the producer's, not the backend's
def test_far_out_timestamps_are_refused_at_produce(backend, tmp_path):
    broker = backend.connect()
    broker.create_topic("times", partitions=1, schema=SCHEMA)
    # the CLI: exit 2, one typed error line, nothing written (the valid line before included)
    path = tmp_path / "in.jsonl"
    path.write_text(json.dumps({"id": "x", "ts": 1_700_000_000_000}) + "\n"
                    + json.dumps({"id": "y", "ts": YEAR_10000_MS}) + "\n")
    line = error_line(run(backend, "produce", "times", "--file", str(path), expect=2))
    assert "'ts'" in line and "years 1..9999" in line
    # the Python API: each way of sending, nested dates included
    producer = broker.producer()
    for data in ([{"id": "y", "ts": -2**62}],
                 [{"id": "y", "days": [dt.date(2024, 1, 1), None]}, {"id": "z", "days": [2**31 - 1]}],
                 pa.table({"id": ["y"], "ts": pa.array([YEAR_10000_MS], pa.timestamp("ms", tz="UTC")),
                           "days": pa.array([None], pa.list_(pa.date32()))})):
        with pytest.raises(TimestampOutOfRangeError):
            producer.send("times", data)
    # the ends themselves are fine (a zoned column keeps a day away from them)
    producer.send("times", [{"id": "first", "ts": dt.datetime(1, 1, 2, tzinfo=dt.UTC)},
                            {"id": "last", "ts": dt.datetime(9999, 12, 30, tzinfo=dt.UTC),
                             "days": [dt.date(1, 1, 1), dt.date(9999, 12, 31)]}])
    producer.flush()
    assert _written(broker, "times") == 2
    consumed = run(backend, "consume", "times", "--from-beginning").out.splitlines()
    assert [json.loads(r)["id"] for r in consumed] == ["first", "last"]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_consumer_prints_every_record_around_one_written_before_the_rule(backend, monkeypatch):
    broker = backend.connect()
    broker.create_topic("old", partitions=1, schema=SCHEMA)
    monkeypatch.setattr(batches, "check_time_range", lambda table, topic: None)  # as before issue 31
    producer = broker.producer()
    producer.send("old", [{"id": "a", "ts": 0}, {"id": "bad", "ts": YEAR_10000_MS}, {"id": "c", "ts": 5}])
    producer.flush()
    result = run(backend, "consume", "old", "--from-beginning")
    rows = [json.loads(r) for r in result.out.splitlines()]
    assert [r["id"] for r in rows] == ["a", "bad", "c"]
    assert rows[0]["ts"] == "1970-01-01T00:00:00.000Z" and rows[1]["ts"] == YEAR_10000_MS
    table = run(backend, "consume", "old", "--from-beginning", "--format", "table").out
    assert "bad" in table and str(YEAR_10000_MS) in table
