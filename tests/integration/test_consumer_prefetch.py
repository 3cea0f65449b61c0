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


def fill_with_aborted_and_open(broker) -> tuple[dict[int, list[int]], object]:  # type: ignore[no-untyped-def]
    """Two partitions of committed segments of various sizes, with aborted transactions
    between them and, last, a transaction left open with committed records after it.
    Returns the ``n`` values each partition holds for read_committed (below the open
    transaction) and the open transaction's producer."""
    good = broker.producer(transactional_id="good")
    bad = broker.producer(transactional_id="bad")
    good.init_transactions()
    bad.init_transactions()
    visible: dict[int, list[int]] = {0: [], 1: []}
    n = 0
    for i, size in enumerate([3, 700, 1, 50, 1200, 9, 400]):
        for partition in (0, 1):
            good.begin_transaction()
            good.send("t", rows(n, size), partition=partition)
            good.commit_transaction()
            visible[partition] += list(range(n, n + size))
            n += size
            if i % 2 == 0:  # an aborted transaction between committed ones
                bad.begin_transaction()
                bad.send("t", rows(-1_000_000 - n, 2 * size + 1), partition=partition)
                bad.flush()
                bad.abort_transaction()
    bad.begin_transaction()  # left open: holds both partitions' LSO
    for partition in (0, 1):
        bad.send("t", rows(-2_000_000, 5), partition=partition)
    bad.flush()
    good.begin_transaction()
    for partition in (0, 1):
        good.send("t", rows(10_000_000 + partition * 100, 30), partition=partition)
    good.commit_transaction()
    return visible, bad


#: poll sizes: max_records (None: unlimited) and max_bytes (None: the default)
POLL_SIZES = [(1, None), (7, None), (500, None), (10_000, None), (None, None), (None, 4_000)]


def test_polls_of_any_size_return_each_committed_record_once_in_order(backend) -> None:  # type: ignore[no-untyped-def]
    """Across segment boundaries, plans and partitions, with aborted transactions between
    committed ones and an open one holding the last stable offset: exactly the committed
    records below it, in offset order per partition, none twice; the rest once it ends.
    One consumer per poll size."""
    broker = backend.connect()
    broker.create_topic("t", partitions=2, schema=SCHEMA)
    visible, open_producer = fill_with_aborted_and_open(broker)

    def drain(consumer, max_records: int | None, max_bytes: int | None) -> dict[int, list[tuple[int, int]]]:  # type: ignore[no-untyped-def]
        kwargs = {} if max_bytes is None else {"max_bytes": max_bytes}
        got: dict[int, list[tuple[int, int]]] = {0: [], 1: []}
        while (batch := consumer.poll(max_records=max_records, **kwargs)).num_rows:
            if max_records is not None:
                assert batch.num_rows <= max_records
            assert batch.schema.names[:4] == ["_topic", "_partition", "_offset", "_timestamp"]
            for partition, offset, n in zip(batch["_partition"].to_pylist(), batch["_offset"].to_pylist(),
                                            batch["n"].to_pylist(), strict=True):
                got[partition].append((offset, n))
        return got

    consumers = {}
    last: dict[tuple[int | None, int | None], dict[int, int]] = {}
    for size in POLL_SIZES:
        consumer = consumers[size] = broker.consumer()
        consumer.subscribe("t")
        got = drain(consumer, *size)
        last[size] = {}
        for partition in (0, 1):
            offsets = [offset for offset, _ in got[partition]]
            assert offsets == sorted(set(offsets)), size  # in order, none twice
            assert [n for _, n in got[partition]] == visible[partition], size
            lso = broker.describe_topic("t").partitions[partition].last_stable_offset
            assert offsets[-1] < lso == consumer.position(TopicPartition("t", partition))  # past aborted, at the LSO
            last[size][partition] = offsets[-1]
    open_producer.abort_transaction()  # type: ignore[attr-defined]
    for size, consumer in consumers.items():
        rest = drain(consumer, *size)
        for partition in (0, 1):
            first = 10_000_000 + partition * 100
            assert [n for _, n in rest[partition]] == list(range(first, first + 30)), size
            assert rest[partition][0][0] > last[size][partition]


def test_read_uncommitted_polls_return_every_record_once(backend) -> None:  # type: ignore[no-untyped-def]
    broker = backend.connect()
    broker.create_topic("t", partitions=2, schema=SCHEMA)
    fill_with_aborted_and_open(broker)
    consumer = broker.consumer(isolation_level="read_uncommitted")
    consumer.subscribe("t")
    seen: dict[int, list[int]] = {0: [], 1: []}
    while (batch := consumer.poll(max_records=333)).num_rows:
        for partition, offset in zip(batch["_partition"].to_pylist(), batch["_offset"].to_pylist(), strict=True):
            seen[partition].append(offset)
    for partition in (0, 1):
        end = broker.describe_topic("t").partitions[partition].high_watermark
        assert seen[partition] == list(range(end))


def test_a_poll_after_seek_inside_a_block_starts_there(backend) -> None:  # type: ignore[no-untyped-def]
    broker = backend.connect()
    broker.create_topic("t", partitions=1, schema=SCHEMA)
    segments(broker, 3, 100)
    consumer = broker.consumer()
    consumer.assign([TP])
    assert consumer.poll(max_records=10)["n"].to_pylist() == list(range(10))
    consumer.seek(TP, 250)
    assert consumer.poll(max_records=100)["n"].to_pylist() == list(range(250, 300))
    consumer.seek(TP, 5)
    batch = consumer.poll(max_records=1000)
    assert batch["n"].to_pylist() == list(range(5, 300)) and batch["_offset"].to_pylist() == list(range(5, 300))


def test_consumers_in_a_forked_child_fetch_ahead_too(backend, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The background fetchers are per process: a child forked after its parent
    consumed gets its own."""
    import multiprocessing

    broker = backend.connect()
    broker.create_topic("t", partitions=1, schema=SCHEMA)
    segments(broker, 3, 100)
    consumer = broker.consumer()
    consumer.assign([TP])
    assert consumer.poll(max_records=150).num_rows == 150  # the parent's fetchers started
    consumer.close()
    broker.close()
    context = multiprocessing.get_context("fork")
    child = context.Process(target=_consume_all, args=(backend, tmp_path / "child"))
    child.start()
    child.join(60)
    assert child.exitcode == 0
    assert (tmp_path / "child").read_text() == "300"


def _consume_all(backend, path) -> None:  # type: ignore[no-untyped-def]
    broker = backend.connect()
    consumer = broker.consumer()
    consumer.assign([TP])
    total = 0
    while (batch := consumer.poll(max_records=40)).num_rows:
        total += batch.num_rows
    path.write_text(str(total))
