"""Several `txn-broker serve` processes on one database and storage act as the brokers of one
cluster, on both backends: Metadata lists the live listeners, partition leaders are spread
over them, clients produce transactionally and read through any of them, and a listener
that stops drops out of Metadata."""

from __future__ import annotations

import os
import signal
import socket

import pytest
from _kafka_listener import Listener, coordinator_of, find_coordinator_frame, read_find_coordinator, wait_for
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode
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


def test_a_listener_resumed_after_its_expiry_coordinates_nothing_until_its_new_term_settles(backend, tmp_path):
    """A listener SIGSTOPped past its expiry wakes with its old view of the cluster and its old
    groups. The first request it answers, sent while it was stopped, must not name it the
    coordinator of a group the other listener took over (both would rebalance the group,
    each with the members it knows, and both members would copy the same partitions)."""
    first = Listener(backend.env, tmp_path / "first.log")
    second = Listener(backend.env, tmp_path / "second.log")
    try:
        # once the second listener's term has settled, some groups are its own
        ours = wait_for(lambda: next((g for g in (f"group-{i}" for i in range(50))
                                      if coordinator_of(first, g) == (0, second.port)), None),
                        timeout=30, what="the second listener coordinating groups")
        os.killpg(second.proc.pid, signal.SIGSTOP)
        try:
            wait_for(lambda: coordinator_of(first, ours) == (0, first.port), timeout=30,
                     what="the first listener taking the group over")
            with socket.create_connection(("127.0.0.1", second.port), timeout=10) as sock:
                sock.sendall(find_coordinator_frame(ours))  # read by the stopped listener once it resumes
                os.killpg(second.proc.pid, signal.SIGCONT)
                error, port = read_find_coordinator(sock)
        finally:
            os.killpg(second.proc.pid, signal.SIGCONT)
        assert (error, port) in {(0, first.port), (ErrorCode.coordinator_not_available.value, -1)}
    finally:
        second.stop()
        first.stop()
