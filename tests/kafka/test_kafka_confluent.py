"""confluent-kafka (librdkafka, a client no one here wrote) against `txn-broker serve`, on
both backends: transactions with offsets, abort, read_committed, fencing, compression,
topics with a user schema, and records crossing between Kafka's protocol and the Python API."""

from __future__ import annotations

import json
import time

import pyarrow as pa
import pytest
from _kafka_listener import wait_for
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from txn_broker import TopicPartition as TP

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def create(kafka, *topics: tuple[str, int]) -> None:
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    for future in admin.create_topics([NewTopic(name, n) for name, n in topics]).values():
        future.result(15)


def consumer(kafka, group: str = "reader", isolation: str = "read_committed", **extra) -> Consumer:
    return Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": group, "isolation.level": isolation,
                     "auto.offset.reset": "earliest", "enable.auto.commit": False, **extra})


def read_all(c: Consumer, expected: int, timeout: float = 15.0, settle: float = 1.0) -> list:
    """Messages until ``expected`` arrived and nothing more came for ``settle`` seconds."""
    got = []
    deadline = time.monotonic() + timeout
    quiet_until = None
    while time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is None:
            if len(got) >= expected:
                quiet_until = quiet_until or time.monotonic() + settle
                if time.monotonic() >= quiet_until:
                    break
            continue
        if m.error():
            if m.error().code() == KafkaError._PARTITION_EOF:
                continue
            raise KafkaException(m.error())
        got.append(m)
    return got


def txn_producer(kafka, tid: str, **extra) -> Producer:
    p = Producer({"bootstrap.servers": kafka.bootstrap, "transactional.id": tid, "linger.ms": 5, **extra})
    p.init_transactions(15)
    return p


def test_transactional_copy_with_offsets_abort_and_read_committed(kafka, backend):
    create(kafka, ("input", 2), ("output", 1))
    source = Producer({"bootstrap.servers": kafka.bootstrap, "enable.idempotence": True})
    for i in range(20):
        source.produce("input", key=str(i).encode(), value=f"in-{i}".encode(), partition=i % 2)
    assert source.flush(15) == 0

    copier_in = consumer(kafka, group="copier")
    copier_in.assign([TopicPartition("input", 0, 0), TopicPartition("input", 1, 0)])
    records = read_all(copier_in, 20)
    assert len(records) == 20
    copier = txn_producer(kafka, "copier-1")
    # an aborted attempt: its records never reach a read_committed reader, its offsets never commit
    copier.begin_transaction()
    for m in records:
        copier.produce("output", key=m.key(), value=b"aborted-" + m.value())
    copier.send_offsets_to_transaction(
        [TopicPartition("input", p, 10) for p in (0, 1)], copier_in.consumer_group_metadata())
    # delivered first: librdkafka's abort drops records still queued in the client, and this
    # test needs the aborted records in the log (read_uncommitted sees them below)
    assert copier.flush(15) == 0
    copier.abort_transaction(15)
    broker = backend.connect()
    assert broker.committed_offsets("copier", [TP("input", 0)]) == {TP("input", 0): None}
    # the committed copy, with the input offsets in the same transaction
    copier.begin_transaction()
    for m in records:
        copier.produce("output", key=m.key(), value=b"copied-" + m.value())
    copier.send_offsets_to_transaction(
        [TopicPartition("input", p, 10) for p in (0, 1)], copier_in.consumer_group_metadata())
    copier.commit_transaction(15)
    copier_in.close()

    assert broker.committed_offsets("copier", [TP("input", 0), TP("input", 1)]) == {
        TP("input", 0): 10, TP("input", 1): 10}
    reader = consumer(kafka)
    reader.assign([TopicPartition("output", 0, 0)])
    values = [m.value() for m in read_all(reader, 20)]
    assert sorted(values) == sorted(b"copied-in-%d" % i for i in range(20))
    # read_uncommitted sees the aborted records too, as in Kafka
    dirty = consumer(kafka, group="dirty", isolation="read_uncommitted")
    dirty.assign([TopicPartition("output", 0, 0)])
    assert len(read_all(dirty, 40)) == 40
    # the Python API reads what Kafka's protocol wrote: the same 20 committed records
    with broker.consumer(group_id="py") as py:
        py.assign([TP("output", 0)])
        table = py.poll(max_records=100, timeout_s=5)
    assert sorted(table.column("value").to_pylist()) == sorted(values)
    reader.close()
    dirty.close()
    broker.close()


def test_open_transaction_is_invisible_until_commit(kafka, backend):
    create(kafka, ("t", 1))
    p = txn_producer(kafka, "open-1")
    p.begin_transaction()
    p.produce("t", value=b"first")
    p.commit_transaction(15)
    p.begin_transaction()
    for i in range(5):
        p.produce("t", value=b"open-%d" % i)
    assert p.flush(15) == 0  # stored, not committed
    committed = consumer(kafka)
    committed.assign([TopicPartition("t", 0, 0)])
    assert [m.value() for m in read_all(committed, 1, settle=2.0)] == [b"first"]
    low, high = committed.get_watermark_offsets(TopicPartition("t", 0), timeout=10, cached=False)
    assert (low, high) == (0, 1)  # a read_committed client's end is the last stable offset
    uncommitted = consumer(kafka, group="u", isolation="read_uncommitted")
    uncommitted.assign([TopicPartition("t", 0, 0)])
    assert len(read_all(uncommitted, 6)) == 6
    p.commit_transaction(15)
    assert [m.value() for m in read_all(committed, 5)] == [b"open-%d" % i for i in range(5)]
    committed.close()
    uncommitted.close()


def test_a_second_producer_with_the_same_transactional_id_fences_the_first(kafka, backend):
    create(kafka, ("t", 1))
    zombie = txn_producer(kafka, "fenced-id")
    zombie.begin_transaction()
    zombie.produce("t", value=b"zombie")
    assert zombie.flush(15) == 0
    successor = txn_producer(kafka, "fenced-id")  # aborts the zombie's open transaction
    with pytest.raises(KafkaException) as info:
        zombie.commit_transaction(15)
    error = info.value.args[0]
    assert error.fatal() or error.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                                             KafkaError.INVALID_PRODUCER_EPOCH)
    successor.begin_transaction()
    successor.produce("t", value=b"successor")
    successor.commit_transaction(15)
    reader = consumer(kafka)
    reader.assign([TopicPartition("t", 0, 0)])
    assert [m.value() for m in read_all(reader, 1)] == [b"successor"]
    reader.close()
    broker = backend.connect()
    description = broker.describe_transaction("fenced-id")
    assert description.producer_epoch >= 1
    broker.close()


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # codecs are the listener's, not the backend's
def test_compressed_batches(kafka):
    codecs = ["gzip", "snappy", "lz4", "zstd"]
    create(kafka, *[(f"c-{codec}", 1) for codec in codecs])
    for codec in codecs:
        p = Producer({"bootstrap.servers": kafka.bootstrap, "enable.idempotence": True,
                      "compression.type": codec, "linger.ms": 20})
        for i in range(200):
            p.produce(f"c-{codec}", key=b"k", value=(b"%d-" % i) * 20, headers={"n": str(i).encode()})
        assert p.flush(15) == 0
        c = consumer(kafka)
        c.assign([TopicPartition(f"c-{codec}", 0, 0)])
        got = read_all(c, 200, settle=0.3)
        assert [m.value() for m in got] == [(b"%d-" % i) * 20 for i in range(200)], codec
        assert [m.headers() for m in got[:2]] == [[("n", b"0")], [("n", b"1")]]
        assert [m.offset() for m in got] == list(range(200))
        c.close()


def test_user_schema_topic_reads_and_writes_json(kafka, backend):
    schema = pa.schema([("key", pa.string()), ("amount", pa.int64()), ("note", pa.string())])
    broker = backend.connect()
    broker.create_topic("orders", 1, schema)
    with broker.producer() as py:
        py.send("orders", [{"key": "a", "amount": 1, "note": "from python"}])
        py.flush()
    p = Producer({"bootstrap.servers": kafka.bootstrap, "enable.idempotence": True})
    p.produce("orders", value=json.dumps({"key": "b", "amount": 2, "note": "from kafka"}).encode())
    assert p.flush(15) == 0
    # a value that does not match the schema fails with INVALID_RECORD; nothing is written
    errors = []
    bad = Producer({"bootstrap.servers": kafka.bootstrap, "message.send.max.retries": 0})
    bad.produce("orders", value=b'{"amount": "not a number"}', on_delivery=lambda e, m: errors.append(e))
    bad.flush(15)
    assert errors and errors[0] is not None and errors[0].code() == KafkaError.INVALID_RECORD
    c = consumer(kafka)
    c.assign([TopicPartition("orders", 0, 0)])
    got = read_all(c, 2)
    assert [(m.key(), json.loads(m.value())) for m in got] == [
        (b"a", {"key": "a", "amount": 1, "note": "from python"}),
        (b"b", {"key": "b", "amount": 2, "note": "from kafka"})]
    assert broker.describe_topic("orders").partitions[0].high_watermark == 2
    c.close()
    broker.close()


def test_python_transaction_read_by_kafka_client(kafka, backend):
    broker = backend.connect()
    broker.create_topic("mixed", 1)
    with broker.producer(transactional_id="py-writer") as py:
        py.init_transactions()
        with py.transaction():
            py.send("mixed", [{"key": b"k1", "value": b"committed", "headers": [("h", b"1")]}])
        py.begin_transaction()
        py.send("mixed", [{"key": b"k2", "value": b"aborted", "headers": []}])
        py.flush()
        py.abort_transaction()
        with py.transaction():
            py.send("mixed", [{"key": b"k3", "value": b"after", "headers": []}])
    c = consumer(kafka)
    c.assign([TopicPartition("mixed", 0, 0)])
    got = read_all(c, 2)
    assert [(m.offset(), m.key(), m.value()) for m in got] == [(0, b"k1", b"committed"), (2, b"k3", b"after")]
    assert got[0].headers() == [("h", b"1")]
    c.close()
    broker.close()


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # membership lives in the listener
def test_subscribe_rebalances_between_two_consumers(kafka):
    create(kafka, ("s", 4))
    p = Producer({"bootstrap.servers": kafka.bootstrap})
    for i in range(40):
        p.produce("s", value=b"%d" % i, partition=i % 4)
    assert p.flush(15) == 0
    settings = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 300, "partition.assignment.strategy": "range"}
    first = consumer(kafka, group="sub", **settings)
    first.subscribe(["s"])
    wait_for(lambda: first.poll(0.2) is not None or len(first.assignment()) == 4, what="first assignment")
    second = consumer(kafka, group="sub", **settings)
    second.subscribe(["s"])

    def split() -> bool:
        first.poll(0.1)
        second.poll(0.1)
        return len(first.assignment()) == 2 and len(second.assignment()) == 2

    wait_for(split, timeout=30, what="two consumers with two partitions each")
    mine = {tp.partition for tp in first.assignment()} | {tp.partition for tp in second.assignment()}
    assert mine == {0, 1, 2, 3}
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})  # ListGroups, DescribeGroups
    assert "sub" in {g.group_id for g in admin.list_consumer_groups().result(10).valid}
    described = admin.describe_consumer_groups(["sub"])["sub"].result(10)
    assert len(described.members) == 2
    assert sorted(tp.partition for m in described.members for tp in m.assignment.topic_partitions) == [0, 1, 2, 3]
    second.close()  # LeaveGroup: the first takes all four partitions again

    def all_to_first() -> bool:
        first.poll(0.1)
        return len(first.assignment()) == 4

    wait_for(all_to_first, timeout=30, what="the remaining consumer owning every partition")
    first.close()


def test_a_group_rebalances_onto_new_partitions_and_reads_each_record_once(kafka, backend):
    """CreatePartitions grows a topic a consumer group is subscribed to: within the
    client's metadata refresh interval the group's assignment takes the new partitions
    (librdkafka rejoins when a subscribed topic's partition count changes), and the
    records produced to old and new partitions are each consumed once."""
    create(kafka, ("grow", 2))
    p = Producer({"bootstrap.servers": kafka.bootstrap, "enable.idempotence": True,
                  "topic.metadata.refresh.interval.ms": 500})
    for i in range(10):
        p.produce("grow", value=b"before-%d" % i, partition=i % 2)
    assert p.flush(15) == 0
    c = consumer(kafka, group="growers", **{"topic.metadata.refresh.interval.ms": 500,
                                            "metadata.max.age.ms": 1500, "session.timeout.ms": 6000,
                                            "heartbeat.interval.ms": 300})
    c.subscribe(["grow"])
    got = read_all(c, 10, settle=0.3)
    c.commit(asynchronous=False)
    assert {tp.partition for tp in c.assignment()} == {0, 1}
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    admin.create_partitions([NewPartitions("grow", 4)])["grow"].result(15)

    def grown() -> bool:
        m = c.poll(0.1)
        assert m is None or m.error(), "no record was produced since the first ten"
        return {tp.partition for tp in c.assignment()} == {0, 1, 2, 3}

    wait_for(grown, timeout=20, what="the group's assignment taking the new partitions")
    wait_for(lambda: len(p.list_topics("grow", timeout=5).topics["grow"].partitions) == 4,
             what="the producer seeing four partitions")
    for i in range(20):
        p.produce("grow", value=b"after-%d" % i, partition=i % 4)
    assert p.flush(15) == 0
    got += read_all(c, 20, settle=1.0)
    c.commit(asynchronous=False)
    values = sorted(m.value() for m in got)
    assert values == sorted([b"before-%d" % i for i in range(10)] + [b"after-%d" % i for i in range(20)])  # once each
    assert {m.partition() for m in got if m.value().startswith(b"after")} == {0, 1, 2, 3}
    broker = backend.connect()
    tps = [TP("grow", n) for n in range(4)]
    assert broker.committed_offsets("growers", tps) == broker.end_offsets(tps)
    broker.close()
    c.close()


def test_a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced(kafka, backend):
    create(kafka, ("slow", 1))
    hung = txn_producer(kafka, "hung", **{"transaction.timeout.ms": 4000})
    hung.begin_transaction()
    hung.produce("slow", value=b"never committed")
    assert hung.flush(15) == 0
    reader = consumer(kafka)
    reader.assign([TopicPartition("slow", 0, 0)])

    def last_stable_offset() -> int:
        return reader.get_watermark_offsets(TopicPartition("slow", 0), timeout=10, cached=False)[1]

    assert last_stable_offset() == 0  # held back by the open transaction
    wait_for(lambda: last_stable_offset() == 1, timeout=20, what="the listener's sweep aborting the transaction")
    with pytest.raises(KafkaException):
        hung.commit_transaction(15)
    assert read_all(reader, 0, settle=1.0) == []
    broker = backend.connect()
    assert broker.describe_transaction("hung").state == "CompleteAbort"
    broker.close()
    reader.close()


def test_an_altered_topic_reads_and_writes_json_under_its_latest_schema(kafka, backend):
    """After alter_topic (a widened column, one added with a default, a second partition)
    Kafka clients read old records under the latest schema, see the new partition, and
    may still write the old shape (the mode allows the version before the latest)."""
    from txn_broker import with_default

    broker = backend.connect()
    broker.create_topic("evolving", 1, pa.schema([("key", pa.string()), ("amount", pa.int32())]))
    with broker.producer() as py:
        py.send("evolving", [{"key": "a", "amount": 1}])
        py.flush()
    c = consumer(kafka, group="before")
    c.assign([TopicPartition("evolving", 0, 0)])
    assert [json.loads(m.value()) for m in read_all(c, 1)] == [{"key": "a", "amount": 1}]  # cached by serve
    c.close()
    broker.alter_topic("evolving", partitions=2, schema=pa.schema([
        ("key", pa.string()), ("amount", pa.int64()),
        with_default(pa.field("currency", pa.string(), nullable=False), "EUR")]))
    p = Producer({"bootstrap.servers": kafka.bootstrap, "enable.idempotence": True})
    p.produce("evolving", value=json.dumps({"key": "b", "amount": 2**40, "currency": "USD"}).encode(), partition=1)
    p.produce("evolving", value=json.dumps({"key": "c", "amount": 3}).encode(), partition=1)  # the old shape
    assert p.flush(15) == 0
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    assert len(admin.list_topics("evolving", timeout=15).topics["evolving"].partitions) == 2
    c = consumer(kafka, group="after")
    c.assign([TopicPartition("evolving", 0, 0), TopicPartition("evolving", 1, 0)])
    got = sorted((json.loads(m.value()) for m in read_all(c, 3)), key=lambda v: v["key"])
    assert got == [{"key": "a", "amount": 1, "currency": "EUR"}, {"key": "b", "amount": 2**40, "currency": "USD"},
                   {"key": "c", "amount": 3, "currency": "EUR"}]
    c.close()
    broker.close()
