"""Topics that change while pipelines run (issue 26), on both backends: schema versions
read under the latest, writers in older versions the mode allows, a transaction across a
change, more partitions (consumers, an exactly-once copier), configs, and bad input that
changes nothing."""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest

from txn_broker import TopicPartition, TopicSpec, field_id, key_partitions, with_default, with_field_id
from txn_broker.errors import (
    IncompatibleSchemaError,
    InvalidConfigError,
    InvalidPartitionsError,
    RecordTooLargeError,
    SchemaMismatchError,
)

pytestmark = pytest.mark.integration

V1 = pa.schema([pa.field("id", pa.int32(), nullable=False), ("name", pa.string()), ("gone", pa.string())])


def _read(broker, topic):
    consumer = broker.consumer(metadata_max_age_ms=0)
    consumer.subscribe([topic])
    tables = []
    while (table := consumer.poll(max_records=3)).num_rows:
        tables.append(table)
    consumer.close()
    return tables


def _latest(broker, topic, *fields):
    """The latest schema with ``fields`` changed: (name, new field) pairs, None to drop."""
    schema = broker.describe_topic(topic).schema
    changes = dict(fields)
    out = [changes.get(f.name, f) for f in schema if changes.get(f.name, f) is not None]
    return pa.schema(out + [f for name, f in fields if f is not None and name not in schema.names])


def test_every_version_reads_under_the_latest(backend):
    broker = backend.connect()
    broker.create_topic("orders", 2, V1)
    producer = broker.producer()
    producer.send("orders", [{"id": 1, "name": "a", "gone": "x"}], partition=0)
    producer.flush()
    # v2: widen id, add a nullable column and one with a default
    desc = broker.alter_topic("orders", schema=_latest(
        broker, "orders", ("id", pa.field("id", pa.int64(), nullable=False)), ("note", pa.field("note", pa.string())),
        ("currency", with_default(pa.field("currency", pa.string(), nullable=False), "EUR"))), by="alice")
    assert desc.schema_version == 2
    producer.send("orders", [{"id": 2, "name": "b", "gone": "y", "note": "n", "currency": "USD"}], partition=1)
    producer.flush()
    # v3: rename name -> customer (by its id), drop gone
    name = desc.schema.field("name")
    renamed = with_field_id(pa.field("customer", pa.string()), field_id(name))
    broker.alter_topic("orders", schema=_latest(broker, "orders", ("name", renamed), ("gone", None)))
    producer.send("orders", [{"id": 3, "customer": "c", "note": None, "currency": "GBP"}], partition=0)
    producer.flush()

    tables = _read(broker, "orders")
    assert {tuple(t.column_names) for t in tables} == {
        ("_topic", "_partition", "_offset", "_timestamp", "id", "customer", "note", "currency")}
    assert all(t.schema.field("id").type == pa.int64() and t.schema.field("id").metadata is None for t in tables)
    rows = sorted((r for t in tables for r in t.to_pylist()), key=lambda r: r["id"])
    assert [(r["id"], r["customer"], r["note"], r["currency"]) for r in rows] == [
        (1, "a", None, "EUR"), (2, "b", "n", "USD"), (3, "c", None, "GBP")]

    described = broker.describe_topic("orders")
    assert [v.version for v in described.schema_versions] == [1, 2, 3]
    assert [v.schema.names for v in described.schema_versions] == [
        ["id", "name", "gone"], ["id", "name", "gone", "note", "currency"], ["id", "customer", "note", "currency"]]
    assert described.schema_versions[1].created_by == "alice"
    assert field_id(described.schema.field("customer")) == field_id(name)
    history = broker.topic_alterations("orders")
    assert [h["changes"]["schema"]["to"] for h in history] == [2, 3]
    assert "renamed name to customer (id 6)" in history[1]["changes"]["schema"]["changes"]
    assert history[0]["altered_by"] == "alice" and "@" in history[1]["altered_by"]
    # a poll never mixes schemas: one consumer, polls on both sides of a change
    consumer = broker.consumer(metadata_max_age_ms=0)
    consumer.subscribe(["orders"])
    first = consumer.poll(max_records=1)
    broker.alter_topic("orders", schema=_latest(broker, "orders", ("extra", pa.field("extra", pa.bool_()))))
    rest = consumer.poll()
    assert "extra" not in first.column_names and rest.column_names[-1] == "extra"
    assert first.num_rows + rest.num_rows == 3


def test_writers_send_in_the_versions_the_mode_allows(backend):
    broker = backend.connect()
    broker.create_topic("t", 1, V1)
    old = broker.producer()  # a producer that looked the topic up before the changes
    old.send("t", [{"id": 1, "name": "a", "gone": "x"}])
    broker.alter_topic("t", schema=_latest(broker, "t", ("id", pa.field("id", pa.int64(), nullable=False)),
                                           ("note", pa.field("note", pa.string()))))
    broker.alter_topic("t", schema=_latest(broker, "t", ("gone", None)))
    new = backend.connect().producer()
    new.send("t", [{"id": 2, "name": "b", "note": "n"}])
    new.send("t", pa.table({"id": pa.array([3], pa.int64()), "name": ["c"]}))  # note missing: filled
    new.send("t", [{"id": 4, "name": "d", "gone": "y", "note": "m"}])  # version 2: the one before the latest
    with pytest.raises(SchemaMismatchError) as error:  # version 1 is older than BACKWARD lets writers send
        new.send("t", pa.table({"id": pa.array([5], pa.int32()), "name": ["e"], "gone": ["z"]}))
    assert "tried versions [3, 2]" in str(error.value)
    with pytest.raises(SchemaMismatchError):
        new.send("t", [{"id": 6, "colour": "red"}])
    broker.alter_topic("t", config={"schema.compatibility": "BACKWARD_TRANSITIVE"})
    new.send("t", pa.table({"id": pa.array([7], pa.int32()), "name": ["g"], "gone": ["w"]}))  # version 1 now
    new.flush()
    old.flush()  # buffered in version 1 before the changes: written and read under the latest
    rows = sorted((r for t in _read(broker, "t") for r in t.to_pylist()), key=lambda r: r["id"])
    assert [(r["id"], r["name"], r["note"]) for r in rows] == [
        (1, "a", None), (2, "b", "n"), (3, "c", None), (4, "d", "m"), (7, "g", None)]
    assert all("gone" not in r for r in rows)
    broker.alter_topic("t", config={"schema.compatibility": "NONE"})
    with pytest.raises(SchemaMismatchError):  # only the latest now (seen at once by this broker's clients)
        broker.producer().send("t", [{"id": 8, "name": "h", "gone": "v"}])


def test_a_transaction_spanning_a_change_commits_and_reads_under_the_new_schema(backend):
    """Old and new producers write in one transaction's window across a change: the
    transaction commits, every record reads under the latest version."""
    broker = backend.connect()
    broker.create_topic("t", 2, V1)
    old = broker.producer(transactional_id="old")
    old.init_transactions()
    old.begin_transaction()
    old.send("t", [{"id": 1, "name": "a", "gone": "x"}], partition=0)
    old.flush()  # a segment of version 1 inside the open transaction
    old.send("t", [{"id": 2, "name": "b", "gone": "y"}], partition=1)  # buffered in version 1
    broker.alter_topic("t", schema=_latest(broker, "t", ("id", pa.field("id", pa.int64(), nullable=False)),
                                           ("note", pa.field("note", pa.string()))))
    new = backend.connect().producer(transactional_id="new")
    new.init_transactions()
    with new.transaction():
        new.send("t", [{"id": 3, "name": "c", "gone": "z", "note": "n"}], partition=0)
    old.send("t", [{"id": 4, "name": "d", "gone": "w"}], partition=0)  # still version 1: allowed (BACKWARD)
    old.commit_transaction()
    tables = _read(broker, "t")
    assert {t.schema.field("id").type for t in tables} == {pa.int64()}
    rows = sorted((r for t in tables for r in t.to_pylist()), key=lambda r: r["id"])
    assert [(r["id"], r["note"]) for r in rows] == [(1, None), (2, None), (3, "n"), (4, None)]


def test_bad_alterations_are_typed_and_change_nothing(backend):
    broker = backend.connect()
    broker.create_topic("t", 2, V1, config={"retention.ms": 1000})
    producer = broker.producer()
    producer.send("t", [{"id": 1, "name": "a", "gone": "x"}])
    producer.flush()
    before = broker.describe_topic("t")
    narrowing = _latest(broker, "t", ("id", pa.field("id", pa.int16(), nullable=False)))
    required = _latest(broker, "t", ("n", pa.field("n", pa.int64(), nullable=False)))
    cases = [
        (dict(schema=narrowing), IncompatibleSchemaError, "'id' changes type from int32 to int16"),
        (dict(schema=required), IncompatibleSchemaError, "'n' is required"),
        (dict(partitions=1), InvalidPartitionsError, "can only be added"),
        (dict(config={"retention.hours": 1}), InvalidConfigError, "retention.hours"),
        (dict(config={"schema.compatibility": "SIDEWAYS"}), InvalidConfigError, "BACKWARD"),
        (dict(config={"retention.ms": -5}), InvalidConfigError, "retention.ms"),
        # one bad part refuses the whole alteration: the partitions are not added either
        (dict(partitions=4, schema=narrowing), IncompatibleSchemaError, "not a widening"),
        (dict(partitions=4, config={"max.message.bytes": 0}), InvalidConfigError, "max.message.bytes"),
        (dict(schema=pa.schema([("_x", pa.int64())])), SchemaMismatchError, "reserved"),
    ]
    for kwargs, error, text in cases:
        with pytest.raises(error) as info:
            broker.alter_topic("t", **kwargs)
        assert text in str(info.value), kwargs
    after = broker.describe_topic("t")
    assert (after.schema_version, len(after.partitions), after.config) == (1, 2, before.config)
    assert after.schema.equals(before.schema, check_metadata=True)
    assert broker.topic_alterations("t") == []
    # an alteration that changes nothing is no alteration
    broker.alter_topic("t", schema=before.schema, partitions=2, config={"retention.ms": 1000})
    assert broker.topic_alterations("t") == [] and broker.describe_topic("t").schema_version == 1


def test_configs_take_effect_for_new_writes(backend):
    broker = backend.connect()
    broker.create_topic("t", 1, config={"max.message.bytes": 1000})
    producer = broker.producer()
    with pytest.raises(RecordTooLargeError):
        producer.send("t", [{"value": b"x" * 2000}])
    desc = broker.alter_topic("t", config={"max.message.bytes": "10000", "compression.type": "lz4",
                                           "retention.ms": 60000})
    assert (desc.config["max.message.bytes"], desc.config["compression.type"], desc.config["retention.ms"]) == (
        10000, "lz4", 60000)
    producer.send("t", [{"value": b"x" * 2000}])  # the same producer sees the new limit
    producer.flush()
    assert broker.topic_alterations("t")[0]["changes"]["config"]["max.message.bytes"] == {"from": 1000, "to": 10000}


def test_more_partitions_reach_consumers_and_keyed_records(backend):
    broker = backend.connect()
    broker.create_topic("t", 2)
    consumer = broker.consumer(group_id="g", metadata_max_age_ms=0)
    consumer.subscribe(["t"])
    producer = broker.producer()
    producer.send("t", [{"key": f"k{i}".encode(), "value": b"1"} for i in range(50)], key="key")
    producer.flush()
    assert consumer.poll(timeout_s=1).num_rows == 50
    consumer.commit()
    desc = broker.alter_topic("t", partitions=5)
    assert [p.partition for p in desc.partitions] == [0, 1, 2, 3, 4]
    assert broker.topic_alterations("t")[0]["changes"] == {"partitions": {"from": 2, "to": 5}}
    producer.send("t", [{"key": f"k{i}".encode(), "value": b"2"} for i in range(50)], key="key")
    producer.flush()
    got = consumer.poll(timeout_s=1)
    assert got.num_rows == 50 and set(got["_partition"].to_pylist()) == {0, 1, 2, 3, 4}
    assert consumer.assignment() == [TopicPartition("t", p) for p in range(5)]
    expected = key_partitions(pa.array([f"k{i}".encode() for i in range(50)]), 5)  # the new count
    by_key = {r["key"]: r["_partition"] for r in got.to_pylist()}
    assert [by_key[f"k{i}".encode()] for i in range(50)] == expected.tolist()
    consumer.commit()
    assert set(broker.describe_group("g").partitions[i].partition for i in range(5)) == {0, 1, 2, 3, 4}


def test_an_exactly_once_copier_runs_across_a_partition_increase(backend):
    broker = backend.connect()
    broker.create_topic("in", 2)
    broker.create_topic("out", 2)
    seed = broker.producer()
    done = threading.Event()
    failures: list[BaseException] = []

    def copier() -> None:
        try:
            b = backend.connect()
            producer = b.producer(transactional_id="copier")
            producer.init_transactions()
            consumer = b.consumer(group_id="copy", metadata_max_age_ms=0)
            consumer.subscribe(["in"])
            idle = 0
            while idle < 3 or not done.is_set():
                table = consumer.poll(max_records=7, timeout_s=0.2)
                if table.num_rows == 0:
                    idle = idle + 1 if done.is_set() else 0
                    continue
                idle = 0
                with producer.transaction():
                    producer.send("out", [{"key": r["key"], "value": r["value"] + b"!"} for r in table.to_pylist()],
                                  key="key")
                    offsets: dict[TopicPartition, int] = {}
                    for r in table.select(["_topic", "_partition", "_offset"]).to_pylist():
                        tp = TopicPartition(r["_topic"], r["_partition"])
                        offsets[tp] = max(offsets.get(tp, 0), r["_offset"] + 1)
                    producer.send_offsets_to_transaction(offsets, "copy")
        except BaseException as error:  # reported by the test
            failures.append(error)

    thread = threading.Thread(target=copier)
    thread.start()
    for i in range(60):
        seed.send("in", [{"key": f"k{i}".encode(), "value": f"v{i}".encode()}], key="key")
        seed.flush()
        if i == 25:
            broker.alter_topic("in", partitions=4)
            broker.alter_topic("out", partitions=3)
    done.set()
    thread.join(timeout=120)
    assert not thread.is_alive() and not failures, failures
    rows = [r for t in _read(broker, "out") for r in t.to_pylist()]
    assert sorted(r["value"] for r in rows) == sorted(f"v{i}!".encode() for i in range(60))  # each once
    assert {r["_partition"] for t in _read(broker, "in") for r in t.to_pylist()} == {0, 1, 2, 3}
    assert broker.committed_offsets("copy", [TopicPartition("in", p) for p in range(4)]) == broker.end_offsets(
        [TopicPartition("in", p) for p in range(4)])


def test_declared_topics_evolve_on_deploy(backend):
    """ensure_topics(evolve=True): a pipeline's declared topics are created, or altered to
    the declaration when the change keeps their rules; refused with a clear error when not."""
    broker = backend.connect()
    v1 = TopicSpec("declared", 2, pa.schema([("id", pa.int32()), ("name", pa.string())]))
    assert broker.ensure_topics([v1], evolve=True) == {"declared": "created"}
    assert broker.ensure_topics([v1], evolve=True) == {"declared": "exists"}
    v2 = TopicSpec("declared", 3, pa.schema([("id", pa.int64()), ("name", pa.string()), ("note", pa.string())]))
    with pytest.raises(InvalidConfigError):  # without evolve, a difference is an error as before
        broker.ensure_topics([v2])
    assert broker.ensure_topics([v2], evolve=True, by="deploy-7") == {"declared": "evolved"}
    desc = broker.describe_topic("declared")
    assert (desc.schema_version, len(desc.partitions), desc.schema.names) == (2, 3, ["id", "name", "note"])
    assert broker.topic_alterations("declared")[0]["altered_by"] == "deploy-7"
    bad = TopicSpec("declared", 3, pa.schema([("id", pa.int16()), ("name", pa.string()), ("note", pa.string())]))
    with pytest.raises(IncompatibleSchemaError) as error:
        broker.ensure_topics([bad], evolve=True)
    assert "topic 'declared' cannot evolve" in str(error.value) and error.value.field == "id"
    with pytest.raises(InvalidPartitionsError):
        broker.ensure_topics([TopicSpec("declared", 1, v2.schema)], evolve=True)
    assert broker.describe_topic("declared").schema_version == 2


def test_compaction_merges_segments_of_several_versions_into_the_latest(backend):
    broker = backend.connect()
    broker.create_topic("t", 1, pa.schema([("id", pa.int32()), ("name", pa.string())]),
                        config={"min.compaction.lag.ms": 0})
    producer = broker.producer()
    for i in range(3):
        producer.send("t", [{"id": i, "name": f"n{i}"}])
        producer.flush()
    broker.alter_topic("t", schema=pa.schema([("id", pa.int64()), ("name", pa.string()), ("note", pa.string())]))
    for i in range(3, 6):
        producer.send("t", [{"id": i, "name": f"n{i}", "note": "v2"}])
        producer.flush()
    report = broker.compact(["t"])
    assert (report.segments_replaced, report.segments_written) == (6, 1)
    rows = [r for t in _read(broker, "t") for r in t.to_pylist()]
    assert [(r["id"], r["note"]) for r in rows] == [(i, None) for i in range(3)] + [(i, "v2") for i in range(3, 6)]
