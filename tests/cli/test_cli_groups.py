"""``txn-broker groups ...`` through the console script, on both backends."""

from __future__ import annotations

import pyarrow as pa
import pytest
from _cli import error_line, run, run_json

from txn_broker import TopicPartition

pytestmark = pytest.mark.integration
SCHEMA = pa.schema([("v", pa.int64())])


def test_groups_list_describe_reset(backend):
    broker = backend.connect()
    broker.create_topic("t", partitions=2, schema=SCHEMA)
    tp0, tp1 = TopicPartition("t", 0), TopicPartition("t", 1)
    producer = broker.producer()
    producer.send("t", [{"v": i} for i in range(5)], partition=0)
    producer.send("t", [{"v": i} for i in range(3)], partition=1)
    producer.flush()
    broker.commit_offsets("g1", {tp0: 2, tp1: 3})
    broker.commit_offsets("g2", {tp0: 0})
    # an open transaction holds partition 0's last stable offset at 5 while its high watermark is 9
    txn = broker.producer(transactional_id="open.txn")
    txn.init_transactions()
    txn.begin_transaction()
    txn.send("t", [{"v": i} for i in range(4)], partition=0)
    txn.flush()

    listing = run_json(backend, "groups", "list")
    assert listing == {"groups": [
        {"group_id": "g1", "topics": ["t"], "partition_count": 2, "lag": 3},
        {"group_id": "g2", "topics": ["t"], "partition_count": 1, "lag": 5},
    ]}
    table = run(backend, "groups", "list").out.splitlines()
    assert table[0].split() == ["GROUP", "TOPICS", "PARTITIONS", "LAG"]
    assert table[1].split() == ["g1", "t", "2", "3"]

    described = run_json(backend, "groups", "describe", "g1")
    assert set(described) == {"group_id", "lag", "partitions"} and described["lag"] == 3
    p0 = described["partitions"][0]
    assert set(p0) == {"topic", "partition", "committed_offset", "log_start_offset", "last_stable_offset",
                       "high_watermark", "lag", "commit_ms"}
    assert (p0["committed_offset"], p0["last_stable_offset"], p0["high_watermark"], p0["lag"]) == (2, 5, 9, 3)
    text = run(backend, "groups", "describe", "g1").out.splitlines()
    assert text[0] == "Group g1: lag 3"
    assert text[1].split()[:7] == ["TOPIC", "PARTITION", "COMMITTED_OFFSET", "LOG_START_OFFSET",
                                   "LAST_STABLE_OFFSET", "HIGH_WATERMARK", "LAG"]
    assert text[2].split()[:7] == ["t", "0", "2", "0", "5", "9", "3"]
    assert "group 'nope' has no committed offsets" in error_line(run(backend, "groups", "describe", "nope",
                                                                     expect=2))

    reset = run_json(backend, "groups", "reset-offsets", "g1", "--topic", "t", "--to-earliest")
    assert reset == {"group_id": "g1", "topic": "t", "dry_run": False, "partitions": [
        {"partition": 0, "previous_offset": 2, "new_offset": 0},
        {"partition": 1, "previous_offset": 3, "new_offset": 0}]}
    # latest = the last stable offset, never past an open transaction
    latest = run(backend, "groups", "reset-offsets", "g1", "--topic", "t", "--to-latest")
    assert latest.out.splitlines()[0] == "Reset group g1 on topic t:"
    assert broker.committed_offsets("g1", [tp0, tp1]) == {tp0: 5, tp1: 3}
    dry = run_json(backend, "groups", "reset-offsets", "g1", "--topic", "t", "--to-offset", "1", "--dry-run")
    assert dry["dry_run"] is True and [p["new_offset"] for p in dry["partitions"]] == [1, 1]
    assert broker.committed_offsets("g1", [tp0, tp1]) == {tp0: 5, tp1: 3}
    past = run(backend, "groups", "reset-offsets", "g1", "--topic", "t", "--to-offset", "4", expect=2)
    assert "past the high watermark 3 of t-1" in error_line(past)
    assert broker.committed_offsets("g1", [tp0, tp1]) == {tp0: 5, tp1: 3}
    txn.abort_transaction()
    txn.close()


def test_reset_offsets_to_datetime(backend):
    """``--to-datetime``: per partition, the first offset whose record is at or after the
    time (Kafka's offsetsForTimes), found through the segments' max timestamps and then
    inside the one segment; past the last record: the last stable offset (issue 28)."""
    import time
    from datetime import UTC, datetime

    broker = backend.connect()
    broker.create_topic("dated", partitions=2, schema=SCHEMA)
    tp0, tp1 = TopicPartition("dated", 0), TopicPartition("dated", 1)
    producer = broker.producer()
    producer.send("dated", [{"v": i} for i in range(4)], partition=0)
    producer.flush()  # one segment: offsets 0-3 before the cut
    time.sleep(0.05)
    producer.send("dated", [{"v": i} for i in range(3)], partition=1)  # offsets 0-2 of p1 before the cut
    time.sleep(0.05)
    cut = datetime.now(UTC)
    time.sleep(0.05)
    producer.send("dated", [{"v": i} for i in range(2)], partition=1)  # p1 offsets 3-4, same segment as 0-2
    producer.send("dated", [{"v": i} for i in range(5)], partition=0)  # p0 offsets 4-8
    producer.flush()
    broker.commit_offsets("stage", {tp0: 9, tp1: 5})

    iso = cut.isoformat().replace("+00:00", "Z")
    assert broker.offsets_for_times([tp0, tp1], int(cut.timestamp() * 1000)) == {tp0: 4, tp1: 3}
    dry = run_json(backend, "groups", "reset-offsets", "stage", "--topic", "dated", "--to-datetime", iso,
                   "--dry-run")
    assert [p["new_offset"] for p in dry["partitions"]] == [4, 3]
    assert broker.committed_offsets("stage", [tp0, tp1]) == {tp0: 9, tp1: 5}
    done = run(backend, "groups", "reset-offsets", "stage", "--topic", "dated", "--to-datetime", iso)
    assert done.out.splitlines()[0] == "Reset group stage on topic dated:"
    assert broker.committed_offsets("stage", [tp0, tp1]) == {tp0: 4, tp1: 3}
    # before everything: the log start; after everything: the end
    run(backend, "groups", "reset-offsets", "stage", "--topic", "dated", "--to-datetime", "2000-01-01")
    assert broker.committed_offsets("stage", [tp0, tp1]) == {tp0: 0, tp1: 0}
    run(backend, "groups", "reset-offsets", "stage", "--topic", "dated", "--to-datetime", "2999-01-01T00:00:00+02:00")
    assert broker.committed_offsets("stage", [tp0, tp1]) == {tp0: 9, tp1: 5}
    bad = run(backend, "groups", "reset-offsets", "stage", "--topic", "dated", "--to-datetime", "yesterday",
              expect=2)
    assert "not an ISO 8601 date or time: 'yesterday'" in bad.err
