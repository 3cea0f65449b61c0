"""DeleteRecords (21) through `txn-broker serve`: confluent-kafka's and kafka-python's
``delete_records`` on both backends (the new low watermark per partition, -1 for the high
watermark, OFFSET_OUT_OF_RANGE past it, consumers and ListOffsets earliest starting at the
new log start inside a segment), and DELETE on the topic required under ACLs."""

from __future__ import annotations

import pytest
from _kafka_listener import Listener
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kafka import TopicPartition as KTP
from kafka.admin import KafkaAdminClient
from kafka.errors import OffsetOutOfRangeError, TopicAuthorizationFailedError

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _produce(config: dict, topic: str, partition: int, count: int) -> None:
    producer = Producer({**config, "linger.ms": 0})
    for i in range(count):
        producer.produce(topic, value=b"v%d" % i, partition=partition)
        if i % 3 == 2:
            producer.flush(15)  # a few segments per partition
    producer.flush(15)


def _offsets(config: dict, topic: str, partition: int, expected: int) -> list[int]:
    consumer = Consumer({**config, "group.id": f"g-{topic}-{partition}", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(topic, partition, -2)])  # OFFSET_BEGINNING: ListOffsets earliest
    got: list[int] = []
    for _ in range(100):
        if len(got) >= expected:
            break
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            got.append(message.offset())
    consumer.close()
    return got


def test_delete_records_with_confluent_kafka_and_kafka_python(kafka, backend):
    config = {"bootstrap.servers": kafka.bootstrap}
    admin = AdminClient(config)
    admin.create_topics([NewTopic("dr", 2)])["dr"].result(15)
    _produce(config, "dr", 0, 10)
    _produce(config, "dr", 1, 6)

    futures = admin.delete_records([TopicPartition("dr", 0, 4), TopicPartition("dr", 1, -1)])
    done = {tp.partition: f.result(15).low_watermark for tp, f in futures.items()}
    assert done == {0: 4, 1: 6}
    assert _offsets(config, "dr", 0, 6) == [4, 5, 6, 7, 8, 9]
    consumer = Consumer({**config, "group.id": "w"})
    assert consumer.get_watermark_offsets(TopicPartition("dr", 0), timeout=10, cached=False) == (4, 10)
    assert consumer.get_watermark_offsets(TopicPartition("dr", 1), timeout=10, cached=False) == (6, 6)
    consumer.close()
    (future,) = admin.delete_records([TopicPartition("dr", 0, 11)]).values()
    with pytest.raises(KafkaException) as raised:
        future.result(15)
    assert raised.value.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE

    # kafka-python: an offset inside a segment, then one below the log start (no change)
    python_admin = KafkaAdminClient(bootstrap_servers=kafka.bootstrap, request_timeout_ms=15000)
    result = python_admin.delete_records({KTP("dr", 0): 7})
    assert result[KTP("dr", 0)]["low_watermark"] == 7
    assert python_admin.delete_records({KTP("dr", 0): 2})[KTP("dr", 0)]["low_watermark"] == 7
    with pytest.raises(OffsetOutOfRangeError):
        python_admin.delete_records({KTP("dr", 1): 7})
    python_admin.close()
    assert _offsets(config, "dr", 0, 3) == [7, 8, 9]
    assert [p.log_start_offset for p in backend.connect().describe_topic("dr").partitions] == [7, 6]


def _grant(admin: AdminClient, operation: AclOperation) -> None:
    for future in admin.create_acls([AclBinding(ResourceType.TOPIC, "kept", ResourcePatternType.LITERAL, "User:bob",
                                                "*", operation, AclPermissionType.ALLOW)]).values():
        future.result(15)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # enforcement is the listener's
def test_delete_records_needs_delete_on_the_topic(backend, tmp_path):
    users = tmp_path / "users"
    users.write_text("admin:admin-secret\nbob:bob-secret\n")
    listener = Listener(backend.env, tmp_path / "serve.log", "--sasl-users", str(users), "--super-users",
                        "User:admin")
    try:
        def sasl(user: str) -> dict:
            return {"bootstrap.servers": listener.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                    "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": f"{user}-secret"}

        admin = AdminClient(sasl("admin"))
        admin.create_topics([NewTopic("kept", 1)])["kept"].result(15)
        _produce(sasl("admin"), "kept", 0, 5)
        _grant(admin, AclOperation.DESCRIBE)
        bob = KafkaAdminClient(bootstrap_servers=listener.bootstrap, security_protocol="SASL_PLAINTEXT",
                               sasl_mechanism="PLAIN", sasl_plain_username="bob", sasl_plain_password="bob-secret",
                               request_timeout_ms=15000)
        with pytest.raises(TopicAuthorizationFailedError):
            bob.delete_records({KTP("kept", 0): 3})
        assert backend.connect().describe_topic("kept").partitions[0].log_start_offset == 0
        _grant(admin, AclOperation.DELETE)
        bob.close()
        bob = KafkaAdminClient(bootstrap_servers=listener.bootstrap, security_protocol="SASL_PLAINTEXT",
                               sasl_mechanism="PLAIN", sasl_plain_username="bob", sasl_plain_password="bob-secret",
                               request_timeout_ms=15000)
        assert bob.delete_records({KTP("kept", 0): 3})[KTP("kept", 0)]["low_watermark"] == 3
        bob.close()
    finally:
        listener.stop()
