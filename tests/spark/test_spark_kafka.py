"""Records crossing between Kafka's protocol (`txn-broker serve`, confluent-kafka) and
Spark's ``txn_topic`` source, on both backends: what a Kafka transactional producer commits
is what Spark and the Python API read (never its aborted records), and what Spark writes
to a topic with a user schema is what a Kafka read_committed consumer reads, as JSON."""

from __future__ import annotations

import json
import time

import pyarrow as pa
import pytest
from _kafka_listener import Listener
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from spark_helpers import consume_all

import txn_broker.spark as ts

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def test_kafka_protocol_and_spark_read_each_other(spark, broker, backend, tmp_path):
    listener = Listener(backend.env, tmp_path / "serve.log")
    try:
        admin = AdminClient({"bootstrap.servers": listener.bootstrap})
        admin.create_topics([NewTopic("from-kafka", 2)])["from-kafka"].result(15)
        producer = Producer({"bootstrap.servers": listener.bootstrap, "transactional.id": "k2s"})
        producer.init_transactions(15)
        producer.begin_transaction()
        for i in range(10):
            producer.produce("from-kafka", key=b"k%d" % i, value=b"v%d" % i, partition=i % 2)
        producer.commit_transaction(15)
        producer.begin_transaction()
        producer.produce("from-kafka", value=b"aborted", partition=0)
        producer.flush(15)
        producer.abort_transaction(15)

        df = spark.read.format("txn_topic").options(**ts.connection_options(broker)) \
            .option("topic", "from-kafka").load()
        assert sorted(bytes(r["value"]) for r in df.collect()) == sorted(b"v%d" % i for i in range(10))
        assert sorted(consume_all(broker, "from-kafka").column("key").to_pylist()) == \
            sorted(b"k%d" % i for i in range(10))

        schema = pa.schema([("key", pa.string()), ("n", pa.int64())])
        broker.create_topic("from-spark", 1, schema)
        rows = pa.table({"key": [f"s{i}" for i in range(6)], "n": pa.array(range(6), pa.int64())})
        spark.createDataFrame(rows).coalesce(1).write.format("txn_topic").mode("append") \
            .options(**ts.connection_options(broker)).option("topic", "from-spark").save()
        consumer = Consumer({"bootstrap.servers": listener.bootstrap, "group.id": "s2k",
                             "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
        consumer.assign([TopicPartition("from-spark", 0, 0)])
        got = []
        deadline = time.monotonic() + 15
        while len(got) < 6 and time.monotonic() < deadline:
            m = consumer.poll(0.3)
            if m is not None and not m.error():
                got.append((m.key(), json.loads(m.value())))
        consumer.close()
        assert sorted(got) == [(f"s{i}".encode(), {"key": f"s{i}", "n": i}) for i in range(6)]
    finally:
        listener.stop()
