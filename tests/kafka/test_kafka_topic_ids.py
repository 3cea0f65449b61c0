"""Kafka's topic ids through confluent-kafka (librdkafka), on both backends: a topic deleted
and created again under its name has another id, so a client takes it for a new topic
(librdkafka's 0107_topic_recreate: without ids its producer kept the old topic's extra
partitions and their records never left)."""

from __future__ import annotations

import pytest
from _kafka_listener import wait_for
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.error import KafkaException

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _topic_id(admin: AdminClient, name: str) -> str | None:
    from confluent_kafka import TopicCollection

    try:
        described = admin.describe_topics(TopicCollection([name]))[name].result(10)
    except KafkaException:  # not there (yet, or any more)
        return None
    return str(described.topic_id)


def test_a_recreated_topic_has_a_new_id_and_a_producer_follows_its_partition_count(kafka):
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    admin.create_topics([NewTopic("again", 4, 1)])["again"].result(10)
    first = wait_for(lambda: _topic_id(admin, "again"))
    assert first != "AAAAAAAAAAAAAAAAAAAAAA"  # Kafka's zero id: "no id"

    delivered: list[tuple[int, object]] = []
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 0,
                         "topic.metadata.refresh.interval.ms": 60000, "message.timeout.ms": 60000})
    report = lambda err, msg: delivered.append((msg.partition(), err))  # noqa: E731
    producer.produce("again", b"old", partition=3, on_delivery=report)
    producer.flush(10)
    assert delivered == [(3, None)]

    admin.delete_topics(["again"])["again"].result(10)
    admin.create_topics([NewTopic("again", 1, 1)])["again"].result(10)
    second = wait_for(lambda: _topic_id(admin, "again"))
    assert second not in (first, "AAAAAAAAAAAAAAAAAAAAAA")

    # a record for the old topic's partition 3, taken while the producer still knows 4
    # partitions (it refreshes its metadata when the listener refuses the record): once it
    # sees the new id it takes the new count and fails the record at once (without ids it
    # kept 4 partitions and the record waited for message.timeout.ms)
    delivered.clear()
    try:
        producer.produce("again", b"stale", partition=3, on_delivery=report)
    except KafkaException as error:  # it has already refreshed its metadata: refused at once
        assert error.args[0].code() == KafkaError._UNKNOWN_PARTITION
    else:
        assert producer.flush(15) == 0
        assert [(p, e.code() if e else None) for p, e in delivered] == [(3, KafkaError._UNKNOWN_PARTITION)]
    producer.produce("again", b"new", partition=0, on_delivery=report)
    assert producer.flush(10) == 0
    assert delivered[-1] == (0, None)
