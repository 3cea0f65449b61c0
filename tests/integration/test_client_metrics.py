"""Client metrics in a prometheus_client registry the user passes in (both backends):
commit and abort latency, records and bytes sent and polled, a retried commit whose reply
was lost, errors by class; and nothing recorded without a registry."""

from __future__ import annotations

import pyarrow as pa
import pytest
from prometheus_client import CollectorRegistry

from txn_broker.errors import InvalidInputError, ProducerFencedError
from txn_broker.faults import LostReply, set_fault_hook

pytestmark = pytest.mark.integration

SCHEMA = pa.schema([("id", pa.int64()), ("body", pa.string())])


def rows(n: int) -> pa.Table:
    return pa.table({"id": list(range(n)), "body": ["x" * 10] * n}, schema=SCHEMA)


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    value = registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def test_producer_and_consumer_metrics_through_a_registry(backend):
    broker = backend.connect()
    broker.create_topic("metered", partitions=2, schema=SCHEMA)
    registry = CollectorRegistry()
    producer = broker.producer(transactional_id="metered.writer", metrics=registry)
    producer.init_transactions()
    with producer.transaction():
        producer.send("metered", rows(3), partition=0)
        producer.send("metered", rows(2), partition=1)
    producer.begin_transaction()
    producer.send("metered", rows(4), partition=0)
    producer.flush()
    producer.abort_transaction()

    lost = []

    def lose_once(point: str) -> None:
        if point == "commit.after_end" and not lost:
            lost.append(point)
            raise LostReply("injected: the commit's reply is lost")

    producer.begin_transaction()
    producer.send("metered", rows(1), partition=1)
    producer.flush()  # so the commit is one EndTxn call, retried after its lost reply
    set_fault_hook(lose_once)
    try:
        producer.commit_transaction()
    finally:
        set_fault_hook(None)
    assert lost

    assert sample(registry, "txn_broker_client_records_sent_total", topic="metered") == 10
    assert sample(registry, "txn_broker_client_bytes_sent_total", topic="metered") == sum(
        rows(n).nbytes for n in (3, 2, 4, 1))
    assert sample(registry, "txn_broker_client_commit_duration_seconds_count") == 2
    assert sample(registry, "txn_broker_client_abort_duration_seconds_count") == 1
    assert sample(registry, "txn_broker_client_commit_duration_seconds_sum") > 0
    assert sample(registry, "txn_broker_client_retries_total") == 1

    # a newer instance fences this one: its next call fails, counted by class (the send
    # is accepted: its AddPartitionsToTxn goes in the background)
    newer = broker.producer(transactional_id="metered.writer", metrics=registry)
    newer.init_transactions()
    with pytest.raises(ProducerFencedError):
        producer.begin_transaction()
        producer.send("metered", rows(1), partition=0)
        producer.flush()
    assert sample(registry, "txn_broker_client_errors_total", error="InvalidProducerEpochError") == 1

    consumer = broker.consumer("metered.readers", metrics=registry)
    consumer.subscribe(["metered"])
    polled = 0
    while batch := consumer.poll(max_records=4).num_rows:
        polled += batch
    assert polled == 6  # read_committed: the aborted 4 are skipped
    assert sample(registry, "txn_broker_client_records_polled_total", topic="metered") == 6
    assert sample(registry, "txn_broker_client_bytes_polled_total", topic="metered") > 0

    # a client without a registry records nothing; a wrong value is refused
    quiet = broker.producer(transactional_id="quiet")
    quiet.init_transactions()
    with quiet.transaction():
        quiet.send("metered", rows(2), partition=0)
    assert sample(registry, "txn_broker_client_records_sent_total", topic="metered") == 11
    with pytest.raises(InvalidInputError):
        broker.producer(metrics="prometheus")
    broker.close()
