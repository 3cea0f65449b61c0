"""Reading the published part of a topic from its Iceberg table with Spark's own Parquet
reader (``txn_broker.spark.read``, ``stage.read``), on both backends: record by record the
same read as the ``txn_topic`` source alone, partially and fully published, with aborted
transactions, from mid-file, after retention; the physical plan shows the Parquet scan with
column pruning and pushed filters; on S3 without Hadoop's s3a the read falls back to the
source, says why once, and shows no credential."""

from __future__ import annotations

import json
import logging
import uuid

import pyarrow as pa
import pytest

import txn_broker.spark as ts
from txn_broker.errors import InvalidConfigError
from txn_broker.spark.native_read import hadoop_path, s3a_options

pytestmark = [pytest.mark.spark, pytest.mark.integration]

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("small", pa.int16()),
                    ("ts", pa.timestamp("ms", tz="UTC"))])
ICEBERG = {"iceberg.enabled": "true"}


def rows(lo: int, hi: int) -> pa.Table:
    ids = list(range(lo, hi))
    return pa.table({"id": ids, "name": [f"n{i}" for i in ids], "small": [i % 300 for i in ids],
                     "ts": [1_700_000_000_000 + i for i in ids]}, schema=SCHEMA)


def commit(producer, lo: int, hi: int) -> None:  # type: ignore[no-untyped-def]
    """One transaction over both partitions."""
    with producer.transaction():
        mid = (lo + hi) // 2
        producer.send("t", rows(lo, mid), partition=0)
        producer.send("t", rows(mid, hi), partition=1)


def abort(producer, lo: int, hi: int) -> None:  # type: ignore[no-untyped-def]
    producer.begin_transaction()
    producer.send("t", rows(lo, hi), partition=0)
    producer.flush()
    producer.abort_transaction()


def source_read(spark, broker, **options: str):  # type: ignore[no-untyped-def]
    return spark.read.format("txn_topic").options(**ts.connection_options(broker), topic="t", **options).load()


def plan(df) -> str:  # type: ignore[no-untyped-def]
    return str(df._jdf.queryExecution().executedPlan().toString())


def same_read(native, source) -> int:  # type: ignore[no-untyped-def]
    """Both DataFrames hold the same records, column by column, in the same columns and types."""
    assert [(f.name, f.dataType) for f in native.schema.fields] == \
        [(f.name, f.dataType) for f in source.schema.fields]
    assert ts.planned_offsets(native).ranges == ts.planned_offsets(source).ranges
    got, want = sorted(map(tuple, native.collect())), sorted(map(tuple, source.collect()))
    assert got == want
    return len(got)


@pytest.fixture
def topic(broker):  # type: ignore[no-untyped-def]
    broker.create_topic("t", partitions=2, schema=SCHEMA, config=ICEBERG)
    producer = broker.producer(transactional_id="native.scan")
    producer.init_transactions()
    commit(producer, 0, 20)
    abort(producer, 1000, 1005)  # offsets 10..14 of partition 0: never read
    commit(producer, 20, 40)
    broker.publish_iceberg()
    commit(producer, 40, 60)
    broker.publish_iceberg()  # two files per partition
    commit(producer, 60, 70)  # the unpublished tail
    yield producer
    producer.close()


def test_native_scan_reads_what_the_source_reads(spark, backend, broker, topic, caplog) -> None:  # type: ignore[no-untyped-def]
    caplog.set_level("INFO", logger="txn_broker.spark")
    native_path = backend.name == "sqlite"  # file:// always; s3:// needs s3a, which this Spark lacks

    # partially published: the table's two files per partition, then the source's tail
    df = ts.read(spark, broker, topic="t")
    assert ("FileScan parquet" in plan(df)) is native_path
    assert "BatchScan txn_topic" in plan(df)
    assert same_read(df, source_read(spark, broker)) == 70

    # from the middle of a file, to an explicit end inside the published part
    starting, ending = json.dumps({"t": {"0": 3, "1": 12}}), json.dumps({"t": {"0": 18, "1": 25}})
    df = ts.read(spark, broker, topic="t", startingOffsets=starting, endingOffsets=ending)
    assert "BatchScan txn_topic" not in plan(df) or not native_path  # all of it from the table
    assert same_read(df, source_read(spark, broker, startingOffsets=starting, endingOffsets=ending)) == 7 + 3 + 13

    # fully published: no source at all
    broker.publish_iceberg()
    df = ts.read(spark, broker, topic="t")
    assert ("BatchScan txn_topic" in plan(df)) is not native_path
    assert same_read(df, source_read(spark, broker)) == 70

    fallbacks = [r.getMessage() for r in caplog.records if "no Hadoop file system" in r.getMessage()]
    assert len(fallbacks) == (0 if native_path else 3)  # one line per read, saying why
    assert all("s3a://" in line and "hadoop-aws" in line for line in fallbacks)


def test_native_scan_after_retention_removed_old_files(spark, broker) -> None:  # type: ignore[no-untyped-def]
    broker.create_topic("t", partitions=2, schema=SCHEMA, config={**ICEBERG, "retention.bytes": "1"})
    producer = broker.producer(transactional_id="native.retention")
    producer.init_transactions()
    for lo in (0, 20, 40):
        commit(producer, lo, lo + 20)
        broker.publish_iceberg()
    commit(producer, 60, 64)
    assert broker.gc(delete_delay_ms=0).retention_segments > 0
    # the table still holds records below the log start: the read starts at the log start
    assert same_read(ts.read(spark, broker, topic="t"), source_read(spark, broker)) < 64
    assert broker.publish_iceberg()[0].expired_files > 0  # now the table drops those files
    assert same_read(ts.read(spark, broker, topic="t"), source_read(spark, broker)) < 64
    producer.close()


def test_the_plan_shows_sparks_parquet_scan_pruning_and_pushdown(spark, backend, broker, topic) -> None:  # type: ignore[no-untyped-def]
    if backend.name != "sqlite":
        pytest.skip("S3 reads fall back to the source without hadoop-aws (checked in the test above)")
    query = ts.read(spark, broker, topic="t").where("id > 15").select("name")
    spark.conf.set("spark.sql.maxMetadataStringLength", "10000")  # the plan's lists, not cut short
    try:
        text = plan(query)
    finally:
        spark.conf.unset("spark.sql.maxMetadataStringLength")
    scan = next(line for line in text.splitlines() if "FileScan parquet" in line)
    assert "Batched: true" in scan  # the vectorised reader
    assert "GreaterThan(id,15)" in scan  # the user's filter, pushed into the Parquet reader
    # every file lies inside the read: no filter on the offsets, which are not even read
    assert "ReadSchema: struct<id:bigint,name:string>" in scan  # small, ts, _partition, _offset pruned
    assert "_offset" not in scan
    assert sorted(r.name for r in query.collect()) == sorted(f"n{i}" for i in range(16, 70))
    assert spark.conf.get("spark.sql.parquet.fieldId.read.enabled") == "true"

    # a read from the middle of a file keeps the table's rows to its range
    starting = json.dumps({"t": {"0": 3, "1": 12}})
    query = ts.read(spark, broker, topic="t", startingOffsets=starting).where("id > 15").select("name")
    scan = next(line for line in plan(query).splitlines() if "FileScan parquet" in line)
    assert "ReadSchema: struct<_partition:int,_offset:bigint,id:bigint,name:string>" in scan
    assert "GreaterThanOrEqual(_offset,3)" in scan and "LessThan(_offset," in scan  # the published range
    want = source_read(spark, broker, startingOffsets=starting).where("id > 15").select("name")
    assert sorted(r.name for r in query.collect()) == sorted(r.name for r in want.collect())


def test_native_scan_can_be_turned_off(spark, backend, broker, topic) -> None:  # type: ignore[no-untyped-def]
    df = ts.read(spark, broker, topic="t", **{"iceberg.native_scan": "false"})
    assert "FileScan parquet" not in plan(df)
    with ts.txn_stage(spark, broker, transactional_id="native.off", group_id="g", inputs=["t"],
                      read_options={"iceberg.native_scan": "false"}) as stage:
        assert "FileScan parquet" not in plan(stage.read())
    with ts.txn_stage(spark, broker, transactional_id="native.on", group_id="g2", inputs=["t"]) as stage:
        df = stage.read()
        assert ("FileScan parquet" in plan(df)) is (backend.name == "sqlite")
        assert same_read(df, source_read(spark, broker)) == 70
    with pytest.raises(InvalidConfigError, match="iceberg.native_scan"):
        ts.read(spark, broker, topic="t", **{"iceberg.native_scan": "maybe"})


def test_s3_fallback_keeps_credentials_out_of_logs_and_plans(spark, backend, caplog) -> None:  # type: ignore[no-untyped-def]
    if backend.name == "sqlite":
        pytest.skip("S3 only")
    import txn_broker

    secret, key_id = f"S3Secret{uuid.uuid4().hex}", f"S3Key{uuid.uuid4().hex}"
    caplog.set_level(logging.DEBUG, logger="txn_broker")
    caplog.set_level(logging.DEBUG, logger="py4j")  # py4j logs every JVM command, options included
    with txn_broker.connect(backend.database_url, backend.storage_url, storage_options={
            "aws_access_key_id": key_id, "aws_secret_access_key": secret}) as own:
        own.create_topic("t", partitions=2, schema=SCHEMA, config=ICEBERG)
        producer = own.producer(transactional_id="native.s3")
        producer.init_transactions()
        commit(producer, 0, 10)
        own.publish_iceberg()
        df = ts.read(spark, own, topic="t")
        assert same_read(df, source_read(spark, own)) == 10
        text = plan(df) + str(df._jdf.queryExecution().toString()) + caplog.text
        assert secret not in text and key_id not in text
        assert "no Hadoop file system for s3a://" in caplog.text
        assert any(r.name.startswith("py4j") for r in caplog.records)  # py4j did log: masked
        producer.close()


def test_s3a_settings_come_from_the_explicit_storage_options_only() -> None:
    assert hadoop_path("s3://bucket/iceberg/t/data/a.parquet") == "s3a://bucket/iceberg/t/data/a.parquet"
    assert hadoop_path("file:///tmp/x.parquet") == "file:///tmp/x.parquet"
    assert s3a_options({}) == {}
    assert s3a_options({"endpoint_url": "http://minio:9000", "aws_access_key_id": "k",
                        "aws_secret_access_key": "s", "region_name": "eu-west-1"}) == {
        "fs.s3a.endpoint": "http://minio:9000", "fs.s3a.access.key": "k", "fs.s3a.secret.key": "s",
        "fs.s3a.endpoint.region": "eu-west-1", "fs.s3a.path.style.access": "true"}
    with_token = s3a_options({"aws_session_token": "t", "addressing_style": "virtual"})
    assert with_token["fs.s3a.aws.credentials.provider"].endswith("TemporaryAWSCredentialsProvider")
    assert with_token["fs.s3a.path.style.access"] == "false"


def test_a_table_another_writer_changed_is_read_through_the_source(spark, backend, broker, topic, caplog) -> None:  # type: ignore[no-untyped-def]
    """The table stands for the topic only while the publisher alone writes it: after
    another writer's delete (pyiceberg's, which rewrites data files, or an engine's
    position delete file) the read goes through the source, says why, and is still the
    topic's read, record by record."""
    from _iceberg_foreign import add_position_deletes

    from txn_broker.iceberg.catalog import TOPIC_ID_PROPERTY
    from txn_broker.iceberg.small_files import partition_files

    caplog.set_level("INFO", logger="txn_broker.spark")
    broker.publish_iceberg()
    table = broker.iceberg_table("t")
    topic_id = table.current_snapshot().summary.additional_properties[TOPIC_ID_PROPERTY]

    # delete files, even in a snapshot that names the topic
    add_position_deletes(table, partition_files(table)[0][0], [0, 1], {TOPIC_ID_PROPERTY: topic_id})
    df = ts.read(spark, broker, topic="t")
    assert "FileScan parquet" not in plan(df)
    assert same_read(df, source_read(spark, broker)) == 70
    assert any("has delete files" in r.getMessage() for r in caplog.records)

    # a snapshot the publisher did not write: pyiceberg's delete rewrites the data files
    table.refresh().delete("id < 10")
    caplog.clear()
    df = ts.read(spark, broker, topic="t")
    assert "FileScan parquet" not in plan(df)
    assert same_read(df, source_read(spark, broker)) == 70
    assert any("snapshot the publisher did not write" in r.getMessage() for r in caplog.records)
