"""Between topic schemas (Arrow) and Spark schemas: the columns a read returns, whether a
DataFrame can be written to a topic, and converting Arrow batches each way.

A read returns ``_topic``, ``_partition``, ``_offset``, ``_timestamp``, then the topic's own
columns. Reading several topics returns the union of their columns by name (first seen
first); a column a topic lacks is null in its rows; a column two topics type differently is
a SchemaMismatchError.

A write takes a DataFrame as ``producer.send`` takes a table, by the same function
(:func:`txn_broker.topic_schemas.conform_send`): in the latest schema version or an older one
the topic's ``schema.compatibility`` lets writers send in, a nullable or defaulted column it
lacks filled, converted to the latest version. A column counts as having a version's type when
it has the Spark type that Arrow type maps to (``pyarrow int64`` <-> ``bigint``,
``timestamp[ms, tz=UTC]`` <-> ``timestamp``, ...); timestamps are truncated to the topic's
precision. The broker's own columns (``_topic`` ... ``_timestamp``, from a read) are dropped;
any other extra column is an error, as it is for ``producer.send``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from ..errors import SchemaMismatchError
from ..log.segment_format import METADATA_COLUMNS, read_schema
from ..topic_schemas import SchemaVersion, conform_send


def spark_type(arrow_type: pa.DataType, where: str) -> Any:
    from pyspark.sql.pandas.types import from_arrow_type

    try:
        return from_arrow_type(arrow_type, prefer_timestamp_ntz=True)
    except Exception as error:  # pyspark raises its own error classes for unsupported types
        raise SchemaMismatchError(f"{where} has Arrow type {arrow_type}, which Spark cannot represent: "
                                  f"{type(error).__name__}") from None


def union_schema(topic_schemas: list[tuple[str, pa.Schema]]) -> pa.Schema:
    """The Arrow schema of a read of these topics (metadata columns, then the union)."""
    fields: dict[str, pa.Field] = {}
    nullable_because_missing: set[str] = set()
    for topic, schema in topic_schemas:
        for f in schema:
            seen = fields.get(f.name)
            if seen is None:
                fields[f.name] = f
            elif not seen.type.equals(f.type):
                raise SchemaMismatchError(
                    f"column {f.name!r} is {seen.type} in one topic and {f.type} in {topic!r}: read them separately"
                )
    for _topic, schema in topic_schemas:
        nullable_because_missing.update(set(fields) - set(schema.names))
    merged = [f.with_nullable(True) if f.name in nullable_because_missing else f for f in fields.values()]
    return read_schema(pa.schema(merged))


def spark_schema(arrow_schema: pa.Schema, offsets_metadata: dict[str, str] | None = None) -> Any:
    """The Spark StructType of a read (``offsets_metadata`` goes on the ``_offset`` field)."""
    from pyspark.sql.types import StructField, StructType

    fields = []
    for f in arrow_schema:
        metadata = offsets_metadata if f.name == "_offset" and offsets_metadata else {}
        nullable = f.nullable and f.name not in METADATA_COLUMNS
        fields.append(StructField(f.name, spark_type(f.type, f"column {f.name!r}"), nullable, metadata))
    return StructType(fields)


def check_user_schema(given: Any, expected: Any) -> None:
    """A schema passed with ``spark.read.schema(...)`` must have the read's columns and types."""
    have = [(f.name, f.dataType.simpleString()) for f in given.fields]
    want = [(f.name, f.dataType.simpleString()) for f in expected.fields]
    if have != want:
        raise SchemaMismatchError(
            f"the schema given to the txn_topic read {have} differs from the topics' {want}; "
            "leave .schema() out, or select columns after load()"
        )


def arrow_target(schema: Any) -> pa.Schema:
    """The exact Arrow schema Spark expects batches of a Python data source read in."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


def to_target(table: pa.Table, target: pa.Schema) -> list[pa.RecordBatch]:
    """A segment's rows (with metadata columns) as record batches of exactly ``target``:
    columns in its order, absent ones null, types cast (e.g. ms timestamps to Spark's us)."""
    columns = []
    for f in target:
        if f.name in table.column_names:
            column = table.column(f.name)
            if not column.type.equals(f.type):
                column = column.cast(f.type)
        else:
            column = pa.nulls(table.num_rows, f.type)
        columns.append(column)
    out = pa.Table.from_arrays(columns, schema=target)
    return out.to_batches()


def write_columns(df_schema: Any, topic_schema: pa.Schema, topic: str) -> list[str]:
    """Check that a DataFrame can be written to ``topic`` (raises SchemaMismatchError naming
    every problem); return the DataFrame's columns to drop (the broker's own)."""
    by_name = {f.name: f for f in df_schema.fields}
    problems = []
    for f in topic_schema:
        want = spark_type(f.type, f"column {f.name!r} of topic {topic!r}")
        have = by_name.get(f.name)
        if have is None:
            problems.append(f"missing column {f.name!r} ({want.simpleString()})")
        elif have.dataType != want and have.dataType.simpleString() != want.simpleString():
            problems.append(
                f"column {f.name!r} is {have.dataType.simpleString()}, the topic needs {want.simpleString()} "
                f"(.withColumn({f.name!r}, F.col({f.name!r}).cast({want.simpleString()!r})))"
            )
    dropped = [n for n in by_name if n in METADATA_COLUMNS]
    extra = [n for n in by_name if n not in topic_schema.names and n not in METADATA_COLUMNS]
    if extra:
        problems.append(f"extra column(s) {extra} (select only the topic's columns)")
    if problems:
        raise SchemaMismatchError(
            f"DataFrame does not match topic {topic!r} ({', '.join(topic_schema.names)}): " + "; ".join(problems)
        )
    return dropped


def _same_spark_type(arrow_type: pa.DataType, spark: Any) -> bool:
    try:
        want = spark_type(arrow_type, "")
    except SchemaMismatchError:
        return False
    return bool(want == spark or want.simpleString() == spark.simpleString())


def send_schema(df_schema: Any, versions: Mapping[int, SchemaVersion]) -> pa.Schema:
    """The DataFrame's own columns (the broker's dropped) as the Arrow schema of the send
    they make: each column with the Arrow type of a field of its name in the topic's
    versions (newest first) that maps to the column's Spark type, so that Spark's
    representation (microsecond timestamps, ...) is not a type of its own; else with the
    type Spark's Arrow conversion gives it."""
    from pyspark.sql.pandas.types import to_arrow_type

    fields = []
    for f in df_schema.fields:
        if f.name in METADATA_COLUMNS:
            continue
        arrow = next((v.schema.field(f.name).type for _, v in sorted(versions.items(), reverse=True)
                      if f.name in v.schema.names and _same_spark_type(v.schema.field(f.name).type, f.dataType)),
                     None)
        if arrow is None:
            try:
                arrow = to_arrow_type(f.dataType)
            except Exception as error:  # pyspark raises its own error classes for unsupported types
                raise SchemaMismatchError(f"column {f.name!r} is {f.dataType.simpleString()}, which no topic "
                                          f"column can hold: {type(error).__name__}") from None
        fields.append(pa.field(f.name, arrow, f.nullable))
    return pa.schema(fields)


def check_write(df_schema: Any, versions: Mapping[int, SchemaVersion], latest: int, mode: str,
                topic: str) -> pa.Schema:
    """Driver side: whether a DataFrame of ``df_schema`` can be written to ``topic``, by the
    producer's rules (:func:`conform_send` on no rows); SchemaMismatchError, naming what
    differs from the latest version, when not. Returns the Arrow schema its batches are
    sent as (:func:`send_schema`)."""
    sent = send_schema(df_schema, versions)
    try:
        conform_send(sent.empty_table(), versions, latest, mode, topic)
    except SchemaMismatchError as error:
        try:
            write_columns(df_schema, versions[latest].schema, topic)
        except SchemaMismatchError as against_latest:
            raise SchemaMismatchError(f"{against_latest} [{error}]") from None
        raise
    return sent


def conform_spark_batch(batch: pa.RecordBatch, sent: pa.Schema, versions: Mapping[int, SchemaVersion],
                        latest: int, mode: str, topic: str) -> pa.Table:
    """Executor side: one batch from Spark as a table of the latest version, by
    :func:`conform_send` after its columns are cast from Spark's representation to
    ``sent`` (:func:`check_write`'s schema; timestamps truncated)."""
    columns = []
    for f in sent:
        column = batch.column(batch.schema.get_field_index(f.name))
        if not column.type.equals(f.type):
            truncate = pa.types.is_timestamp(f.type) or pa.types.is_time(f.type)
            try:
                column = column.cast(f.type, safe=not truncate)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as error:
                raise SchemaMismatchError(f"column {f.name!r} of topic {topic!r}: {error}") from None
        columns.append(column)
    return conform_send(pa.Table.from_arrays(columns, schema=sent), versions, latest, mode, topic)
