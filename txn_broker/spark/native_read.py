"""``txn_broker.spark.read``: a ``txn_topic`` read whose published part Spark scans natively.

    df = txn_broker.spark.read(spark, broker, topic="orders", startingOffsets="earliest")

The offsets are fixed once, as ``spark.read.format("txn_topic")`` fixes them. For a
read_committed read of a topic with ``iceberg.enabled``, the offsets its table's current
snapshot already holds (:mod:`.iceberg_scan`) are read from the table's Parquet data files
by Spark's own vectorised Parquet reader (``spark.read.parquet``: column pruning, filter
pushdown, columns matched by Iceberg field id with ``spark.sql.parquet.fieldId.read.enabled``),
kept to each partition's offset range; only the unpublished tail goes through the
``txn_topic`` Python source. The two are unioned into exactly the source's read: the same
records, offsets, metadata columns, column order and types, and the same resolved offsets
in the schema (``planned_offsets(df)``).

The table is scanned only when this Spark session can open its files: ``file://`` always,
``s3://`` when Hadoop's s3a file system (hadoop-aws and the AWS SDK's jars) is on Spark's
classpath, given the broker's own storage options as s3a settings. Otherwise, or with the
option ``iceberg.native_scan=false``, the whole read goes through the source, and one log
line says why.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ..log.field_ids import field_id
from . import options as opts
from .iceberg_scan import ReadSplit, TableScan, split_read
from .offsets import METADATA_KEY, OffsetRanges, resolve_offsets
from .schemas import spark_schema, spark_type, union_schema

if TYPE_CHECKING:
    from ..broker import Broker

log = logging.getLogger(__name__)

#: the read option that turns the native scan off (``"false"``); on by default
NATIVE_SCAN_OPTION = "iceberg.native_scan"
#: the Spark SQL setting that makes its Parquet reader match columns by field id
FIELD_ID_READ = "spark.sql.parquet.fieldId.read.enabled"
#: Spark's field metadata key for a Parquet field id
SPARK_FIELD_ID = "parquet.field.id"
#: broker storage option -> Hadoop s3a setting (passed as options of the Parquet read)
S3A_SETTINGS = {
    "endpoint_url": "fs.s3a.endpoint",
    "region_name": "fs.s3a.endpoint.region",
    "aws_access_key_id": "fs.s3a.access.key",
    "aws_secret_access_key": "fs.s3a.secret.key",
    "aws_session_token": "fs.s3a.session.token",
}
#: Spark's Parquet source wants these schemes for the warehouse's
HADOOP_SCHEMES = {"s3": "s3a", "file": "file"}


def read(spark: Any, broker: Broker, **options: str) -> Any:
    """A DataFrame of the read ``options`` describe (the ``txn_topic`` read options:
    ``topic``/``topics``, ``startingOffsets``, ``endingOffsets``, ``group.id``,
    ``isolation.level``, ``failOnDataLoss``, ...; plus ``iceberg.native_scan``), through
    ``broker``. Returns what ``spark.read.format("txn_topic")`` returns for them; see the
    module docstring for how. Raises what that read raises (InvalidConfigError,
    OffsetOutOfRangeError, UnknownTopicOrPartitionError, ...)."""
    from .registry import register

    register(spark)
    given = {k.lower(): str(v) for k, v in options.items()}
    native = opts._bool(given, NATIVE_SCAN_OPTION.lower(), True)
    given.pop(NATIVE_SCAN_OPTION.lower(), None)
    read = opts.read_options(given)
    ranges = resolve_offsets(broker, read.topics, read.starting, read.ending, isolation_level=read.isolation_level,
                             group_id=read.group_id, fail_on_data_loss=read.fail_on_data_loss)
    passed = {k: v for k, v in given.items() if k in ("minpartitions", "maxrecordsperpartition",
                                                        "maxbytesperpartition")}
    return read_ranges(spark, broker, ranges, passed, native_scan=native)


def read_ranges(spark: Any, broker: Broker, ranges: OffsetRanges, source_options: Mapping[str, str] | None = None,
                *, native_scan: bool = True) -> Any:
    """The read of the fixed ``ranges`` (as :func:`read`); ``source_options``: more
    ``txn_topic`` options for the source's part (``minPartitions``, ...)."""
    metas = [broker._topics.get(t, refresh=True) for t in ranges.topics]
    versions = {m.name: m.schema_version for m in metas}
    target = spark_schema(union_schema([(m.name, _plain(m.schema)) for m in metas]),
                          {METADATA_KEY: ranges.to_json()})
    split = ReadSplit([], ranges)
    if native_scan and any(m.config.get("iceberg.enabled") for m in metas):
        split = split_read(broker, ranges, versions)
        for topic, why in split.skipped.items():
            log.info("txn_topic read of %s: not from its Iceberg table: %s", topic, why)
        if split.tables:
            unreadable = _unreadable_schemes(spark, split.tables)
            if unreadable:
                log.warning(
                    "txn_topic read: Spark reads the published part of %s through the txn_topic source, not from "
                    "the Iceberg table's Parquet files: this Spark session has no Hadoop file system for %s "
                    "(add hadoop-aws and the AWS SDK bundle to spark.jars; docs/spark.md, 'Native scan')",
                    ",".join(t.topic for t in split.tables), ", ".join(f"{s}://" for s in sorted(unreadable)))
                split = ReadSplit([], ranges)
    frames = [_table_frame(spark, broker, scan, target) for scan in split.tables]
    if split.tail_offsets or not frames:
        frames.append(_source_frame(spark, broker, split.tail, source_options or {}))
    df = frames[0]
    for more in frames[1:]:
        df = df.union(more)
    if split.tables:
        log.info("txn_topic read: %s from Iceberg table(s) (%d offsets), %d offsets through the source",
                 ", ".join(f"{t.table}@{t.snapshot_id}" for t in split.tables),
                 sum(t.offsets for t in split.tables), split.tail_offsets)
    # the whole read's offsets (with its group), whichever parts it was read from
    return df.withMetadata("_offset", {METADATA_KEY: ranges.to_json()})


def _plain(schema: pa.Schema) -> pa.Schema:
    from ..log.field_ids import strip_field_ids

    return strip_field_ids(schema)


def _source_frame(spark: Any, broker: Broker, ranges: OffsetRanges, source_options: Mapping[str, str]) -> Any:
    from .failures import broker_error

    reader = spark.read.format("txn_topic").options(**opts.connection_options(broker))
    reader = reader.options(**ranges.read_options()).options(**source_options)
    try:
        return reader.load()
    except Exception as error:
        raise (broker_error(error) or error) from error


def hadoop_path(path: str) -> str:
    """A table file's location as Spark's Parquet source opens it (``s3://`` -> ``s3a://``)."""
    scheme, sep, rest = path.partition("://")
    if not sep:
        return path
    return f"{HADOOP_SCHEMES.get(scheme, scheme)}://{rest}"


def _unreadable_schemes(spark: Any, scans: list[TableScan]) -> set[str]:
    schemes = {hadoop_path(s.location).partition("://")[0] for s in scans}
    return {s for s in schemes if not hadoop_can_open(spark, s)}


def hadoop_can_open(spark: Any, scheme: str) -> bool:
    """Whether this Spark session has a Hadoop file system for ``scheme`` (its class
    loads). False on Spark Connect, whose client cannot ask."""
    if scheme == "file":
        return True
    try:
        jvm = spark._jvm
        jvm.org.apache.hadoop.fs.FileSystem.getFileSystemClass(scheme, spark._jsc.hadoopConfiguration())
    except Exception:  # py4j's error for a missing class, or no JVM gateway (Spark Connect)
        return False
    return True


def s3a_options(storage_options: Mapping[str, str]) -> dict[str, str]:
    """The broker's explicit storage options as s3a settings of one Parquet read (never
    the environment: an option the broker was not given is not set)."""
    out = {S3A_SETTINGS[k]: v for k, v in storage_options.items() if k in S3A_SETTINGS and v}
    if storage_options.get("aws_session_token"):
        out["fs.s3a.aws.credentials.provider"] = "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
    style = storage_options.get("addressing_style")
    if style in ("path", "virtual"):
        out["fs.s3a.path.style.access"] = str(style == "path").lower()
    elif storage_options.get("endpoint_url"):
        out["fs.s3a.path.style.access"] = "true"  # an S3-compatible endpoint (MinIO) wants paths
    return out


def _with_ids(arrow_field: pa.Field) -> Any:
    """A Spark field for a table column, with its Parquet field id (nested struct fields too)."""
    from pyspark.sql.types import StructField, StructType

    dtype = spark_type(arrow_field.type, f"column {arrow_field.name!r}")
    if pa.types.is_struct(arrow_field.type):
        dtype = StructType([_with_ids(arrow_field.type.field(i)) for i in range(arrow_field.type.num_fields)])
    fid = field_id(arrow_field)
    return StructField(arrow_field.name, dtype, True, {SPARK_FIELD_ID: fid} if fid is not None else {})


def _table_frame(spark: Any, broker: Broker, scan: TableScan, target: Any) -> Any:
    """The table's part of one topic, as the columns of ``target`` (the source's schema).

    Each DataFrame step is a round trip to the JVM and an analysis of the plan so far, so
    the read is ``parquet`` (the file list, an explicit schema: no listing, no inference),
    a filter only when a file holds offsets outside the read (:attr:`TableScan.whole`), and
    one projection written as SQL where no column needs a cast."""
    from pyspark.sql.types import StructType

    if spark.conf.get(FIELD_ID_READ, "false") != "true":
        spark.conf.set(FIELD_ID_READ, "true")
    file_schema = StructType([_with_ids(f) for f in scan.schema])
    reader = spark.read.schema(file_schema)
    if scan.location.startswith("s3://"):
        reader = reader.options(**s3a_options(broker._store.options()))
    df = reader.parquet(*(hadoop_path(p) for p in scan.files))
    if not scan.whole:
        df = df.where(" OR ".join(f"(_partition = {r.partition} AND _offset >= {r.start} AND _offset < {r.end})"
                                  for r in scan.ranges))
    have = {f.name: f.dataType for f in file_schema.fields}
    if all(f.name == "_topic" or have.get(f.name) == f.dataType for f in target.fields):
        # a topic name is [a-zA-Z0-9._-] (txn_broker.names): a plain SQL string literal
        return df.selectExpr(*(f"'{scan.topic}' AS _topic" if f.name == "_topic" else _quoted(f.name)
                               for f in target.fields))
    return _projected(df, scan.topic, have, target)


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _projected(df: Any, topic: str, have: Mapping[str, Any], target: Any) -> Any:
    """``df`` as ``target``'s columns, casting those whose file type differs and adding
    those the files lack as nulls."""
    from pyspark.sql import functions as F

    columns = []
    for f in target.fields:
        if f.name == "_topic":
            column = F.lit(topic)
        elif f.name in have:
            column = F.col(_quoted(f.name))
            if have[f.name] != f.dataType:
                column = column.cast(f.dataType)
        else:
            column = F.lit(None).cast(f.dataType)
        columns.append(column.alias(f.name))
    return df.select(*columns)
