"""Writing DataFrames with ``df.write.format("txn_topic")`` on a real local SparkSession, on
both backends: partitioning that agrees with the Python producer, the idempotent write,
writes into an open transaction, fencing, and failures that must register nothing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from spark_helpers import consume_all, produce, registered_keys, stored_keys

import txn_broker.spark as ts
from txn_broker import field_id, with_field_id
from txn_broker.errors import (
    InvalidConfigError,
    ProducerFencedError,
    RecordTooLargeError,
    SchemaMismatchError,
)
from txn_broker.log.batches import key_partitions
from txn_broker.spark.failures import broker_error

pytestmark = [pytest.mark.spark, pytest.mark.integration]

SCHEMA = pa.schema([("order_id", pa.string()), ("amount", pa.int64()), ("ts", pa.timestamp("ms", tz="UTC"))])


def frame(spark, n: int, start: int = 0, parts: int = 3):  # type: ignore[no-untyped-def]
    table = pa.table({"order_id": [f"o{i}" for i in range(start, start + n)],
                      "amount": pa.array(range(start, start + n), pa.int64()),
                      "ts": pa.array([1_700_000_000_000 + i for i in range(n)], pa.timestamp("ms", tz="UTC"))})
    return spark.createDataFrame(table).repartition(parts)


def writer(df, broker, topic: str, **options: str):  # type: ignore[no-untyped-def]
    return df.write.format("txn_topic").mode("append").options(**ts.connection_options(broker)) \
        .option("topic", topic).options(**options)


def test_keyed_write_lands_where_the_producer_would_put_it(spark, broker) -> None:  # type: ignore[no-untyped-def]
    broker.create_topic("orders", partitions=3, schema=SCHEMA)
    writer(frame(spark, 600), broker, "orders", **{"key.column": "order_id", "segment.bytes": "4096"}).save()
    out = consume_all(broker, "orders")  # no transaction: visible as soon as save() returned
    assert sorted(out.column("amount").to_pylist()) == list(range(600))
    expected = key_partitions(out.column("order_id"), 3)
    assert np.array_equal(np.asarray(out.column("_partition").to_pylist()), expected)
    assert all(p.segment_count > 1 for p in broker.describe_topic("orders").partitions)
    assert stored_keys(broker, "orders") == registered_keys(broker, "orders")  # one attempt per task: no orphan

    # unkeyed: spread over the partitions, nothing lost or doubled
    writer(frame(spark, 300, start=600, parts=4), broker, "orders").save()
    out = consume_all(broker, "orders")
    assert sorted(out.column("amount").to_pylist()) == list(range(900))
    assert {p.high_watermark > 0 for p in broker.describe_topic("orders").partitions} == {True}


def test_a_read_dataframe_can_be_written_back(spark, broker) -> None:  # type: ignore[no-untyped-def]
    broker.create_topic("src", partitions=2, schema=SCHEMA)
    broker.create_topic("dst", partitions=2, schema=SCHEMA)
    writer(frame(spark, 50), broker, "src", **{"key.column": "order_id"}).save()
    df = spark.read.format("txn_topic").options(**ts.connection_options(broker)).option("topic", "src").load()
    writer(df.where("amount % 2 = 0"), broker, "dst").save()  # the broker's _columns are dropped
    out = consume_all(broker, "dst")
    assert sorted(out.column("amount").to_pylist()) == list(range(0, 50, 2))
    src = {r["order_id"]: r["ts"] for r in consume_all(broker, "src").to_pylist()}
    assert all(src[r["order_id"]] == r["ts"] for r in out.to_pylist())


def test_bad_writes_fail_before_any_upload(spark, broker) -> None:  # type: ignore[no-untyped-def]
    from pyspark.sql import functions as F

    broker.create_topic("strict", partitions=2, schema=SCHEMA, config={"max.message.bytes": 200})
    good = frame(spark, 20)
    cases = [
        (good.withColumn("amount", F.col("amount").cast("int")), SchemaMismatchError, "the topic needs bigint"),
        (good.drop("ts").withColumn("ts", F.lit("x")), SchemaMismatchError, "the topic needs timestamp"),
        (good.withColumn("extra", F.lit(1)), SchemaMismatchError, "extra column"),
    ]
    for df, kind, text in cases:
        with pytest.raises(Exception, match=text) as caught:
            writer(df, broker, "strict").save()
        assert isinstance(broker_error(caught.value), kind)
    with pytest.raises(Exception, match="append-only") as caught:
        good.write.format("txn_topic").mode("overwrite").options(**ts.connection_options(broker)) \
            .option("topic", "strict").save()
    assert isinstance(broker_error(caught.value), InvalidConfigError)
    with pytest.raises(Exception, match="key.column 'nope'"):
        writer(good, broker, "strict", **{"key.column": "nope"}).save()
    assert stored_keys(broker) == set()

    big = good.withColumn("order_id", F.concat(F.col("order_id"), F.lit("x" * 500)))
    with pytest.raises(Exception, match="max.message.bytes=200") as caught:
        writer(big, broker, "strict").save()
    assert isinstance(broker_error(caught.value), RecordTooLargeError)
    assert registered_keys(broker) == set()
    assert sum(p.high_watermark for p in broker.describe_topic("strict").partitions) == 0


def test_write_into_an_open_transaction(spark, broker) -> None:  # type: ignore[no-untyped-def]
    broker.create_topic("staged", partitions=2, schema=SCHEMA)
    producer = broker.producer(transactional_id="spark.writer")
    producer.init_transactions()
    producer.begin_transaction()
    df = frame(spark, 40)
    df.write.format("txn_topic").mode("append").options(**ts.write_options(broker, producer)) \
        .option("topic", "staged").save()
    assert consume_all(broker, "staged").num_rows == 0  # registered, not committed
    assert consume_all(broker, "staged", "read_uncommitted").num_rows == 40
    producer.commit_transaction()
    assert sorted(consume_all(broker, "staged").column("amount").to_pylist()) == list(range(40))

    producer.begin_transaction()
    frame(spark, 10, start=100).write.format("txn_topic").mode("append") \
        .options(**ts.write_options(broker, producer)).option("topic", "staged").save()
    producer.abort_transaction()
    assert sorted(consume_all(broker, "staged").column("amount").to_pylist()) == list(range(40))
    producer.close()


def test_a_fenced_writer_registers_nothing(spark, broker, backend, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    broker.create_topic("fenced", partitions=2, schema=SCHEMA)
    zombie = broker.producer(transactional_id="spark.zombie")
    zombie.init_transactions()
    zombie.begin_transaction()
    options = ts.write_options(broker, zombie)
    marker = tmp_path / "fenced-once"
    database_url, storage_url, storage_options = backend.database_url, backend.storage_url, broker._store.options()

    def take_over(batches):  # type: ignore[no-untyped-def]
        # A newer instance of the same transactional id starts while the job runs.
        if not marker.exists():
            marker.write_text("x")
            import txn_broker

            with txn_broker.connect(database_url, storage_url, storage_options=storage_options) as b:
                b.producer(transactional_id="spark.zombie").init_transactions()
        yield from batches

    df = frame(spark, 30, parts=1)
    with pytest.raises(Exception, match="fenced") as caught:
        df.mapInArrow(take_over, df.schema).write.format("txn_topic").mode("append").options(**options) \
            .option("topic", "fenced").save()
    assert isinstance(broker_error(caught.value), ProducerFencedError)
    assert registered_keys(broker) == set() and len(stored_keys(broker)) > 0  # uploaded, left for gc
    with pytest.raises(Exception, match="fenced") as caught:  # now refused before any task runs
        df.write.format("txn_topic").mode("append").options(**options).option("topic", "fenced").save()
    assert isinstance(broker_error(caught.value), ProducerFencedError)


def test_a_failed_job_registers_nothing(spark, broker) -> None:  # type: ignore[no-untyped-def]
    broker.create_topic("partial", partitions=2, schema=SCHEMA)

    def fail_one_partition(batches):  # type: ignore[no-untyped-def]
        from pyspark import TaskContext

        yield from batches
        if TaskContext.get().partitionId() == 1:
            raise RuntimeError("injected: this task always fails")

    df = frame(spark, 200, parts=3)
    with pytest.raises(Exception, match="injected: this task always fails"):
        writer(df.mapInArrow(fail_one_partition, df.schema), broker, "partial", **{"segment.bytes": "1"}).save()
    assert registered_keys(broker) == set()
    assert sum(p.high_watermark for p in broker.describe_topic("partial").partitions) == 0
    assert len(stored_keys(broker)) > 0  # the tasks that succeeded (and failed attempts) uploaded: orphans
    produce(broker, "partial", [{"order_id": "later", "amount": 1, "ts": 0}])
    assert consume_all(broker, "partial").column("order_id").to_pylist() == ["later"]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_dataframe_in_an_older_allowed_version_is_written_in_the_latest(spark, broker) -> None:  # type: ignore[no-untyped-def]
    """As ``producer.send`` (the same rules): a DataFrame in the version before the latest
    (``payer``, renamed ``customer`` in the latest by field id; no ``note``, added nullable)
    is converted to the latest; one in no version the mode allows is refused before any
    task runs, nothing written."""
    from pyspark.sql import functions as F

    v1 = pa.schema([("id", pa.int64()), ("payer", pa.string()), ("amount", pa.int64())])
    broker.create_topic("payments", partitions=2, schema=v1)
    latest = broker.describe_topic("payments").schema
    broker.alter_topic("payments", schema=pa.schema([
        latest.field("id"), with_field_id(pa.field("customer", pa.string()), field_id(latest.field("payer"))),
        latest.field("amount"), pa.field("note", pa.string())]))
    old = spark.createDataFrame(pa.table({"id": pa.array(range(40), pa.int64()),
                                          "payer": [f"p{i}" for i in range(40)],
                                          "amount": pa.array([i * 10 for i in range(40)], pa.int64())})).repartition(2)
    writer(old, broker, "payments", **{"key.column": "customer"}).save()
    new = spark.createDataFrame(pa.table({"id": pa.array([40], pa.int64()), "customer": ["c40"],
                                          "amount": pa.array([400], pa.int64()), "note": ["new"]}))
    writer(new, broker, "payments").save()
    out = consume_all(broker, "payments").sort_by("id")
    assert out.column_names[4:] == ["id", "customer", "amount", "note"]
    assert out.column("customer").to_pylist() == [f"p{i}" for i in range(40)] + ["c40"]
    assert out.column("amount").to_pylist() == [i * 10 for i in range(41)]
    assert out.column("note").to_pylist() == [None] * 40 + ["new"]
    # keyed by the latest version's column, as the producer partitions
    assert np.array_equal(np.asarray(out.column("_partition").to_pylist()), key_partitions(out.column("customer"), 2))
    before = registered_keys(broker, "payments")

    refused = [old.withColumn("amount", F.col("amount").cast("string")),  # in no version
               old.withColumn("extra", F.lit(1))]
    for df in refused:
        with pytest.raises(Exception, match="does not match topic 'payments'") as caught:
            writer(df, broker, "payments").save()
        assert isinstance(broker_error(caught.value), SchemaMismatchError)
    broker.alter_topic("payments", config={"schema.compatibility": "NONE"})  # the latest version only now
    with pytest.raises(Exception, match="missing column 'customer'") as caught:
        writer(old, broker, "payments").save()
    assert isinstance(broker_error(caught.value), SchemaMismatchError)
    assert registered_keys(broker, "payments") == before and stored_keys(broker, "payments") == before
    assert consume_all(broker, "payments").num_rows == 41
