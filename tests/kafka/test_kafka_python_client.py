"""kafka-python (a third client no one here wrote, pure Python) against `txn-broker serve`,
on both backends: a transaction read back at read_committed, and committed offsets that
keep their metadata string and leader epoch (Kafka's OffsetCommit / OffsetFetch), past the
log end too, seen by the Python API as well."""

from __future__ import annotations

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.structs import OffsetAndMetadata

from txn_broker import OffsetAndMetadata as BrokerOffset
from txn_broker import TopicPartition as TP

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_transaction_and_committed_metadata(kafka, backend):
    admin = KafkaAdminClient(bootstrap_servers=kafka.bootstrap, request_timeout_ms=15000)
    admin.create_topics([NewTopic("kp", 1, 1)])
    admin.close()

    producer = KafkaProducer(bootstrap_servers=kafka.bootstrap, transactional_id="kp-1")
    producer.init_transactions()
    producer.begin_transaction()
    for i in range(5):
        producer.send("kp", key=str(i).encode(), value=f"v{i}".encode(), partition=0)
    producer.commit_transaction()
    producer.begin_transaction()
    producer.send("kp", value=b"aborted", partition=0)
    producer.flush()
    producer.abort_transaction()
    producer.close()

    consumer = KafkaConsumer(bootstrap_servers=kafka.bootstrap, group_id="kp-readers",
                             isolation_level="read_committed", auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=3000)
    tp = TopicPartition("kp", 0)
    consumer.assign([tp])
    assert [m.value for m in consumer] == [f"v{i}".encode() for i in range(5)]

    # defect 1: the metadata and the leader epoch come back (they were '' and -1)
    consumer.commit({tp: OffsetAndMetadata(5, "meta", 0)})
    assert consumer.committed(tp, metadata=True) == OffsetAndMetadata(5, "meta", 0)
    broker = backend.connect()
    assert broker.committed_metadata("kp-readers", [TP("kp", 0)]) == {TP("kp", 0): BrokerOffset(5, "meta", 0)}
    assert broker.committed_offsets("kp-readers", [TP("kp", 0)]) == {TP("kp", 0): 5}

    # defect 2: an offset past the log end is kept, as Kafka keeps it (it was OFFSET_OUT_OF_RANGE)
    consumer.commit({tp: OffsetAndMetadata(1000, "", -1)})
    assert consumer.committed(tp, metadata=True) == OffsetAndMetadata(1000, "", -1)
    consumer.close()
