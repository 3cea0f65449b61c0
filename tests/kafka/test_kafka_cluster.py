"""Several `txn-broker serve` processes on one database and storage act as the brokers of one
cluster, on both backends: Metadata lists the live listeners, partition leaders are spread
over them, clients produce transactionally and read through any of them, and a listener
that stops drops out of Metadata."""

from __future__ import annotations

import pytest
from _kafka_listener import Listener, wait_for
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from test_kafka_confluent import consumer, read_all

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def brokers(bootstrap: str) -> set[int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return {b.port for b in admin.list_topics(timeout=10).brokers.values()}


def test_two_listeners_are_one_cluster(kafka, backend, tmp_path):
    second = Listener(backend.env, tmp_path / "second.log")
    try:
        assert brokers(kafka.bootstrap) == brokers(second.bootstrap) == {kafka.port, second.port}
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
        admin.create_topics([NewTopic("spread", 4)])["spread"].result(15)
        leaders = {p.leader for p in admin.list_topics("spread", timeout=10).topics["spread"].partitions.values()}
        assert len(leaders) == 2  # the four partitions' leaders are spread over both listeners
        producer = Producer({"bootstrap.servers": second.bootstrap, "transactional.id": "cluster-tx"})
        producer.init_transactions(15)
        producer.begin_transaction()
        for i in range(40):
            producer.produce("spread", value=b"%d" % i, partition=i % 4)
        producer.commit_transaction(15)
        reader = consumer(kafka)
        reader.assign([TopicPartition("spread", p, 0) for p in range(4)])
        assert sorted(int(m.value()) for m in read_all(reader, 40)) == list(range(40))
        reader.close()
    finally:
        second.stop()
    wait_for(lambda: brokers(kafka.bootstrap) == {kafka.port}, timeout=30, what="the stopped listener leaving")

