"""Driver-side planning without Spark, on both backends: resolving offsets (one snapshot,
group offsets, JSON, errors) and cutting offset ranges into splits of visible segments."""

from __future__ import annotations

import pyarrow as pa
import pytest

from txn_broker import TopicPartition
from txn_broker.errors import InvalidConfigError, OffsetOutOfRangeError, UnknownTopicOrPartitionError
from txn_broker.spark import resolve_offsets
from txn_broker.spark.offsets import OffsetRanges, parse_offsets
from txn_broker.spark.planning import count_visible, plan_splits

pytestmark = pytest.mark.integration

SCHEMA = pa.schema([("id", pa.int64())])


def make(broker, partitions: int = 2, segments: int = 4, per_segment: int = 25) -> None:  # type: ignore[no-untyped-def]
    broker.create_topic("t", partitions=partitions, schema=SCHEMA)
    producer = broker.producer(transactional_id="planner")
    producer.init_transactions()
    with producer.transaction():
        for s in range(segments):
            for p in range(partitions):
                producer.send("t", [{"id": s * per_segment + i} for i in range(per_segment)], partition=p)
            producer.flush()
    producer.close()


def test_resolve_offsets(broker) -> None:  # type: ignore[no-untyped-def]
    make(broker)
    ranges = resolve_offsets(broker, "t")
    assert [(r.partition, r.start, r.end) for r in ranges] == [(0, 0, 100), (1, 0, 100)]
    assert OffsetRanges.from_json(ranges.to_json()) == ranges
    again = resolve_offsets(broker, "t", ranges.starting_json(), ranges.ending_json())
    assert again.ranges == ranges.ranges
    broker.commit_offsets("g", {TopicPartition("t", 0): 60})
    grouped = resolve_offsets(broker, "t", "latest", group_id="g")
    assert [(r.start, r.end) for r in grouped] == [(60, 100), (100, 100)]
    assert resolve_offsets(broker, "t", '{"t": {"1": 10}}', '{"t": {"1": 20}}').starting() == {
        TopicPartition("t", 0): 0, TopicPartition("t", 1): 10}
    with pytest.raises(OffsetOutOfRangeError, match="before the start"):
        resolve_offsets(broker, "t", '{"t": {"0": 50}}', '{"t": {"0": 40}}')
    with pytest.raises(OffsetOutOfRangeError, match="past the high watermark"):
        resolve_offsets(broker, "t", '{"t": {"0": 500}}')
    with pytest.raises(InvalidConfigError, match="not read"):
        resolve_offsets(broker, "t", '{"other": {"0": 1}}')
    with pytest.raises(UnknownTopicOrPartitionError):
        resolve_offsets(broker, "t", '{"t": {"9": 1}}')
    for bad in ("yesterday", "[1]", '{"t": {"0": "x"}}', '{"t": {"0": -3}}'):
        with pytest.raises(InvalidConfigError):
            parse_offsets("startingOffsets", bad, -2)


def test_splits_cover_every_visible_record_once(broker) -> None:  # type: ignore[no-untyped-def]
    make(broker)
    aborted = broker.producer(transactional_id="aborter")
    aborted.init_transactions()
    aborted.begin_transaction()
    aborted.send("t", [{"id": 999}] * 10, partition=0)
    aborted.flush()
    aborted.abort_transaction()
    ranges = resolve_offsets(broker, "t")
    assert ranges.ending()[TopicPartition("t", 0)] == 110

    def covered(splits) -> list[tuple[int, int]]:  # type: ignore[no-untyped-def]
        return sorted((s.partition, o) for s in splits for seg in s.segments for o in range(seg.start, seg.end))

    whole = plan_splits(broker, ranges, max_bytes=2**40)
    assert len(whole) == 2
    expected = [(p, o) for p in (0, 1) for o in range(100)]  # the aborted offsets 100..109 are skipped
    assert covered(whole) == expected
    by_records = plan_splits(broker, ranges, max_bytes=2**40, max_records=30)
    assert len(by_records) >= 8 and max(s.records for s in by_records) <= 30
    assert covered(by_records) == expected
    many = plan_splits(broker, ranges, max_bytes=2**40, min_partitions=16)
    assert len(many) == 16 and covered(many) == expected
    for splits in (whole, by_records, many):  # splits of a partition tile its range
        for p in (0, 1):
            mine = sorted((s.start, s.end) for s in splits if s.partition == p)
            assert mine[0][0] == 0 and mine[-1][1] == (110 if p == 0 else 100)
            assert all(a[1] == b[0] for a, b in zip(mine, mine[1:], strict=False))
    assert count_visible(broker, ranges) == {"t": 200}
    uncommitted = resolve_offsets(broker, "t", isolation_level="read_uncommitted")
    assert count_visible(broker, uncommitted) == {"t": 210}


def test_a_compacted_segment_is_planned_with_its_records(broker) -> None:  # type: ignore[no-untyped-def]
    broker.create_topic("c", partitions=1, schema=SCHEMA, config={"min.compaction.lag.ms": 0})
    producer = broker.producer(transactional_id="compacted")
    producer.init_transactions()
    for t in range(8):
        producer.begin_transaction()
        producer.send("c", [{"id": t * 10 + i} for i in range(10)], partition=0)
        producer.flush()
        producer.abort_transaction() if t % 4 == 3 else producer.commit_transaction()
    producer.close()
    assert broker.compact().segments_written == 1
    ranges = resolve_offsets(broker, "c")
    (whole,) = plan_splits(broker, ranges, max_bytes=2**40)
    (segment,) = whole.segments
    assert (segment.start, segment.end, segment.row_count, segment.records) == (0, 80, 60, 60)
    assert count_visible(broker, ranges) == {"c": 60}  # exact for whole segments
    halves = plan_splits(broker, ranges, max_bytes=2**40, min_partitions=2)
    assert [(s.start, s.end) for s in halves] == [(0, 40), (40, 80)]
