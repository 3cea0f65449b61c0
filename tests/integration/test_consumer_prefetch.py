"""Polls served from a plan an earlier poll made (one database read per plan, not per
poll), a poll size in bytes by default, and isolation unchanged: on both backends."""

from __future__ import annotations

import pyarrow as pa
import pytest

import txn_broker.consumer as consumer_module
from txn_broker import TopicPartition
from txn_broker.errors import IllegalStateError, InvalidConfigError

pytestmark = pytest.mark.integration
SCHEMA = pa.schema([("n", pa.int64()), ("text", pa.string())])
TP = TopicPartition("t", 0)


def rows(start: int, count: int, width: int = 10) -> pa.Table:
    return pa.table({"n": list(range(start, start + count)), "text": ["x" * width] * count}, schema=SCHEMA)


def segments(broker, count: int, size: int) -> None:  # type: ignore[no-untyped-def]
    producer = broker.producer()
    for i in range(count):
        producer.send("t", rows(i * size, size), partition=0)
        producer.flush()


@pytest.fixture
def plans(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Each database plan a consumer makes (the real plan_fetch, counted)."""
    calls: list[int] = []
    real = consumer_module.plan_fetch

    def counted(db, topic_id, partition, start, isolation_level, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(start)
        return real(db, topic_id, partition, start, isolation_level, *args, **kwargs)

    monkeypatch.setattr(consumer_module, "plan_fetch", counted)
    return calls


def test_small_polls_are_served_from_one_plan(backend, plans) -> None:  # type: ignore[no-untyped-def]
    broker = backend.connect()
    broker.create_topic("t", partitions=1, schema=SCHEMA)
    segments(broker, 3, 100)
    consumer = broker.consumer()
    consumer.assign([TP])
    consumer.position(TP)
    plans.clear()
    seen = []
    for _ in range(30):
        seen += consumer.poll(max_records=10)["n"].to_pylist()
    assert seen == list(range(300))
    assert len(plans) == 1, plans  # one plan covered 30 polls over 3 segments
    assert consumer.poll().num_rows == 0  # caught up: the next poll plans again, finds nothing
    assert len(plans) == 2


def test_records_committed_after_a_plan_are_read_once_it_is_used_up(backend) -> None:  # type: ignore[no-untyped-def]
    broker = backend.connect()
    broker.create_topic("t", partitions=1, schema=SCHEMA)
    segments(broker, 1, 10)
    consumer = broker.consumer()  # read_committed
    consumer.assign([TP])
    assert consumer.poll(max_records=4)["n"].to_pylist() == [0, 1, 2, 3]

    txn = broker.producer(transactional_id="w")
    txn.init_transactions()
    txn.begin_transaction()
    txn.send("t", rows(10, 5), partition=0)
    txn.flush()  # open: holds the LSO at 10
    aborted = broker.producer(transactional_id="a")
    aborted.init_transactions()
    aborted.begin_transaction()
    aborted.send("t", rows(100, 5), partition=0)
    aborted.flush()

    assert consumer.poll()["n"].to_pylist() == [4, 5, 6, 7, 8, 9]  # the rest of the old plan
    assert consumer.poll().num_rows == 0  # the open transaction holds the LSO
    aborted.abort_transaction()
    txn.commit_transaction()
    assert consumer.poll()["n"].to_pylist() == [10, 11, 12, 13, 14]  # the aborted ones skipped
    assert consumer.position(TP) == 20


def test_seek_drops_the_plan(backend) -> None:  # type: ignore[no-untyped-def]
    broker = backend.connect()
    broker.create_topic("t", partitions=1, schema=SCHEMA)
    segments(broker, 2, 10)
    consumer = broker.consumer()
    consumer.assign([TP])
    assert consumer.poll(max_records=3)["n"].to_pylist() == [0, 1, 2]
    consumer.seek(TP, 15)
    assert consumer.poll(max_records=3)["n"].to_pylist() == [15, 16, 17]
    consumer.seek_to_beginning()
    assert consumer.poll(max_records=2)["n"].to_pylist() == [0, 1]


def test_a_poll_holds_about_max_bytes_and_at_least_one_record(backend) -> None:  # type: ignore[no-untyped-def]
    broker = backend.connect()
    broker.create_topic("t", partitions=2, schema=SCHEMA)
    producer = broker.producer()
    for p in (0, 1):
        producer.send("t", pa.table({"n": list(range(200)), "text": ["y" * 1000] * 200}, schema=SCHEMA),
                      partition=p)
    producer.flush()
    consumer = broker.consumer()
    consumer.subscribe(["t"])
    tiny = consumer.poll(max_bytes=10)
    assert tiny.num_rows == 1  # never stuck on a record larger than the budget
    batch = consumer.poll(max_bytes=50_000)
    assert 30 <= batch.num_rows <= 50, batch.num_rows  # ~1 KB rows
    everything = consumer.poll()  # the default (8 MiB) takes both partitions at once
    assert everything.num_rows == 400 - 1 - batch.num_rows
    assert set(everything["_partition"].to_pylist()) == {0, 1}
    with pytest.raises(InvalidConfigError):
        consumer.poll(max_bytes=0)
    with pytest.raises(InvalidConfigError):
        consumer.poll(max_records=0)


def test_a_topic_deleted_under_a_plan_fails_clearly(backend) -> None:  # type: ignore[no-untyped-def]
    broker = backend.connect()
    broker.create_topic("t", partitions=1, schema=SCHEMA)
    segments(broker, 3, 10)
    consumer = broker.consumer()
    consumer.assign([TP])
    assert consumer.poll(max_records=5).num_rows == 5  # planned 3 segments, decoded the first
    broker.delete_topic("t")
    got: list[int] = []
    with pytest.raises(IllegalStateError, match="deleted"):
        for _ in range(10):  # a segment gone: planned again, the topic is gone
            got += consumer.poll(max_records=5)["n"].to_pylist()
    # what was decoded already: the first segment, and the next one if its background
    # load finished before the deletion
    assert got in (list(range(5, 10)), list(range(5, 20)))
