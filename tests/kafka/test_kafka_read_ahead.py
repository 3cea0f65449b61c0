"""The listener's Fetch path reads the next segment ahead, on both backends: while one
response is sent, the segment the partition's next Fetch will read is fetched and
decoded. What it reads ahead is only what that Fetch may return (nothing past the last
stable offset, nothing a read_committed reader skips), every record still comes once and
in order, and a segment that cannot be read ahead is reported by the Fetch that needs
it, as it was before."""

from __future__ import annotations

import struct
import time

import pytest
import sqlalchemy as sa

from txn_broker.errors import CorruptSegmentError
from txn_broker.kafka.backend import KafkaBackend

pytestmark = pytest.mark.integration

READ_COMMITTED = 1


def records(tag: str, n: int) -> list[dict]:
    return [{"key": f"{tag}{i}".encode(), "value": b"v" * 100, "headers": None} for i in range(n)]


def batches(parts: list[bytes | memoryview]) -> list[tuple[int, int, bool]]:
    """(base offset, last offset, control) of each record batch of a Fetch answer."""
    data, out, pos = b"".join(bytes(p) for p in parts), [], 0
    while pos < len(data):
        base, length = struct.unpack_from(">qi", data, pos)
        attributes, last_delta = struct.unpack_from(">hi", data, pos + 21)
        out.append((base, base + last_delta, bool(attributes & 0x20)))
        pos += 12 + length
    return out


def segment_keys(broker, topic: str) -> list[str]:
    """The object keys of a one-partition topic's segments, in offset order."""
    with broker._db.engine.connect() as conn:
        return list(conn.execute(sa.text(
            "SELECT s.object_key FROM segments s JOIN topics t ON t.topic_id = s.topic_id "
            "WHERE t.name = :name ORDER BY s.base_offset"), {"name": topic}).scalars())


def wait_until(condition, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "not read ahead in time"
        time.sleep(0.01)


@pytest.fixture
def topic(backend):
    """Committed, aborted, committed, committed, then an open transaction: five segments
    of 10 records (offsets 0-49)."""
    broker = backend.connect()
    broker.create_topic("ahead", partitions=1)
    producer = broker.producer(transactional_id="ahead")
    producer.init_transactions()
    for tag, commit in (("a", True), ("x", False), ("b", True), ("c", True)):
        producer.begin_transaction()
        producer.send("ahead", records(tag, 10), partition=0)
        producer.flush()  # stored before the transaction ends (an abort would drop it unsent)
        producer.commit_transaction() if commit else producer.abort_transaction()
    producer.begin_transaction()
    producer.send("ahead", records("open", 10), partition=0)
    producer.flush()
    yield broker, segment_keys(broker, "ahead")
    producer.abort_transaction()
    broker.close()


def test_the_next_segment_is_read_ahead_and_every_record_comes_once(topic):
    broker, keys = topic
    kafka = KafkaBackend(broker)
    first = kafka.fetch("ahead", 0, 0, 500, READ_COMMITTED)  # a few records of the first segment
    assert first.last_stable_offset == 40
    seen = batches(first.records)
    assert seen[0][0] == 0 and seen[-1][1] < 9
    # the aborted segment is skipped by a read_committed reader: the next to read is "b"
    wait_until(lambda: kafka._cache.holds(keys[2]))
    assert not kafka._cache.holds(keys[1])
    while seen[-1][1] + 1 < first.last_stable_offset:
        seen += batches(kafka.fetch("ahead", 0, seen[-1][1] + 1, 500, READ_COMMITTED).records)
    # "a", "b" and "c" once each, in order; the aborted records pass as a control batch
    assert [o for base, last, control in seen if not control for o in range(base, last + 1)] == [
        *range(0, 10), *range(20, 40)]
    assert [(base, last) for base, last, control in seen if control] == [(10, 19)]
    time.sleep(0.2)  # nothing past the last stable offset is read ahead: the open transaction
    assert not kafka._cache.holds(keys[4]) and not kafka._ahead


def test_a_segment_that_cannot_be_read_ahead_fails_the_fetch_that_needs_it(topic):
    broker, keys = topic
    broker._store.delete([keys[2]])  # lost from storage before anyone read it
    kafka = KafkaBackend(broker)
    assert batches(kafka.fetch("ahead", 0, 0, 500, READ_COMMITTED).records)[0][0] == 0
    wait_until(lambda: kafka._ahead[keys[2]].done())  # read ahead, and failed
    for _ in range(2):  # reported by the Fetch that needs it, each time: the failure is not kept
        with pytest.raises(CorruptSegmentError, match="missing from storage"):
            kafka.fetch("ahead", 0, 20, 500, READ_COMMITTED)


def test_a_fetch_half_full_does_not_wait_for_a_segment_not_loaded_yet(topic):
    """With half its budget taken, a Fetch answers with what it has rather than wait for
    the download of the next segment, which is read ahead for the next Fetch instead."""
    broker, keys = topic
    kafka = KafkaBackend(broker)
    answer = kafka.fetch("ahead", 0, 0, 2_000, READ_COMMITTED)  # "a" is about 1.2 KB
    # "a", and the aborted records passed over (nothing to load); not "b"
    assert batches(answer.records) == [(0, 9, False), (10, 19, True)]
    wait_until(lambda: kafka._cache.holds(keys[2]) and kafka._cache.holds(keys[3]))  # "b" and "c"
    # loaded segments are read on into the budget
    assert batches(kafka.fetch("ahead", 0, 20, 100_000, READ_COMMITTED).records) == [(20, 29, False), (30, 39, False)]


def test_a_compacted_segment_is_fetched_with_its_gaps(backend):
    """After compaction the aborted records are gaps inside one segment: batches carry
    offset deltas with gaps, the segment's last batch spans its trailing gap, and a Fetch
    from inside a gap passes over it; every record comes once, with its own offset."""
    from txn_broker.kafka.recordbatch import decode_batches

    broker = backend.connect()
    broker.create_topic("gaps", partitions=1, config={"min.compaction.lag.ms": 0})
    producer = broker.producer(transactional_id="gaps")
    producer.init_transactions()
    for tag, commit in (("a", True), ("x", False), ("b", True), ("y", False)):
        producer.begin_transaction()
        producer.send("gaps", records(tag, 10), partition=0)
        producer.flush()
        producer.commit_transaction() if commit else producer.abort_transaction()
    producer.close()
    assert broker.compact().segments_written == 1
    kafka = KafkaBackend(broker)
    for isolation in (READ_COMMITTED, 0):
        seen: list[tuple[int, bytes]] = []
        position, fetches = 0, 0
        while position < 40:
            answer = kafka.fetch("gaps", 0, position, 300, isolation)
            for batch in decode_batches(b"".join(bytes(p) for p in answer.records)):
                if not batch.control:
                    seen += [(batch.base_offset + r.offset_delta, r.key) for r in batch.records]
                position = max(position, batch.base_offset + batch.last_offset_delta + 1)
            fetches += 1
            assert fetches < 50
        assert [o for o, _ in seen] == [*range(0, 10), *range(20, 30)]
        assert [k for _, k in seen] == [f"a{i}".encode() for i in range(10)] + [f"b{i}".encode() for i in range(10)]
    # from inside the leading gap of "b" (an aborted transaction's offsets)
    answer = batches(kafka.fetch("gaps", 0, 12, 100_000, READ_COMMITTED).records)
    assert answer == [(20, 39, False)]
    # from inside the trailing gap: passed over, as an aborted segment is
    assert batches(kafka.fetch("gaps", 0, 35, 100_000, READ_COMMITTED).records) == [(35, 39, True)]
    offset, _ = kafka.list_offset("gaps", 0, 0, READ_COMMITTED)
    assert offset == 0
    assert broker.fsck().ok
