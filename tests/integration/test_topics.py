"""Topics on both backends: create, list, describe, delete, and bad input."""

from __future__ import annotations

import pyarrow as pa
import pytest

from txn_broker.errors import (
    InvalidConfigError,
    InvalidTopicNameError,
    SchemaMismatchError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from txn_broker.log.batches import DEFAULT_SCHEMA

pytestmark = pytest.mark.integration


def test_create_list_describe_delete(backend):
    broker = backend.connect()
    schema = pa.schema([("id", pa.int64()), ("name", pa.string())])
    desc = broker.create_topic("orders", partitions=3, schema=schema, config={"retention.ms": 1000})
    broker.create_topic("events")
    assert broker.list_topics() == ["events", "orders"]
    assert desc.name == "orders"
    assert [p.partition for p in desc.partitions] == [0, 1, 2]
    for p in desc.partitions:
        assert (p.log_start_offset, p.high_watermark, p.last_stable_offset) == (0, 0, 0)
        assert (p.segment_count, p.size_bytes) == (0, 0)
    assert desc.schema.equals(schema)
    assert desc.config["retention.ms"] == 1000
    assert broker.describe_topic("events").schema.equals(DEFAULT_SCHEMA)

    producer = broker.producer()
    producer.send("orders", [{"id": 1, "name": "a"}], partition=2)
    producer.flush()
    info = broker.describe_topic("orders").partitions[2]
    assert (info.high_watermark, info.last_stable_offset, info.segment_count) == (1, 1, 1)
    assert info.size_bytes > 0

    broker.delete_topic("orders")
    assert broker.list_topics() == ["events"]
    with pytest.raises(UnknownTopicOrPartitionError):
        broker.describe_topic("orders")
    # the name can be used again, for a fresh topic
    assert broker.create_topic("orders").partitions[0].high_watermark == 0


@pytest.mark.parametrize("name", ["", "a b", "x" * 250, "..", "x'; DROP TABLE topics;--"])
def test_invalid_names_write_nothing(backend, name):
    broker = backend.connect()
    with pytest.raises(InvalidTopicNameError):
        broker.create_topic(name)
    assert broker.list_topics() == []


def test_duplicate_topic(backend):
    broker = backend.connect()
    broker.create_topic("t", partitions=2)
    with pytest.raises(TopicAlreadyExistsError):
        broker.create_topic("t", partitions=5)
    assert len(broker.describe_topic("t").partitions) == 2


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"partitions": 0}, InvalidConfigError),
        ({"partitions": "3"}, InvalidConfigError),
        ({"config": {"retention.hours": 1}}, InvalidConfigError),
        ({"config": {"max.message.bytes": 0}}, InvalidConfigError),
        ({"config": {"retention.ms": "soon"}}, InvalidConfigError),
        ({"schema": pa.schema([("_offset", pa.int64())])}, SchemaMismatchError),
        ({"schema": "id:int"}, SchemaMismatchError),
    ],
)
def test_bad_topic_settings_write_nothing(backend, kwargs, error):
    broker = backend.connect()
    with pytest.raises(error):
        broker.create_topic("t", **kwargs)
    assert broker.list_topics() == []


def test_unknown_topic(backend):
    broker = backend.connect()
    with pytest.raises(UnknownTopicOrPartitionError):
        broker.describe_topic("nope")
    with pytest.raises(UnknownTopicOrPartitionError):
        broker.delete_topic("nope")
