"""Reading topics with ``spark.read.format("txn_topic")`` on a real local SparkSession, on
both backends: what is visible at each isolation level, fixed and atomic end offsets,
parallel splits, and errors."""

from __future__ import annotations

import contextlib
import io
import json
import uuid
from importlib.metadata import version

import pyarrow as pa
import pytest
from spark_helpers import consume_all, produce

import txn_broker.spark as ts
from txn_broker import TopicPartition
from txn_broker.errors import InvalidConfigError, OffsetOutOfRangeError, UnknownTopicOrPartitionError
from txn_broker.spark.failures import broker_error

pytestmark = [pytest.mark.spark, pytest.mark.integration]

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("ts", pa.timestamp("ms", tz="UTC"))])


def rows(lo: int, hi: int) -> list[dict]:
    return [{"id": i, "name": f"n{i}", "ts": 1_700_000_000_000 + i} for i in range(lo, hi)]


def reader(spark, broker, topic: str, **options: str):  # type: ignore[no-untyped-def]
    named = {} if "topics" in options else {"topic": topic}
    return spark.read.format("txn_topic").options(**ts.connection_options(broker), **named, **options)


def as_sorted(table: pa.Table) -> list[tuple]:
    cols = ["_topic", "_partition", "_offset", "id", "name"]
    return sorted(zip(*(table.column(c).to_pylist() for c in cols), strict=True))


def spark_rows(df) -> list[tuple]:  # type: ignore[no-untyped-def]
    return sorted(tuple(r) for r in df.select("_topic", "_partition", "_offset", "id", "name").collect())


def test_pyspark_and_pyspark_client_are_the_same_version(spark) -> None:  # type: ignore[no-untyped-def]
    import pyspark

    assert pyspark.__version__ == spark.version
    assert version("pyspark-client") == version("pyspark") == spark.version


def test_read_committed_matches_the_consumer_and_skips_aborted_and_open(spark, broker) -> None:  # type: ignore[no-untyped-def]
    broker.create_topic("events", partitions=3, schema=SCHEMA)
    produce(broker, "events", rows(0, 60), key="name", per_transaction=20)
    aborted = broker.producer(transactional_id="test.aborted")
    aborted.init_transactions()
    aborted.begin_transaction()
    aborted.send("events", rows(1000, 1030), key="name")
    aborted.flush()
    aborted.abort_transaction()
    produce(broker, "events", rows(60, 90), key="name")
    hanging = broker.producer(transactional_id="test.open")
    hanging.init_transactions()
    hanging.begin_transaction()
    hanging.send("events", rows(2000, 2010), key="name")
    hanging.flush()  # registered, not committed: holds the last stable offset back
    produce(broker, "events", rows(90, 100), key="name")  # after the open one: not yet readable

    df = reader(spark, broker, "events").load()
    assert [f.name for f in df.schema.fields] == ["_topic", "_partition", "_offset", "_timestamp", "id", "name", "ts"]
    expected = consume_all(broker, "events")
    assert spark_rows(df) == as_sorted(expected)
    assert {r[3] for r in spark_rows(df)} == set(range(90))  # nothing aborted, open, or past the LSO
    first = df.orderBy("id").first()
    assert first["ts"].timestamp() == 1_700_000_000.0

    uncommitted = reader(spark, broker, "events", **{"isolation.level": "read_uncommitted"}).load()
    assert spark_rows(uncommitted) == as_sorted(consume_all(broker, "events", "read_uncommitted"))
    assert {r[3] for r in spark_rows(uncommitted)} == set(range(100)) | set(range(1000, 1030)) | set(range(2000, 2010))
    hanging.abort_transaction()


def test_end_offsets_are_fixed_at_load_and_exposed(spark, broker) -> None:  # type: ignore[no-untyped-def]
    broker.create_topic("fixed", partitions=2, schema=SCHEMA)
    produce(broker, "fixed", rows(0, 40), key="name")
    df = reader(spark, broker, "fixed").load()
    planned = ts.planned_offsets(df)
    assert planned is not None
    ends = broker.end_offsets([TopicPartition("fixed", 0), TopicPartition("fixed", 1)])
    assert planned.ending() == ends and sum(ends.values()) == 40
    produce(broker, "fixed", rows(40, 70), key="name")
    assert df.count() == 40  # a later action reads the same bounded batch
    assert df.where("id >= 0").count() == 40
    assert reader(spark, broker, "fixed").load().count() == 70

    # the resolved offsets replay exactly, and starting offsets move the start
    again = reader(spark, broker, "fixed", **planned.read_options()).load()
    assert spark_rows(again) == spark_rows(df)
    tp0, tp1 = TopicPartition("fixed", 0), TopicPartition("fixed", 1)
    start = {"fixed": {"0": ends[tp0]}}  # partition 1 is not named: earliest
    later = reader(spark, broker, "fixed", startingOffsets=json.dumps(start)).load()
    counts = {r["_partition"]: r["count"] for r in later.groupBy("_partition").count().collect()}
    now = broker.end_offsets([tp0, tp1])
    assert counts.get(0, 0) == now[tp0] - ends[tp0] and counts[1] == now[tp1]


def test_group_offsets_are_the_start(spark, broker) -> None:  # type: ignore[no-untyped-def]
    broker.create_topic("grouped", partitions=2, schema=SCHEMA)
    produce(broker, "grouped", rows(0, 50), key="name")
    tps = [TopicPartition("grouped", 0), TopicPartition("grouped", 1)]
    ends = broker.end_offsets(tps)
    broker.commit_offsets("readers", {tps[0]: ends[tps[0]]})  # partition 0 fully read, 1 not at all
    df = reader(spark, broker, "grouped", **{"group.id": "readers", "startingOffsets": "earliest"}).load()
    got = spark_rows(df)
    assert {r[1] for r in got} == {1} and len(got) == ends[tps[1]]
    planned = ts.planned_offsets(df)
    assert planned is not None and planned.starting()[tps[0]] == ends[tps[0]]


def test_large_partitions_are_read_by_several_tasks(spark, broker) -> None:  # type: ignore[no-untyped-def]
    broker.create_topic("wide", partitions=4, schema=SCHEMA)
    produce(broker, "wide", rows(0, 800), key="name", flush_every=100)  # several segments per partition
    assert all(p.segment_count >= 3 for p in broker.describe_topic("wide").partitions)

    def tasks_of(df, group: str) -> int:  # type: ignore[no-untyped-def]
        sc = spark.sparkContext
        sc.setJobGroup(group, group)
        try:
            assert df.count() == 800
        finally:
            sc.setLocalProperty("spark.jobGroup.id", None)
        tracker = sc.statusTracker()
        stages = [tracker.getStageInfo(s) for j in tracker.getJobIdsForGroup(group)
                  for s in tracker.getJobInfo(j).stageIds]
        return max(s.numTasks for s in stages if s is not None)  # the scan stage

    group = f"wide-{uuid.uuid4().hex[:6]}"
    df = reader(spark, broker, "wide").load()
    assert df.rdd.getNumPartitions() == 4
    assert tasks_of(df, group) > 1
    from pyspark.sql import functions as F

    per_task = df.groupBy(F.spark_partition_id().alias("task")).agg(F.countDistinct("_partition").alias("n"))
    assert per_task.count() == 4 and {r["n"] for r in per_task.collect()} == {1}

    split = reader(spark, broker, "wide", maxRecordsPerPartition="100").load()
    assert split.rdd.getNumPartitions() >= 8
    assert spark_rows(split) == spark_rows(df)
    many = reader(spark, broker, "wide", minPartitions="16").load()
    assert many.rdd.getNumPartitions() >= 16
    assert spark_rows(many) == spark_rows(df)


def test_the_end_never_cuts_a_committed_transaction(spark, broker) -> None:  # type: ignore[no-untyped-def]
    broker.create_topic("ledger", partitions=2, schema=SCHEMA)
    produce(broker, "ledger", [{"id": 1, "name": "a", "ts": 0}], transactional_id="t.first")
    # an open transaction on partition 1 holds its last stable offset back ...
    hanging = broker.producer(transactional_id="t.open")
    hanging.init_transactions()
    hanging.begin_transaction()
    hanging.send("ledger", rows(100, 101), partition=1)
    hanging.flush()
    # ... while a later transaction commits on both partitions
    both = broker.producer(transactional_id="t.both")
    both.init_transactions()
    with both.transaction():
        both.send("ledger", rows(200, 201), partition=0)
        both.send("ledger", rows(201, 202), partition=1)
    df = reader(spark, broker, "ledger").load()
    assert {r[3] for r in spark_rows(df)} == {1}  # neither leg of the later transaction
    planned = ts.planned_offsets(df)
    assert planned is not None
    hanging.commit_transaction()
    rest = reader(spark, broker, "ledger", startingOffsets=planned.ending_json()).load()
    assert {r[3] for r in spark_rows(rest)} == {100, 200, 201}


def test_several_topics_read_as_the_union_of_their_columns(spark, broker) -> None:  # type: ignore[no-untyped-def]
    broker.create_topic("left", partitions=1, schema=SCHEMA)
    broker.create_topic("right", partitions=2, schema=pa.schema([("id", pa.int64()), ("score", pa.float64())]))
    produce(broker, "left", rows(0, 5))
    produce(broker, "right", [{"id": i, "score": i / 2} for i in range(3)])
    df = spark.read.format("txn_topic").options(**ts.connection_options(broker)).option("topics", "left,right").load()
    assert df.columns == ["_topic", "_partition", "_offset", "_timestamp", "id", "name", "ts", "score"]
    got = {(r["_topic"], r["id"], r["name"], r["score"]) for r in df.collect()}
    assert got == {("left", i, f"n{i}", None) for i in range(5)} | {("right", i, None, i / 2) for i in range(3)}


def test_bad_read_options_are_typed_errors(spark, broker) -> None:  # type: ignore[no-untyped-def]
    broker.create_topic("present", partitions=2, schema=SCHEMA)
    produce(broker, "present", rows(0, 10))
    cases = [
        ({"topic": "absent"}, UnknownTopicOrPartitionError, "unknown topic 'absent'"),
        ({"topic": "present", "startingOffset": "earliest"}, InvalidConfigError, "unknown txn_topic read option"),
        ({"topic": "present", "endingOffsets": '{"present": {"0": 999}}'}, OffsetOutOfRangeError, "past what"),
        ({"topic": "present", "startingOffsets": '{"present": {"7": 0}}'}, UnknownTopicOrPartitionError,
         "no partition 7"),
        ({"topic": "present", "isolation.level": "dirty"}, InvalidConfigError, "isolation.level"),
    ]
    for options, kind, text in cases:
        with pytest.raises(Exception, match=text) as caught:
            spark.read.format("txn_topic").options(**ts.connection_options(broker)).options(**options).load()
        assert isinstance(broker_error(caught.value), kind), caught.value


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_the_database_password_never_appears_in_plans_or_errors(spark, backend, broker) -> None:  # type: ignore[no-untyped-def]
    import sqlalchemy as sa

    secret = f"Pw{uuid.uuid4().hex}"
    role = f"spark_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(backend.database_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f"CREATE ROLE {role} LOGIN PASSWORD '{secret}'"))
        conn.execute(sa.text(f"GRANT ALL ON ALL TABLES IN SCHEMA public TO {role}"))
    try:
        url = sa.make_url(backend.database_url).set(username=role, password=secret)
        options = {**ts.connection_options(broker), "database.url": url.render_as_string(hide_password=False)}
        broker.create_topic("private", partitions=1, schema=SCHEMA)
        produce(broker, "private", rows(0, 3))
        df = spark.read.format("txn_topic").options(**options).option("topic", "private").load()
        assert df.count() == 3
        shown = io.StringIO()
        with contextlib.redirect_stdout(shown):
            df.explain(True)
        texts = [shown.getvalue(), df._jdf.queryExecution().toString(), repr(df.schema)]
        with pytest.raises(Exception) as caught:
            spark.read.format("txn_topic").options(**options).option("topic", "missing").load()
        texts.append(str(caught.value))
        df.select("id", "name", "ts").write.format("txn_topic").options(**options).option("topic", "private") \
            .mode("append").save()
        assert spark.read.format("txn_topic").options(**options).option("topic", "private").load().count() == 6
        for text in texts:
            assert secret not in text
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f"DROP OWNED BY {role}"))
            conn.execute(sa.text(f"DROP ROLE {role}"))
        admin.dispose()


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_storage_settings_travel_in_the_options_and_stay_out_of_plans(spark, backend, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A broker opened with explicit storage options (an S3 endpoint of its own, its own
    credentials): Spark's workers get them from the data source options the driver built
    from that broker, not from their environment (whose endpoint is another server), and
    the secret key and session token appear in no plan, schema or error text."""
    from _servers import S3Server

    import txn_broker

    other = S3Server()
    try:
        secret, token = f"S3Secret{uuid.uuid4().hex}", f"S3Token{uuid.uuid4().hex}"
        bucket = other.new_bucket()
        with txn_broker.connect(backend.database_url, f"s3://{bucket}/segments", storage_options={
                "endpoint_url": other.endpoint_url, "region_name": "us-east-1", "aws_access_key_id": "spark-key",
                "aws_secret_access_key": secret, "aws_session_token": token}, retry_budget_ms=4321) as own:
            options = ts.connection_options(own)
            assert options["s3.endpoint.url"] == other.endpoint_url and options["s3.secret.access.key"] == secret
            # executors retry as the driver's broker does
            from txn_broker.spark.options import connection

            assert options["retry.budget.ms"] == "4321"
            assert connection(options).storage().open_store().retry_budget_ms == 4321
            own.create_topic("elsewhere", partitions=2, schema=SCHEMA)
            produce(own, "elsewhere", rows(0, 5))
            df = spark.read.format("txn_topic").options(**options).option("topic", "elsewhere").load()
            assert df.count() == 5
            df.select("id", "name", "ts").write.format("txn_topic").options(**options) \
                .option("topic", "elsewhere").mode("append").save()
            again = spark.read.format("txn_topic").options(**options).option("topic", "elsewhere").load()
            assert again.count() == 10
            keys = [o["Key"] for o in other.client().list_objects_v2(Bucket=bucket).get("Contents", [])]
            assert any("/spark-" in k for k in keys)  # the executors uploaded to this broker's endpoint
            shown = io.StringIO()
            with contextlib.redirect_stdout(shown):
                again.explain(True)
            texts = [shown.getvalue(), again._jdf.queryExecution().toString(), repr(again.schema)]
            with pytest.raises(Exception) as caught:
                spark.read.format("txn_topic").options(**options).option("topic", "missing").load()
            texts.append(str(caught.value))
            for text in texts:
                assert secret not in text and token not in text
    finally:
        other.close()


def test_a_read_sees_new_partitions_and_old_versions_under_the_latest(spark, broker) -> None:  # type: ignore[no-untyped-def]
    """After alter_topic (a widened and a renamed column, one added, more partitions) a
    read plans the new partitions and reads the old segments under the latest version."""
    from txn_broker import field_id, with_field_id

    broker.create_topic("evolving", partitions=2, schema=pa.schema([("id", pa.int32()), ("name", pa.string())]))
    producer = broker.producer()
    producer.send("evolving", [{"id": i, "name": f"n{i}"} for i in range(4)], partition=0)
    producer.flush()
    name = broker.describe_topic("evolving").schema.field("name")
    broker.alter_topic("evolving", partitions=3, schema=pa.schema([
        pa.field("id", pa.int64()), with_field_id(pa.field("label", pa.string()), field_id(name)),
        pa.field("note", pa.string())]))
    producer.send("evolving", [{"id": 10, "label": "x", "note": "new"}], partition=2)
    producer.flush()
    df = reader(spark, broker, "evolving").load()
    assert df.columns == ["_topic", "_partition", "_offset", "_timestamp", "id", "label", "note"]
    got = sorted(tuple(r) for r in df.select("_partition", "id", "label", "note").collect())
    assert got == [(0, i, f"n{i}", None) for i in range(4)] + [(2, 10, "x", "new")]


def test_a_compacted_topic_reads_the_same(spark, broker) -> None:  # type: ignore[no-untyped-def]
    """After compaction (aborted records dropped, their offsets gaps inside one segment),
    Spark reads what the consumer reads, split by records or not."""
    broker.create_topic("compacted", partitions=2, schema=SCHEMA, config={"min.compaction.lag.ms": 0})
    produce(broker, "compacted", rows(0, 40), key="name", per_transaction=5)
    aborted = broker.producer(transactional_id="test.compacted.aborted")
    aborted.init_transactions()
    aborted.begin_transaction()
    aborted.send("compacted", rows(1000, 1010), key="name")
    aborted.flush()
    aborted.abort_transaction()
    produce(broker, "compacted", rows(40, 60), key="name", per_transaction=5)
    expected = as_sorted(consume_all(broker, "compacted"))
    assert broker.compact().segments_written == 2
    assert as_sorted(consume_all(broker, "compacted")) == expected
    assert spark_rows(reader(spark, broker, "compacted").load()) == expected
    split = reader(spark, broker, "compacted", maxRecordsPerPartition="7", minPartitions="6").load()
    assert spark_rows(split) == expected and split.rdd.getNumPartitions() >= 6
