"""Idempotent produce (docs/semantics.md, "Idempotent appends") on both backends."""

from __future__ import annotations

import pytest

from txn_broker import TopicPartition
from txn_broker.errors import DatabaseUnavailableError, OutOfOrderSequenceError
from txn_broker.faults import set_fault_hook
from txn_broker.log.types import ProducerIdentity, SegmentWrite

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def _no_faults():
    yield
    set_fault_hook(None)


def write(topic_id, seq, key, n=3):
    return SegmentWrite(topic_id=topic_id, topic="t", partition=0, record_count=n, size_bytes=10,
                        object_key=key, base_sequence=seq, max_timestamp_ms=0)


def test_a_retried_append_is_stored_once(backend):
    broker = backend.connect()
    topic_id = broker.create_topic("t").topic_id
    ident = ProducerIdentity(None, broker._coordinator.allocate_producer_id(), 0)
    first = broker._coordinator.append(ident, None, [write(topic_id, 0, "k0")])
    again = broker._coordinator.append(ident, None, [write(topic_id, 0, "k0")])
    assert first[0].base_offset == again[0].base_offset == 0
    assert (first[0].duplicate, again[0].duplicate) == (False, True)
    assert broker.describe_topic("t").partitions[0].high_watermark == 3


def test_a_gap_is_rejected(backend):
    broker = backend.connect()
    topic_id = broker.create_topic("t").topic_id
    ident = ProducerIdentity(None, broker._coordinator.allocate_producer_id(), 0)
    broker._coordinator.append(ident, None, [write(topic_id, 0, "k0")])
    with pytest.raises(OutOfOrderSequenceError) as info:
        broker._coordinator.append(ident, None, [write(topic_id, 2, "k2")])
    assert info.value.fatal
    with pytest.raises(OutOfOrderSequenceError):  # a first append must start at 0
        broker._coordinator.append(ProducerIdentity(None, ident.producer_id + 100, 0), None,
                                  [write(topic_id, 1, "x1")])
    assert broker.describe_topic("t").partitions[0].high_watermark == 3


def test_a_reused_sequence_with_other_data_is_not_a_duplicate(backend):
    broker = backend.connect()
    topic_id = broker.create_topic("t").topic_id
    ident = ProducerIdentity(None, broker._coordinator.allocate_producer_id(), 0)
    broker._coordinator.append(ident, None, [write(topic_id, 0, "k0")])
    with pytest.raises(OutOfOrderSequenceError):
        broker._coordinator.append(ident, None, [write(topic_id, 0, "other")])


def test_producer_retries_after_a_lost_reply_without_duplicating(backend):
    broker = backend.connect()
    broker.create_topic("t")
    lost = []

    def lose_first_reply(point):
        if point == "produce.after_register" and not lost:
            lost.append(point)
            raise DatabaseUnavailableError("injected: reply lost")

    producer = broker.producer()
    producer.send("t", [{"key": b"a", "value": b"1"}], partition=0)
    set_fault_hook(lose_first_reply)
    with pytest.raises(DatabaseUnavailableError):
        producer.flush()  # stored, but the caller never heard
    set_fault_hook(None)
    # the lost write is not re-sent as new data: the next flush finds nothing pending
    producer.send("t", [{"key": b"b", "value": b"2"}], partition=0)
    producer.flush()
    consumer = broker.consumer()
    consumer.assign([TopicPartition("t", 0)])
    assert consumer.poll().column("key").to_pylist() == [b"a", b"b"]


def test_registration_retried_inside_flush_is_stored_once(backend, monkeypatch):
    broker = backend.connect()
    broker.create_topic("t")
    coordinator = broker._coordinator
    real_append = coordinator.append
    calls = []

    def append_then_lose_reply(*args, **kwargs):
        result = real_append(*args, **kwargs)
        calls.append(result)
        if len(calls) == 1:
            raise DatabaseUnavailableError("injected: connection dropped after commit")
        return result

    monkeypatch.setattr(coordinator, "append", append_then_lose_reply)
    producer = broker.producer()
    producer.send("t", [{"key": b"a", "value": b"1"}] * 5, partition=0)
    results = producer.flush()
    assert results[0].duplicate and results[0].base_offset == 0
    assert broker.describe_topic("t").partitions[0].high_watermark == 5


def test_producer_resumes_after_its_sequence_state_expired(backend):
    import time

    broker = backend.connect(producer_id_expiration_ms=100)
    broker.create_topic("t")
    producer = broker.producer()
    for value in (b"1", b"2"):
        producer.send("t", [{"key": b"k", "value": value}], partition=0)
        producer.flush()
    time.sleep(0.2)
    assert broker.expire_transactional_ids()["producer_states_removed"] == 1
    producer.send("t", [{"key": b"k", "value": b"3"}], partition=0)
    producer.flush()  # the broker forgot sequence 1; the producer restarts at 0, once
    consumer = broker.consumer()
    consumer.assign([TopicPartition("t", 0)])
    assert consumer.poll().column("value").to_pylist() == [b"1", b"2", b"3"]
