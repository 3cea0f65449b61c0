"""Producing and consuming on both backends."""

from __future__ import annotations

import pyarrow as pa
import pytest

from txn_broker import TopicPartition
from txn_broker.errors import (
    IllegalStateError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    SchemaMismatchError,
    UnknownGroupError,
    UnknownTopicOrPartitionError,
)
from txn_broker.log.partition import plan_segments

pytestmark = pytest.mark.integration
SCHEMA = pa.schema([("order_id", pa.string()), ("amount", pa.int64())])


def orders(n, start=0):
    return [{"order_id": f"o{i}", "amount": i} for i in range(start, start + n)]


def hw(broker, topic):
    return [p.high_watermark for p in broker.describe_topic(topic).partitions]


def test_offsets_order_and_columns(backend):
    broker = backend.connect()
    broker.create_topic("orders", partitions=1, schema=SCHEMA)
    producer = broker.producer()
    for start in range(0, 30, 10):
        producer.send("orders", orders(10, start))
        producer.flush()
    consumer = broker.consumer()
    consumer.assign([TopicPartition("orders", 0)])
    table = consumer.poll(max_records=1000)
    assert table.column_names == ["_topic", "_partition", "_offset", "_timestamp", "order_id", "amount"]
    assert table.column("_offset").to_pylist() == list(range(30))
    assert table.column("amount").to_pylist() == list(range(30))
    assert set(table.column("_topic").to_pylist()) == {"orders"}
    assert consumer.poll(timeout_s=0.05).num_rows == 0


def test_poll_respects_max_records_and_resumes(backend):
    broker = backend.connect()
    broker.create_topic("t", schema=SCHEMA)
    producer = broker.producer()
    producer.send("t", orders(25), partition=0)
    producer.flush()
    consumer = broker.consumer()
    consumer.subscribe(["t"])
    seen = []
    while batch := consumer.poll(max_records=7).column("_offset").to_pylist():
        assert len(batch) <= 7
        seen += batch
    assert seen == list(range(25))


def test_small_sends_are_buffered_into_one_segment(backend):
    broker = backend.connect()
    broker.create_topic("t", schema=SCHEMA)
    producer = broker.producer()
    for i in range(50):
        producer.send("t", orders(1, i), partition=0)
    assert hw(broker, "t") == [0]  # buffered, not yet in the log
    producer.flush()
    info = broker.describe_topic("t").partitions[0]
    assert (info.high_watermark, info.segment_count) == (50, 1)


def test_buffer_becomes_a_segment_at_the_size_threshold(backend):
    broker = backend.connect(segment_bytes=2000)
    broker.create_topic("t", schema=SCHEMA)
    producer = broker.producer()
    for i in range(40):
        producer.send("t", orders(10, i * 10), partition=0)
    assert broker.describe_topic("t").partitions[0].segment_count >= 2
    producer.close()  # flushes the rest
    assert hw(broker, "t") == [400]


def test_a_large_send_becomes_segments_of_about_segment_bytes(backend):
    """One send of many times ``segment_bytes`` is stored as segments of that size (not one
    object a reader must load whole), in a transaction as outside one; every record is
    read back once, in order."""
    broker = backend.connect(segment_bytes=4_000)
    broker.create_topic("t", schema=SCHEMA)
    producer = broker.producer(transactional_id="large")
    producer.init_transactions()
    big = orders(2_000)
    with producer.transaction():
        producer.send("t", big, partition=0)
    plain = broker.producer()
    plain.send("t", orders(2_000, 2_000), partition=0)
    plain.close()
    sizes = [s.size_bytes for s in broker._db.read(lambda tx: plan_segments(
        tx, broker._topics.get("t").topic_id, 0, 0, 4_000, max_segments=1_000))]
    assert len(sizes) >= 2 * (pa.Table.from_pylist(big).nbytes // 4_000) - 2
    assert max(sizes) < 3 * 4_000  # about segment_bytes each (a segment also holds its schema)
    consumer = broker.consumer()
    consumer.subscribe(["t"])
    rows = consumer.poll(max_records=10_000).to_pylist()
    assert [r["order_id"] for r in rows] == [f"o{i}" for i in range(4_000)]
    assert [r["_offset"] for r in rows] == list(range(4_000))


def test_keyed_sends_keep_equal_keys_together(backend):
    broker = backend.connect()
    broker.create_topic("t", partitions=4, schema=SCHEMA)
    producer = broker.producer()
    for _ in range(3):
        producer.send("t", [{"order_id": f"k{i % 10}", "amount": i} for i in range(100)], key="order_id")
    producer.flush()
    consumer = broker.consumer()
    consumer.subscribe(["t"])
    rows = consumer.poll(max_records=10_000).to_pylist()
    assert len(rows) == 300
    where = {}
    for row in rows:
        where.setdefault(row["order_id"], set()).add(row["_partition"])
    assert all(len(parts) == 1 for parts in where.values())
    assert len({p for parts in where.values() for p in parts}) > 1


def test_unkeyed_sends_spread(backend):
    broker = backend.connect()
    broker.create_topic("t", partitions=3, schema=SCHEMA)
    producer = broker.producer()
    for i in range(6):
        producer.send("t", orders(1, i))
    producer.flush()
    assert hw(broker, "t") == [2, 2, 2]


def test_seek_commit_committed_and_lag(backend):
    broker = backend.connect()
    broker.create_topic("t", partitions=2, schema=SCHEMA)
    producer = broker.producer()
    producer.send("t", orders(10), partition=0)
    producer.send("t", orders(4), partition=1)
    producer.flush()
    tp0, tp1 = TopicPartition("t", 0), TopicPartition("t", 1)

    consumer = broker.consumer(group_id="g")
    consumer.assign([tp0, tp1])
    assert consumer.committed([tp0, tp1]) == {tp0: None, tp1: None}
    consumer.seek(tp0, 6)
    assert consumer.position(tp0) == 6
    table = consumer.poll(max_records=100)
    got = {(r["_partition"], r["_offset"]) for r in table.to_pylist()}
    assert got == {(0, o) for o in range(6, 10)} | {(1, o) for o in range(4)}
    consumer.commit({tp0: 8, tp1: 4})
    assert consumer.committed([tp0, tp1]) == {tp0: 8, tp1: 4}

    desc = broker.describe_group("g")
    lags = {(p.topic, p.partition): (p.committed_offset, p.last_stable_offset, p.lag) for p in desc.partitions}
    assert lags == {("t", 0): (8, 10, 2), ("t", 1): (4, 4, 0)}
    assert desc.lag == 2
    assert broker.list_groups() == ["g"]

    # a new consumer of the group starts from the committed offsets
    again = broker.consumer(group_id="g")
    again.assign([tp0, tp1])
    assert again.position(tp0) == 8
    assert again.poll(max_records=100).column("_offset").to_pylist() == [8, 9]
    again.commit()
    assert broker.describe_group("g").lag == 0


def test_auto_offset_reset_latest(backend):
    broker = backend.connect()
    broker.create_topic("t", schema=SCHEMA)
    producer = broker.producer()
    producer.send("t", orders(5))
    producer.flush()
    consumer = broker.consumer(auto_offset_reset="latest")
    consumer.subscribe(["t"])
    assert consumer.poll().num_rows == 0
    producer.send("t", orders(2, 5))
    producer.flush()
    assert consumer.poll().column("amount").to_pylist() == [5, 6]


def test_bad_sends_write_nothing(backend):
    broker = backend.connect()
    broker.create_topic("t", partitions=2, schema=SCHEMA, config={"max.message.bytes": 100})
    producer = broker.producer()
    with pytest.raises(SchemaMismatchError):
        producer.send("t", [{"order_id": 5, "amount": "x"}])
    with pytest.raises(SchemaMismatchError):  # (a missing nullable column is filled with nulls)
        producer.send("t", pa.table({"order_id": ["a"], "colour": ["red"]}))
    with pytest.raises(RecordTooLargeError):
        producer.send("t", [{"order_id": "x" * 200, "amount": 1}])
    with pytest.raises(UnknownTopicOrPartitionError):
        producer.send("nope", orders(1))
    with pytest.raises(UnknownTopicOrPartitionError):
        producer.send("t", orders(1), partition=2)
    with pytest.raises(SchemaMismatchError):
        producer.send("t", orders(1), key="no_such_column")
    producer.send("t", [])  # an empty batch is a no-op
    assert producer.flush() == []
    assert hw(broker, "t") == [0, 0]
    assert all(p.segment_count == 0 for p in broker.describe_topic("t").partitions)


def test_consumer_bad_input(backend):
    broker = backend.connect()
    broker.create_topic("t", schema=SCHEMA)
    consumer = broker.consumer(group_id="g")
    with pytest.raises(IllegalStateError):
        consumer.poll()
    with pytest.raises(UnknownTopicOrPartitionError):
        consumer.assign([TopicPartition("t", 1)])
    consumer.assign([TopicPartition("t", 0)])
    with pytest.raises(OffsetOutOfRangeError):
        consumer.seek(TopicPartition("t", 0), 5)
    with pytest.raises(OffsetOutOfRangeError):
        consumer.commit({TopicPartition("t", 0): -1})
    with pytest.raises(OffsetOutOfRangeError):
        consumer.commit({TopicPartition("t", 0): 10})
    with pytest.raises(UnknownGroupError):
        broker.describe_group("g")
    no_group = broker.consumer()
    no_group.assign([TopicPartition("t", 0)])
    with pytest.raises(IllegalStateError):
        no_group.commit()


def test_default_schema_records(backend):
    broker = backend.connect()
    broker.create_topic("raw")
    producer = broker.producer()
    producer.send("raw", [{"key": b"k", "value": b"\xff\x00binary", "headers": [("h", b"v")]}])
    producer.flush()
    consumer = broker.consumer()
    consumer.subscribe(["raw"])
    row = consumer.poll().to_pylist()[0]
    assert row["value"] == b"\xff\x00binary" and row["headers"] == [("h", b"v")]


def test_reading_fetches_only_needed_segments(backend):
    broker = backend.connect()
    broker.create_topic("t", schema=SCHEMA)
    producer = broker.producer()
    for i in range(10):
        producer.send("t", orders(10, i * 10))
        producer.flush()
    fetched = []
    original = broker._store.get_buffer

    def counting_get(key):
        fetched.append(key)
        return original(key)

    broker._store.get_buffer = counting_get
    consumer = broker.consumer()
    consumer.assign([TopicPartition("t", 0)])
    consumer.seek(TopicPartition("t", 0), 85)
    assert consumer.poll(max_records=10).column("_offset").to_pylist() == list(range(85, 95))
    assert len(fetched) == 2  # segments [80, 90) and [90, 100) only


@pytest.mark.parametrize("compression", ["uncompressed", "lz4", "zstd"])
def test_topic_compression_applies_to_its_segments(backend, compression):
    broker = backend.connect()
    broker.create_topic("t", schema=SCHEMA, config={"compression.type": compression})
    assert broker.describe_topic("t").config["compression.type"] == compression
    producer = broker.producer()
    rows = [{"order_id": f"order-{i % 10}", "amount": i % 3} for i in range(20_000)]  # compressible
    producer.send("t", rows, partition=0)
    producer.flush()
    size = broker.describe_topic("t").partitions[0].size_bytes
    raw = pa.Table.from_pylist(rows, schema=SCHEMA).nbytes
    assert (size < raw / 2) == (compression != "uncompressed")
    consumer = broker.consumer()
    consumer.assign([TopicPartition("t", 0)])
    got = consumer.poll(max_records=100_000)
    assert got.select(["order_id", "amount"]).to_pylist() == rows


def test_segments_written_before_compression_stay_readable(backend):
    """A topic created before compression.type existed keeps writing uncompressed segments;
    a topic whose segments mix codecs reads back whole, in offset order."""
    import json

    broker = backend.connect()
    broker.create_topic("t", schema=SCHEMA, config={"compression.type": "uncompressed"})
    meta = broker._topics.get("t")
    legacy = {k: v for k, v in meta.config.items() if k != "compression.type"}
    broker._db.run(lambda tx: tx.raw("UPDATE topics SET config = :c WHERE topic_id = :t",
                                    c=json.dumps(legacy), t=meta.topic_id))
    broker._topics.forget("t")
    assert broker.describe_topic("t").config["compression.type"] == "uncompressed"
    producer = broker.producer()
    producer.send("t", orders(100), partition=0)
    producer.flush()
    for codec in ("zstd", "lz4"):  # as if the topic's config had been changed since
        broker._db.run(lambda tx, codec=codec: tx.raw(
            "UPDATE topics SET config = :c WHERE topic_id = :t",
            c=json.dumps({**legacy, "compression.type": codec}), t=meta.topic_id))
        broker._topics.forget("t")
        producer = broker.producer()
        producer.send("t", orders(100, 100 if codec == "zstd" else 200), partition=0)
        producer.flush()
    consumer = broker.consumer()
    consumer.assign([TopicPartition("t", 0)])
    got = consumer.poll(max_records=1000)
    assert got.column("_offset").to_pylist() == list(range(300))
    assert got.select(["order_id", "amount"]).to_pylist() == orders(300)


def test_unknown_compression_is_a_config_error(backend):
    from txn_broker.errors import InvalidConfigError

    broker = backend.connect()
    for bad in ("brotli", "GZIP", "", 1):
        with pytest.raises(InvalidConfigError, match="compression.type"):
            broker.create_topic("t", config={"compression.type": bad})
    assert broker.list_topics() == []
    broker.create_topic("t", config={"compression.type": "none"})  # Kafka's producer-side name
    assert broker.describe_topic("t").config["compression.type"] == "uncompressed"


def test_kafkas_other_compression_types_are_kept_and_map_to_a_segment_codec(backend):
    """Kafka's gzip, snappy and producer: accepted (Kafka's tools set them), kept as given,
    and the topic's segments written with zstd, lz4 and zstd: the same records take exactly
    the bytes they take in a topic of that codec."""
    broker = backend.connect()
    records = [{"key": str(i).encode(), "value": b"compressible text " * 50} for i in range(200)]

    def stored(compression_type: str) -> int:
        topic = f"t-{compression_type}"
        broker.create_topic(topic, config={"compression.type": compression_type})
        with broker.producer() as producer:
            producer.send(topic, records, partition=0)
        described = broker.describe_topic(topic)
        assert described.config["compression.type"] == compression_type
        return described.partitions[0].size_bytes

    sizes = {c: stored(c) for c in ("zstd", "lz4", "uncompressed", "gzip", "snappy", "producer")}
    assert sizes["zstd"] < sizes["lz4"] < sizes["uncompressed"]
    assert (sizes["gzip"], sizes["snappy"], sizes["producer"]) == (sizes["zstd"], sizes["lz4"], sizes["zstd"])
    broker.alter_topic("t-gzip", config={"compression.type": "snappy"})
    assert broker.describe_topic("t-gzip").config["compression.type"] == "snappy"
