"""ACLs through `txn-broker serve` with SASL: confluent-kafka as alice and kafka-python as
bob, with different ACLs made by a super user through CreateAcls and by `txn-broker acls`;
allowed and refused produce, consume, group commit and transactional id with Kafka's error
codes; Metadata hiding the topics a user may not describe; a second listener of the same
database enforcing a change without a restart."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from _kafka_listener import Listener, wait_for
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import GroupAuthorizationFailedError, TopicAuthorizationFailedError
from kafka.structs import OffsetAndMetadata

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def sasl(listener, user: str) -> dict:
    return {"bootstrap.servers": listener.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": f"{user}-secret"}


def bob_config(listener) -> dict:
    return {"bootstrap_servers": listener.bootstrap, "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "PLAIN", "sasl_plain_username": "bob", "sasl_plain_password": "bob-secret"}


def allow(rtype, name, principal, op, pattern=ResourcePatternType.LITERAL, permission=AclPermissionType.ALLOW):
    return AclBinding(rtype, name, pattern, principal, "*", op, permission)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # enforcement is the listener's
def test_two_users_with_different_acls(backend, tmp_path):
    users = tmp_path / "users"
    users.write_text("admin:admin-secret\nalice:alice-secret\nbob:bob-secret\n")
    first = Listener(backend.env, tmp_path / "first.log", "--sasl-users", str(users), "--super-users", "User:admin")
    second = None
    try:
        admin = AdminClient(sasl(first, "admin"))
        for f in admin.create_topics([NewTopic("orders", 1), NewTopic("audit", 1)]).values():
            f.result(15)
        for f in admin.create_acls([
            allow(ResourceType.TOPIC, "ord", "User:alice", AclOperation.WRITE, ResourcePatternType.PREFIXED),
            allow(ResourceType.TRANSACTIONAL_ID, "alice-tx", "User:alice", AclOperation.WRITE),
            allow(ResourceType.TOPIC, "*", "User:bob", AclOperation.READ),
            allow(ResourceType.TOPIC, "audit", "User:bob", AclOperation.READ, permission=AclPermissionType.DENY),
            allow(ResourceType.GROUP, "bob-group", "User:bob", AclOperation.READ),
        ]).values():
            f.result(15)
        assert len(admin.describe_acls(AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                                        AclOperation.ANY, AclPermissionType.ANY)).result(15)) == 5

        # alice (confluent-kafka): her transactional id and topics under "ord" only
        alice = AdminClient(sasl(first, "alice"))
        assert set(alice.list_topics(timeout=15).topics) == {"orders"}  # Metadata hides "audit"
        producer = Producer({**sasl(first, "alice"), "transactional.id": "alice-tx"})
        producer.init_transactions(15)
        producer.begin_transaction()
        for i in range(3):
            producer.produce("orders", value=b"o%d" % i)
        producer.commit_transaction(15)
        refused = []
        plain = Producer({**sasl(first, "alice"), "message.timeout.ms": 5000,
                          "topic.metadata.refresh.interval.ms": 500})
        plain.produce("audit", value=b"x", on_delivery=lambda err, _m: refused.append(err))
        plain.flush(15)
        assert refused and refused[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        other = Producer({**sasl(first, "alice"), "transactional.id": "someone-elses"})
        with pytest.raises(KafkaException) as raised:
            other.init_transactions(15)
        assert raised.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED

        # bob (kafka-python): reads every topic but audit, in his group only, writes none
        consumer = KafkaConsumer(group_id="bob-group", isolation_level="read_committed",
                                 auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=3000,
                                 **bob_config(first))
        consumer.assign([TopicPartition("orders", 0)])
        assert [m.value for m in consumer] == [b"o0", b"o1", b"o2"]
        consumer.commit({TopicPartition("orders", 0): OffsetAndMetadata(3, "", -1)})
        consumer.assign([TopicPartition("audit", 0)])
        with pytest.raises(TopicAuthorizationFailedError):
            consumer.poll(timeout_ms=5000)
            consumer.poll(timeout_ms=5000)
        consumer.close()
        stranger = KafkaConsumer(group_id="not-bobs", enable_auto_commit=False, **bob_config(first))
        with pytest.raises(GroupAuthorizationFailedError):
            stranger.commit({TopicPartition("orders", 0): OffsetAndMetadata(1, "", -1)})
        stranger.close()
        writer = KafkaProducer(max_block_ms=5000, enable_idempotence=False, **bob_config(first))
        with pytest.raises(TopicAuthorizationFailedError):
            writer.send("orders", value=b"no").get(15)
        writer.close()

        # a second listener of the database; an ACL added by `txn-broker acls` reaches both
        second = Listener(backend.env, tmp_path / "second.log", "--sasl-users", str(users))
        on_second = AdminClient(sasl(second, "alice"))
        assert "audit" not in on_second.list_topics(timeout=15).topics
        added = subprocess.run(
            [sys.executable, "-m", "txn_broker.cli", "--json", "acls", "add", "--allow-principal", "User:alice",
             "--operation", "describe", "--topic", "audit"],
            env={**os.environ, **backend.env}, capture_output=True, text=True, timeout=60, check=True)
        assert json.loads(added.stdout)["acls"][0]["principal"] == "User:alice"
        wait_for(lambda: "audit" in on_second.list_topics(timeout=15).topics, 15, "the second listener to see it")
        listed = subprocess.run([sys.executable, "-m", "txn_broker.cli", "acls", "list", "--topic", "audit"],
                                env={**os.environ, **backend.env}, capture_output=True, text=True, timeout=60,
                                check=True)
        assert "User:alice" in listed.stdout and "User:bob" in listed.stdout
    finally:
        first.stop()
        if second is not None:
            second.stop()
