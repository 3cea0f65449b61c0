"""Listener defects librdkafka's own tests found (issue 30), each shown with confluent-kafka
(librdkafka): committed offsets keep their metadata and leader epoch and are answered per
partition, past the log end too (0130, 0103, 0099); ListOffsets by a timestamp after the last
record (0054); static membership (0102); DescribeGroups' client id and host (0081);
Metadata's topic authorized operations (0081); a topic created with a replica assignment gets
its partitions (0081); Fetch keeps to max_bytes (0082); a replaced static member is fenced
(0102); TxnOffsetCommit checks the group member (found by the failover test); OffsetFetch
fails as a whole."""

from __future__ import annotations

import time

import pytest
from _kafka_listener import RawClient, wait_for
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import AclOperation, AdminClient, NewTopic
from kio.schema.errors import ErrorCode

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def create(kafka, *topics: tuple[str, int]) -> AdminClient:
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    for future in admin.create_topics([NewTopic(name, n) for name, n in topics]).values():
        future.result(15)
    return admin


def consumer(kafka, group: str, **extra) -> Consumer:
    return Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": group, "enable.auto.commit": False,
                     "auto.offset.reset": "earliest", **extra})


def test_committed_offsets_keep_metadata_epoch_and_answer_per_partition(kafka, backend):
    create(kafka, ("meta", 2))
    p = Producer({"bootstrap.servers": kafka.bootstrap})
    for i in range(3):
        p.produce("meta", value=b"x%d" % i, partition=0)
    assert p.flush(15) == 0

    c = consumer(kafka, "meta-group")
    done = c.commit(offsets=[TopicPartition("meta", 0, 2, metadata="m0", leader_epoch=0)], asynchronous=False)
    assert [tp.error for tp in done] == [None]
    [got] = c.committed([TopicPartition("meta", 0)], 15)
    assert (got.offset, got.metadata, got.leader_epoch) == (2, "m0", 0)

    # past the log end: kept (was OFFSET_OUT_OF_RANGE); an unknown partition fails alone
    with pytest.raises(KafkaException) as refused:
        c.commit(offsets=[TopicPartition("meta", 0, 1000), TopicPartition("meta", 7, 1)], asynchronous=False)
    assert refused.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert c.committed([TopicPartition("meta", 0)], 15)[0].offset == 1000  # committed all the same

    # TxnOffsetCommit keeps them too (librdkafka 0103's do_test_consumer_producer_txn)
    txn = Producer({"bootstrap.servers": kafka.bootstrap, "transactional.id": "meta-txn"})
    txn.init_transactions(15)
    txn.begin_transaction()
    txn.send_offsets_to_transaction([TopicPartition("meta", 1, 0, metadata="in a txn", leader_epoch=0)],
                                    c.consumer_group_metadata(), 15)
    txn.commit_transaction(15)
    [got] = c.committed([TopicPartition("meta", 1)], 15)
    assert (got.offset, got.metadata, got.leader_epoch) == (0, "in a txn", 0)
    c.close()


def test_offsets_for_a_time_after_the_last_record_is_minus_one(kafka, backend):
    create(kafka, ("times", 1))
    p = Producer({"bootstrap.servers": kafka.bootstrap})
    now = int(time.time() * 1000)
    for i in range(3):
        p.produce("times", value=b"t", partition=0, timestamp=now - 3000 + i * 1000)
    assert p.flush(15) == 0
    c = consumer(kafka, "times-group")
    [middle] = c.offsets_for_times([TopicPartition("times", 0, now - 2000)], 15)
    assert middle.offset == 1
    [after] = c.offsets_for_times([TopicPartition("times", 0, now + 3_600_000)], 15)
    assert after.offset == -1  # was the log end (3)
    c.close()


def test_static_member_restart_keeps_the_group_stable(kafka, backend):
    """KIP-345 (librdkafka 0102): a member with group.instance.id that comes back within the
    session timeout takes its place again; the other member sees no rebalance. Describing
    the group names each member's client id and host (0081)."""
    admin = create(kafka, ("static", 2))
    events: list[str] = []

    def static(instance: str, client_id: str) -> Consumer:
        c = consumer(kafka, "static-group", **{"group.instance.id": instance, "client.id": client_id,
                                               "session.timeout.ms": 10000, "heartbeat.interval.ms": 500})
        return c

    steady = static("steady", "steady-client")
    steady.subscribe(["static"], on_assign=lambda _c, ps: events.append("assign"),
                     on_revoke=lambda _c, ps: events.append("revoke"))
    restarting = static("restarting", "first-client")
    restarting.subscribe(["static"])

    def both_assigned() -> bool:
        steady.poll(0.1)
        restarting.poll(0.1)
        return len(steady.assignment()) == 1 and len(restarting.assignment()) == 1
    wait_for(both_assigned, 30, "two members with a partition each")
    before = restarting.assignment()
    events.clear()

    restarting.close()  # a static member leaves no LeaveGroup: its place is kept
    back = static("restarting", "second-client")
    back.subscribe(["static"])

    def back_assigned() -> bool:
        steady.poll(0.1)
        back.poll(0.1)
        return len(back.assignment()) == 1
    wait_for(back_assigned, 20, "the restarted member assigned")
    assert back.assignment() == before
    deadline = time.monotonic() + 3  # several heartbeats of the steady member
    while time.monotonic() < deadline:
        steady.poll(0.2)
        back.poll(0.1)
    assert events == []  # no revoke, no new assignment: no rebalance

    [group] = [f.result(15) for f in admin.describe_consumer_groups(["static-group"]).values()]
    members = {m.group_instance_id: m for m in group.members}
    assert {k: (m.client_id, m.host) for k, m in members.items()} == {
        "steady": ("steady-client", "127.0.0.1"), "restarting": ("second-client", "127.0.0.1")}
    steady.close()
    back.close()


def test_metadata_answers_topic_authorized_operations(kafka, backend):
    admin = create(kafka, ("ops", 1))
    [described] = [f.result(15) for f in admin.describe_topics(
        TopicCollection(["ops"]), include_authorized_operations=True).values()]
    # no ACLs: every operation on a topic, as Kafka without an authoriser answers (was none)
    assert set(described.authorized_operations) == {
        AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DELETE, AclOperation.ALTER,
        AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}


def test_txn_offset_commit_of_a_member_that_left_the_group_is_fenced(kafka, backend):
    """KIP-447, found by the listener failover test: send_offsets_to_transaction with the group
    metadata of a consumer that is no longer a member (it lost its partitions in a rebalance)
    fails the transaction abortably, and its offsets are not committed; a current member's
    commit goes through."""
    create(kafka, ("fenced-in", 1))
    p = Producer({"bootstrap.servers": kafka.bootstrap})
    for i in range(4):
        p.produce("fenced-in", value=b"%d" % i)
    assert p.flush(15) == 0
    member = consumer(kafka, "fenced-group", **{"isolation.level": "read_committed"})
    member.subscribe(["fenced-in"])
    wait_for(lambda: member.poll(0.2) is not None and member.assignment(), what="an assignment")
    stale = member.consumer_group_metadata()
    member.close()  # leaves the group: its metadata is a zombie's

    copier = Producer({"bootstrap.servers": kafka.bootstrap, "transactional.id": "fenced-copier"})
    copier.init_transactions(15)
    copier.begin_transaction()
    copier.produce("fenced-in", value=b"copied")
    with pytest.raises(KafkaException) as refused:
        copier.send_offsets_to_transaction([TopicPartition("fenced-in", 0, 2)], stale, 15)
        copier.commit_transaction(15)
    assert refused.value.args[0].txn_requires_abort(), refused.value
    copier.abort_transaction(15)
    check = consumer(kafka, "fenced-group")
    assert check.committed([TopicPartition("fenced-in", 0)], 10)[0].offset < 0

    current = consumer(kafka, "fenced-group")
    current.subscribe(["fenced-in"])
    wait_for(lambda: current.poll(0.2) is not None and current.assignment(), what="an assignment")
    copier.begin_transaction()
    copier.produce("fenced-in", value=b"copied")
    copier.send_offsets_to_transaction([TopicPartition("fenced-in", 0, 3)], current.consumer_group_metadata(), 15)
    copier.commit_transaction(15)
    assert check.committed([TopicPartition("fenced-in", 0)], 10)[0].offset == 3
    current.close()
    check.close()


def test_create_topics_with_a_replica_assignment_gets_its_partitions(kafka, backend):
    """0081 do_test_CreateTopics: a topic created with a replica assignment (the request's
    partition count is then -1) gets one partition per assignment entry (the listener made 1)."""
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    admin.create_topics([NewTopic("assigned", 5, replica_assignment=[[0]] * 5)])["assigned"].result(15)
    assert len(admin.list_topics("assigned", timeout=10).topics["assigned"].partitions) == 5


def test_fetch_response_keeps_to_fetch_max_bytes(kafka, backend):
    """0082: a Fetch of several partitions stops at the request's max_bytes once a batch is in
    (a batch larger than it comes alone, KIP-74). The listener added a batch of every partition,
    librdkafka refused the oversized response (receive.message.max.bytes) and never read on."""
    create(kafka, ("big-batches", 2))
    p = Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 0})
    for i in range(6):
        p.produce("big-batches", value=bytes([i]) * (900 * 1024), partition=i % 2)
        assert p.flush(15) == 0  # one 900 KB batch each
    c = consumer(kafka, "big-batches", **{"max.partition.fetch.bytes": 20000000, "fetch.max.bytes": 1000000,
                                         "receive.message.max.bytes": 1000512})
    c.assign([TopicPartition("big-batches", q, 0) for q in range(2)])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 6 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None:
            assert not m.error(), m.error()
            got.append(m.value()[0])
    c.close()
    assert sorted(got) == list(range(6))


def test_static_member_replaced_by_a_newer_instance_is_fenced(kafka, backend):
    """0102 do_test_fenced_member_classic: a second consumer with the same group.instance.id
    takes the first one's place, and the first one's next heartbeat is FENCED_INSTANCE_ID,
    which librdkafka makes a fatal error (the listener answered UNKNOWN_MEMBER_ID: it rejoined)."""
    create(kafka, ("static-fence", 2))
    errors: list = []
    static = {"group.instance.id": "instance-1", "session.timeout.ms": 6000, "heartbeat.interval.ms": 300}
    older = consumer(kafka, "static-fence", error_cb=errors.append, **static)
    older.subscribe(["static-fence"])
    wait_for(lambda: older.poll(0.2) is None and older.assignment(), what="the first instance's assignment")
    newer = consumer(kafka, "static-fence", **static)
    newer.subscribe(["static-fence"])
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not any(e.fatal() or e.code() == KafkaError._FATAL for e in errors):
        newer.poll(0.1)
        m = older.poll(0.2)
        if m is not None and m.error():
            errors.append(m.error())
    fatal = [e for e in errors if e.fatal() or e.code() == KafkaError._FATAL]
    assert fatal, errors
    newer.close()


def test_offset_fetch_fails_as_a_whole_and_an_unknown_topic_has_no_offset(kafka, backend):
    """A read that fails is the response's error (clients retry it); were it each partition's,
    librdkafka would take those partitions as having no committed offset, and a copier
    rewinding to the committed offsets (librdkafka's transactions example) would start them
    over. A topic the cluster does not know has no offset, and no error, as in Kafka."""
    create(kafka, ("fetched", 1))
    c = consumer(kafka, "fetch-group")
    c.commit(offsets=[TopicPartition("fetched", 0, 0)], asynchronous=False)
    client = RawClient(kafka.port)
    try:
        asked = [{"name": "fetched", "partition_indexes": [0]}, {"name": "never-created", "partition_indexes": [0]}]
        answer = client.call(9, 7, {"group_id": "fetch-group", "topics": asked, "require_stable": True})
        assert answer.error_code == ErrorCode.none
        got = {(t.name, p.partition_index): (p.committed_offset, p.error_code)
               for t in answer.topics for p in t.partitions}
        assert got == {("fetched", 0): (0, ErrorCode.none), ("never-created", 0): (-1, ErrorCode.none)}
        refused = client.call(9, 7, {"group_id": "bad\x01group", "topics": asked, "require_stable": True})
        assert refused.error_code == ErrorCode.invalid_request
    finally:
        client.close()
        c.close()
