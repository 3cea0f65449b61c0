"""The admin APIs of issue 30 through kafka-python's admin client (a client no one here
wrote), on both backends: topic configs (Kafka's accepted and mapped or ignored, an unknown
name refused) and DescribeConfigs, DeleteGroups, OffsetDelete, DescribeProducers; and
`serve --auto-create-topics`."""

from __future__ import annotations

import pytest
from _kafka_listener import Listener
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic
from kafka.errors import GroupSubscribedToTopicError, InvalidConfigurationError, NoError, NonEmptyGroupError
from kafka.structs import OffsetAndMetadata

from txn_broker import TopicPartition as TP

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_configs_groups_and_producers(kafka, backend):
    admin = KafkaAdminClient(bootstrap_servers=kafka.bootstrap, request_timeout_ms=15000)
    # Kafka's configs: mapped (retention.ms), accepted and ignored (cleanup.policy,
    # min.insync.replicas); a name Kafka does not know is INVALID_CONFIG
    admin.create_topics([NewTopic("cfg", 2, 1, topic_configs={
        "retention.ms": "60000", "cleanup.policy": "compact", "min.insync.replicas": "2"})])
    with pytest.raises(InvalidConfigurationError):
        admin.create_topics([NewTopic("bad", 1, 1, topic_configs={"no.such.config": "1"})])
    described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "cfg")], config_filter="all")
    configs = described["topic"]["cfg"]
    assert configs["retention.ms"]["value"] == "60000"
    assert configs["cleanup.policy"]["value"] == "compact"
    assert configs["min.insync.replicas"]["value"] == "2"
    assert configs["segment.ms"]["value"] == "604800000"  # Kafka's default, ignored here
    assert backend.connect().describe_topic("cfg").config["retention.ms"] == 60000

    # DescribeProducers: the transactional producer with its open transaction's first offset
    producer = KafkaProducer(bootstrap_servers=kafka.bootstrap, transactional_id="admin-tx")
    producer.init_transactions()
    producer.begin_transaction()
    for i in range(3):
        producer.send("cfg", value=b"r%d" % i, partition=0)
    producer.flush()
    [state] = admin.describe_producers([TopicPartition("cfg", 0)]).values()
    [active] = state.active_producers
    assert (active.last_sequence, active.current_transaction_start_offset) == (2, 0)
    producer.commit_transaction()
    producer.close()

    # OffsetDelete and DeleteGroups
    group = KafkaConsumer(bootstrap_servers=kafka.bootstrap, group_id="doomed", enable_auto_commit=False)
    group.commit({TopicPartition("cfg", 0): OffsetAndMetadata(2, "", -1),
                  TopicPartition("cfg", 1): OffsetAndMetadata(0, "", -1)})
    group.close()
    deleted = admin.delete_group_offsets("doomed", [TopicPartition("cfg", 1)])
    assert deleted == {TopicPartition("cfg", 1): NoError}
    assert backend.connect().committed_offsets("doomed", [TP("cfg", 0), TP("cfg", 1)]) == {
        TP("cfg", 0): 2, TP("cfg", 1): None}

    member = KafkaConsumer("cfg", bootstrap_servers=kafka.bootstrap, group_id="busy", enable_auto_commit=False)
    while not member.assignment():
        member.poll(200)
    member.commit({TopicPartition("cfg", 0): OffsetAndMetadata(1, "", -1)})
    refused = admin.delete_group_offsets("busy", [TopicPartition("cfg", 0)])
    assert refused == {TopicPartition("cfg", 0): GroupSubscribedToTopicError}
    results = dict(admin.delete_groups(["doomed", "busy"]))
    assert results == {"doomed": "OK", "busy": NonEmptyGroupError.__name__}
    assert "doomed" not in backend.connect().list_groups()
    member.close()
    admin.close()


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # the listener's flag
def test_auto_create_topics_is_opt_in(backend, tmp_path):
    default = Listener(backend.env, tmp_path / "default.log")
    try:
        consumer = KafkaConsumer(bootstrap_servers=default.bootstrap)
        assert not consumer.partitions_for_topic("never-made")
        consumer.close()
        assert "never-made" not in backend.connect().list_topics()
    finally:
        default.stop()
    listener = Listener(backend.env, tmp_path / "auto.log", "--auto-create-topics", "--default-partitions", "3")
    try:
        producer = KafkaProducer(bootstrap_servers=listener.bootstrap)
        producer.send("made-on-demand", key=b"k", value=b"v").get(15)
        producer.close()
        description = backend.connect().describe_topic("made-on-demand")
        assert len(description.partitions) == 3
        assert description.schema.names == ["key", "value", "headers"]  # Kafka's record shape
    finally:
        listener.stop()
