"""Commits during a rebalance, through confluent-kafka (librdkafka), on both backends, as
Kafka's coordinator takes them: while the group prepares a rebalance its members still
commit under the current generation (KIP-429's cooperative members commit what they give up
while the others rejoin: librdkafka's 0113_cooperative_rebalance v_commit_during_rebalance
failed on REBALANCE_IN_PROGRESS)."""

from __future__ import annotations

import pytest
from _kafka_listener import wait_for
from confluent_kafka import Consumer, ConsumerGroupState, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _consumer(kafka, **extra) -> Consumer:
    return Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "coop", "enable.auto.commit": False,
                     "auto.offset.reset": "earliest", "partition.assignment.strategy": "cooperative-sticky",
                     **extra})


def _state(admin: AdminClient) -> ConsumerGroupState:
    return admin.describe_consumer_groups(["coop"], request_timeout=10)["coop"].result(15).state


def test_a_member_commits_while_the_group_prepares_a_rebalance(kafka):
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    admin.create_topics([NewTopic("coop", 2, 1)])["coop"].result(15)
    producer = Producer({"bootstrap.servers": kafka.bootstrap})
    for i in range(4):
        producer.produce("coop", b"v%d" % i, partition=i % 2)
    assert producer.flush(15) == 0

    # the first member's next heartbeat is 30 s after it joined: until then it does not
    # know of the rebalance and commits under its generation
    first = _consumer(kafka, **{"session.timeout.ms": 60000, "heartbeat.interval.ms": 30000})
    first.subscribe(["coop"])
    wait_for(lambda: first.poll(0.2) is not None and len(first.assignment()) == 2, what="first assignment")
    wait_for(lambda: _state(admin) == ConsumerGroupState.STABLE, what="stable group")

    second = _consumer(kafka)
    second.subscribe(["coop"])
    second.poll(0.5)  # its JoinGroup waits for the first member to rejoin
    wait_for(lambda: _state(admin) == ConsumerGroupState.PREPARING_REBALANCING, what="rebalance")

    # Kafka takes this commit (the member's generation is still the group's); it was refused
    # with REBALANCE_IN_PROGRESS
    [committed] = first.commit(offsets=[TopicPartition("coop", 0, 1)], asynchronous=False)
    assert committed.error is None
    assert [tp.offset for tp in first.committed([TopicPartition("coop", 0)], timeout=10)] == [1]
    assert _state(admin) == ConsumerGroupState.PREPARING_REBALANCING

    second.close()  # leaves; the rebalance ends when the first member leaves too
    first.close()
