"""Idempotent produce through the listener, request by request (kio builds the frames), on
both backends: sequences count records, a retried batch is answered with its original
offsets, a batch below the next sequence or leaving a gap is OUT_OF_ORDER_SEQUENCE_NUMBER,
a stale epoch INVALID_PRODUCER_EPOCH, and a transactional batch without AddPartitionsToTxn
INVALID_TXN_STATE. Nothing refused is written."""

from __future__ import annotations

import pytest
from _kafka_listener import RawClient, create_topic_body, produce_body
from kio.schema.errors import ErrorCode

from txn_broker import TopicPartition
from txn_broker.kafka.recordbatch import TRANSACTIONAL, Record, encode_batch

pytestmark = pytest.mark.integration


class Client(RawClient):
    def produce(self, topic: str, batch: bytes, transactional_id: str | None = None):
        return self.produce_answer(self.call(0, 9, produce_body(topic, batch, transactional_id)))

    @staticmethod
    def produce_answer(response) -> tuple[int, int]:
        part = response.responses[0].partition_responses[0]
        return part.error_code, part.base_offset


def batch(pid: int, epoch: int, seq: int, n: int, attributes: int = 0) -> bytes:
    records = [Record(i, 1_700_000_000_000, None, b"%d" % (seq + i)) for i in range(n)]
    return encode_batch(0, records, producer_id=pid, producer_epoch=epoch, base_sequence=seq, attributes=attributes)


def test_sequences_through_the_listener(kafka, backend):
    client = Client(kafka.port)
    created = client.call(19, 5, {"topics": [{"name": "seq", "num_partitions": 1, "replication_factor": 1,
                                              "assignments": [], "configs": []}], "timeout": 5000})
    assert created.topics[0].error_code == ErrorCode.none
    init = client.call(22, 4, {"transactional_id": None, "transaction_timeout": 60000, "producer_id": -1,
                               "producer_epoch": -1})
    pid, epoch = init.producer_id, init.producer_epoch
    assert client.produce("seq", batch(pid, epoch, 0, 5)) == (ErrorCode.none, 0)
    assert client.produce("seq", batch(pid, epoch, 5, 3)) == (ErrorCode.none, 5)
    assert client.produce("seq", batch(pid, epoch, 0, 5)) == (ErrorCode.none, 0)  # a retry: original offsets
    assert client.produce("seq", batch(pid, epoch, 2, 3))[0] == ErrorCode.out_of_order_sequence_number
    assert client.produce("seq", batch(pid, epoch, 9, 1))[0] == ErrorCode.out_of_order_sequence_number
    assert client.produce("seq", batch(pid, epoch + 1, 0, 2)) == (ErrorCode.none, 8)  # a new epoch restarts
    assert client.produce("seq", batch(pid, epoch, 8, 1))[0] == ErrorCode.invalid_producer_epoch
    # a transactional batch before AddPartitionsToTxn
    txn = client.call(22, 4, {"transactional_id": "seq-tx", "transaction_timeout": 60000, "producer_id": -1,
                              "producer_epoch": -1})
    code, _ = client.produce("seq", batch(txn.producer_id, txn.producer_epoch, 0, 1, TRANSACTIONAL), "seq-tx")
    assert code == ErrorCode.invalid_txn_state
    broker = backend.connect()
    assert broker.describe_topic("seq").partitions[0].high_watermark == 10
    broker.close()
    client.sock.close()


def test_pipelined_requests_are_answered_in_order_with_the_same_verdicts(kafka, backend):
    """Requests sent back to back, as librdkafka does with several in flight: the listener
    prepares the next Produce while the previous one completes, yet each is answered in
    order with the verdict it gets alone, a Produce prepared before the CreateTopics ahead
    of it included; every stored object is a registered segment."""
    client = Client(kafka.port)
    assert client.call(19, 5, create_topic_body("pipe")).topics[0].error_code == ErrorCode.none
    init = client.call(22, 4, {"transactional_id": None, "transaction_timeout": 60000, "producer_id": -1,
                               "producer_epoch": -1})
    pid, epoch = init.producer_id, init.producer_epoch
    requests = [
        (0, produce_body("pipe", batch(pid, epoch, 0, 5)), (ErrorCode.none, 0)),
        (0, produce_body("pipe", batch(pid, epoch, 5, 3)), (ErrorCode.none, 5)),
        (0, produce_body("pipe", batch(pid, epoch, 0, 5)), (ErrorCode.none, 0)),  # a retry
        (0, produce_body("pipe", batch(pid, epoch, 20, 1)), ErrorCode.out_of_order_sequence_number),
        (0, produce_body("pipe-later", batch(pid, epoch, 0, 2)), ErrorCode.unknown_topic_or_partition),
        (19, create_topic_body("pipe-later"), None),
        (0, produce_body("pipe-later", batch(pid, epoch, 0, 2)), (ErrorCode.none, 0)),
        (0, produce_body("pipe", batch(pid, epoch, 8, 2)), (ErrorCode.none, 8)),
    ]
    versions = {0: 9, 19: 5}
    sent = [(key, client.send(key, versions[key], body), expected) for key, body, expected in requests]
    for key, correlation, expected in sent:
        response = client.receive(key, versions[key], correlation)
        if key == 19:
            assert response.topics[0].error_code == ErrorCode.none
        elif isinstance(expected, tuple):
            assert client.produce_answer(response) == expected
        else:
            assert client.produce_answer(response)[0] == expected
    client.sock.close()
    broker = backend.connect()
    try:
        for topic, high_watermark, segments in (("pipe", 10, 3), ("pipe-later", 2, 1)):
            assert broker.describe_topic(topic).partitions[0].high_watermark == high_watermark
            topic_id = broker._topics.get(topic).topic_id
            assert len(list(broker._store.list(f"topics/{topic_id}/"))) == segments
    finally:
        broker.close()


def test_produce_answers_carry_the_log_start_offset(kafka, backend):
    """Each Produce answer says where the partition's log starts now, read with the append
    (a retried batch's answer reads it on its own), after retention moved it."""
    from txn_broker.gc import collect_garbage

    broker = backend.connect()
    broker.create_topic("start", partitions=1, config={"retention.ms": 1, "retention.bytes": 1})
    for n in range(3):
        producer = broker.producer()
        producer.send("start", [{"key": b"k", "value": b"%d" % n, "headers": None}] * 4, partition=0)
        producer.close()
    collect_garbage(broker._db, broker._store, broker.settings, delete_delay_ms=0)
    [log_start] = broker.beginning_offsets([TopicPartition("start", 0)]).values()
    assert log_start > 0
    client = Client(kafka.port)
    init = client.call(22, 4, {"transactional_id": None, "transaction_timeout": 60000, "producer_id": -1,
                               "producer_epoch": -1})
    for _ in range(2):  # the second: a retry, answered with the original offsets
        part = client.call(0, 9, produce_body("start", batch(init.producer_id, init.producer_epoch, 0, 2)))
        answer = part.responses[0].partition_responses[0]
        assert (answer.error_code, answer.base_offset, answer.log_start_offset) == (ErrorCode.none, 12, log_start)
    client.sock.close()
    broker.close()
