"""Deleting records (Broker.delete_records, Kafka's DeleteRecords; docs/semantics.md
"Deleting records") on both backends: the log start moves inside a segment and every
reader starts there; segments wholly below go (objects queued, then deleted by gc);
offsets past the high watermark are refused with nothing changed; an open transaction's
records may go and the last stable offset never lies below the log start; retention,
compaction and fsck carry on from a log start inside a segment."""

from __future__ import annotations

import pytest

from txn_broker import TopicPartition
from txn_broker.errors import InvalidInputError, OffsetOutOfRangeError, UnknownTopicOrPartitionError
from txn_broker.log.keys import SEGMENT_PREFIX

pytestmark = pytest.mark.integration


def _send(broker, topic: str, partition: int, count: int, first: int = 0) -> None:
    """``count`` records in segments of 3 (one flush each)."""
    p = broker.producer()
    for i in range(first, first + count, 3):
        p.send(topic, [{"key": None, "value": f"v{j}".encode(), "headers": None}
                       for j in range(i, min(i + 3, first + count))], partition=partition)
        p.flush()
    p.close()


def _offsets(broker, topic: str, partition: int, isolation: str = "read_committed") -> list[int]:
    consumer = broker.consumer(isolation_level=isolation)
    consumer.assign([TopicPartition(topic, partition)])
    out: list[int] = []
    while True:
        got = consumer.poll()
        if not got.num_rows:
            break
        out += got["_offset"].to_pylist()
    consumer.close()
    return out


def _objects(broker) -> set[str]:
    return {o.key for o in broker._store.list(SEGMENT_PREFIX)}


def test_delete_records_moves_the_log_start_inside_a_segment_and_readers_start_there(backend):
    broker = backend.connect()
    broker.create_topic("t", partitions=2)
    _send(broker, "t", 0, 12)  # segments 0-2, 3-5, 6-8, 9-11
    _send(broker, "t", 1, 6)
    objects = _objects(broker)

    assert broker.delete_records("t", {0: 7, 1: -1}) == {0: 7, 1: 6}
    assert _offsets(broker, "t", 0) == [7, 8, 9, 10, 11]
    assert _offsets(broker, "t", 0, "read_uncommitted") == [7, 8, 9, 10, 11]
    assert _offsets(broker, "t", 1) == []
    tp0 = TopicPartition("t", 0)
    assert broker.beginning_offsets([tp0]) == {tp0: 7}
    described = broker.describe_topic("t").partitions
    assert [(p.log_start_offset, p.high_watermark, p.segment_count) for p in described] == [(7, 12, 2), (6, 6, 0)]
    consumer = broker.consumer()
    consumer.assign([tp0])
    with pytest.raises(OffsetOutOfRangeError):  # a seek below the log start, as after retention
        consumer.seek(tp0, 2)
    consumer.close()
    assert broker.fsck().ok

    # a lower offset changes nothing; the log start never moves back
    assert broker.delete_records("t", {0: 3}) == {0: 7}
    # the wholly deleted segments' objects are queued, then deleted by gc
    assert _objects(broker) == objects
    broker.gc(delete_delay_ms=0, compact=False)
    assert len(objects - _objects(broker)) == 2 + 2
    assert _offsets(broker, "t", 0) == [7, 8, 9, 10, 11]
    assert broker.fsck().ok


def test_delete_records_refuses_offsets_past_the_high_watermark_and_changes_nothing(backend):
    broker = backend.connect()
    broker.create_topic("t", partitions=2)
    _send(broker, "t", 0, 6)
    _send(broker, "t", 1, 6)
    with pytest.raises(OffsetOutOfRangeError, match="high watermark is 6"):
        broker.delete_records("t", {0: 4, 1: 7})
    with pytest.raises(OffsetOutOfRangeError):
        broker.delete_records("t", {0: -2})
    with pytest.raises(UnknownTopicOrPartitionError):
        broker.delete_records("t", {0: 4, 2: 1})
    with pytest.raises(UnknownTopicOrPartitionError):
        broker.delete_records("missing", {0: 1})
    with pytest.raises(InvalidInputError):
        broker.delete_records("t", {0: "4"})
    with pytest.raises(InvalidInputError):
        broker.delete_records("t", [(0, 4)])
    assert [p.log_start_offset for p in broker.describe_topic("t").partitions] == [0, 0]
    assert _offsets(broker, "t", 0) == list(range(6))


def test_delete_records_into_an_open_transaction(backend):
    """As in Kafka, the bound is the high watermark: an open transaction's records may go;
    the last stable offset is then the log start, and the rest of the transaction is read
    once it commits."""
    broker = backend.connect()
    broker.create_topic("t", partitions=1)
    _send(broker, "t", 0, 3)
    p = broker.producer(transactional_id="open")
    p.init_transactions()
    p.begin_transaction()
    for i in range(3):
        p.send("t", [{"key": None, "value": f"x{i}".encode(), "headers": None}] * 2, partition=0)
        p.flush()  # segments 3-4, 5-6, 7-8
    tp = TopicPartition("t", 0)
    assert broker.end_offsets([tp]) == {tp: 3}

    assert broker.delete_records("t", {0: 6}) == {0: 6}
    assert broker.end_offsets([tp]) == {tp: 6}  # the last stable offset, clamped to the log start
    assert broker.describe_topic("t").partitions[0].last_stable_offset == 6
    assert _offsets(broker, "t", 0) == []
    assert _offsets(broker, "t", 0, "read_uncommitted") == [6, 7, 8]
    p.commit_transaction()
    p.close()
    assert _offsets(broker, "t", 0) == [6, 7, 8]
    assert broker.fsck().ok


def test_retention_and_compaction_carry_on_from_a_log_start_inside_a_segment(backend):
    broker = backend.connect()
    broker.create_topic("r", partitions=1, config={"min.compaction.lag.ms": 0})
    _send(broker, "r", 0, 15)  # 5 segments of 3
    assert broker.delete_records("r", {0: 4}) == {0: 4}
    report = broker.compact(["r"])
    assert report.segments_written == 1  # 6..14 merged; the segment holding the log start stays
    assert _offsets(broker, "r", 0) == list(range(4, 15))
    assert broker.fsck().ok

    broker.alter_topic("r", config={"retention.ms": 1})
    _send(broker, "r", 0, 3, first=15)
    assert broker.gc(delete_delay_ms=10**9, compact=False).retention_segments >= 2
    (part,) = broker.describe_topic("r").partitions
    assert part.log_start_offset >= 6 and part.log_start_offset <= part.high_watermark == 18
    assert _offsets(broker, "r", 0) == list(range(part.log_start_offset, 18))
    assert broker.fsck().ok


def test_delete_records_reaches_the_metrics(backend):
    broker = backend.connect()
    broker.create_topic("m", partitions=1)
    _send(broker, "m", 0, 5)
    broker.delete_records("m", {0: 2})
    (figures,) = [p for p in broker.metrics_figures().partitions if p.topic == "m"]
    assert figures.log_start_offset == 2 and figures.high_watermark == 5


def test_the_semantics_page_example_runs(tmp_path):
    """docs/semantics.md's "Deleting records" example, as printed, in an empty directory."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "semantics.md").read_text()
    section = text.split("## Deleting records", 1)[1]
    (block,) = re.findall(r"^```python\n(.*?)^```", section.split("\n## ", 1)[0], flags=re.S | re.M)
    script = tmp_path / "example.py"
    script.write_text(block)
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
