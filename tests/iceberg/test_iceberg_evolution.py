"""The table's schema follows the topic's schema versions by field id (docs/iceberg.md,
"Schema evolution"), on both backends: add, rename, widen, drop and required->optional,
each in its own publish; every snapshot reads with its own schema's columns in pyiceberg
and polars, old data files are never rewritten, and the table equals a read_committed
read of the topic under its latest schema."""

from __future__ import annotations

import polars as pl
import pyarrow as pa
import pytest
from _bank import polars_storage_options

from txn_broker.errors import CatalogUnavailableError
from txn_broker.faults import set_fault_hook
from txn_broker.log.field_ids import with_field_id

pytestmark = pytest.mark.integration

TOPIC = "evolving"


def _f(name: str, t: pa.DataType, fid: int, nullable: bool = True) -> pa.Field:
    return with_field_id(pa.field(name, t, nullable=nullable), fid)


#: the topic's versions: (schema, the rows sent in it, what changed)
V1 = pa.schema([_f("a", pa.int32(), 5, nullable=False), _f("b", pa.string(), 6), _f("c", pa.float32(), 7)])
V2 = pa.schema([*V1, pa.field("d", pa.string())])                        # add (id 8)
V3 = pa.schema([V2.field("a"), _f("bee", pa.string(), 6), V2.field("c"), _f("d", pa.string(), 8)])  # rename
V4 = pa.schema([_f("a", pa.int64(), 5, nullable=False), V3.field("bee"), _f("c", pa.float64(), 7),
                V3.field("d")])                                           # widen
V5 = pa.schema([V4.field("a"), V4.field("bee"), V4.field("d")])          # drop c
V6 = pa.schema([_f("a", pa.int64(), 5), V5.field("bee"), V5.field("d")])  # required -> optional


def _send(broker, schema: pa.Schema, n: int, start: int) -> None:
    producer = broker.producer(transactional_id="evolver")
    producer.init_transactions()
    data = {}
    for f in schema:
        if f.name == "a":
            data["a"] = [None if (f.nullable and i % 2) else start + i for i in range(n)]
        elif pa.types.is_floating(f.type):
            data[f.name] = [float(start + i) / 2 for i in range(n)]
        else:
            data[f.name] = [f"{f.name}{start + i}" for i in range(n)]
    with producer.transaction():
        for p in (0, 1):
            producer.send(TOPIC, pa.table(data, schema=schema.remove_metadata()), partition=p)
    producer.close()


def _columns(table, snapshot) -> list[str]:
    return [f.name for f in table.schemas()[snapshot.schema_id].fields]


def test_table_schema_follows_the_topic_by_field_id(backend, monkeypatch):
    monkeypatch.setenv("POLARS_ICEBERG_PLANNER", "pyiceberg")
    broker = backend.connect()
    broker.create_topic(TOPIC, partitions=2, schema=V1, config={"iceberg.enabled": "true"})
    _send(broker, V1, 3, 0)
    broker.publish_iceberg()
    table = broker.iceberg_table(TOPIC)
    first_files = {t.file.file_path for t in table.scan().plan_files()}

    for number, version in enumerate((V2, V3, V4, V5, V6), start=2):
        if number == 3:
            # the catalog fails during the alteration: the alteration stands and the next
            # publish evolves the table, before it writes rows of the new version
            def fail(point: str) -> None:
                if point == "iceberg.before_evolve":
                    raise CatalogUnavailableError("catalog down (test)")

            set_fault_hook(fail)
            try:
                broker.alter_topic(TOPIC, schema=version)
            finally:
                set_fault_hook(None)
            assert broker.iceberg_table(TOPIC).schema().find_field(6).name == "b", "evolved despite the failure"
        else:
            broker.alter_topic(TOPIC, schema=version)
            # the same step: the table has the new schema before anything is published
            assert [f.name for f in broker.iceberg_table(TOPIC).schema().fields][3:] == version.names
        _send(broker, version, 3, number * 10)
        [done] = broker.publish_iceberg()
        assert done.rows == 6

    table = broker.iceberg_table(TOPIC)
    fields = {f.name: f for f in table.schema().fields}
    assert [f.name for f in table.schema().fields] == ["_partition", "_offset", "_timestamp", "a", "bee", "d"]
    assert {n: f.field_id for n, f in fields.items() if not n.startswith("_")} == {"a": 5, "bee": 6, "d": 8}
    assert str(fields["a"].field_type) == "long" and not fields["a"].required
    assert first_files <= {t.file.file_path for t in table.scan().plan_files()}, "old data files were rewritten"

    options = polars_storage_options(table)
    appends = [s for s in table.snapshots() if s.summary.operation.value == "append"]
    assert len(appends) == 6
    for n, snapshot in enumerate(appends, start=1):
        columns = _columns(table, snapshot)
        got = table.scan(snapshot_id=snapshot.snapshot_id).to_arrow()
        assert got.column_names == columns and got.num_rows == 6 * n
        polars = pl.scan_iceberg(table, snapshot_id=snapshot.snapshot_id, storage_options=options).collect()
        assert polars.columns == columns and polars.height == 6 * n
        assert sorted(polars.to_arrow().column("_offset").to_pylist()) == sorted(got.column("_offset").to_pylist())
    # each append's schema is the one its rows were written in: V1's columns, then +d, ...
    assert [_columns(table, s)[3:] for s in appends] == [V1.names, V2.names, V3.names, V4.names, V5.names,
                                                         V6.names]

    consumer = broker.consumer(isolation_level="read_committed")
    consumer.subscribe([TOPIC])
    topic_rows = []
    while (batch := consumer.poll(max_records=10_000)).num_rows:
        topic_rows += batch.select(["_partition", "_offset", "a", "bee", "d"]).to_pylist()
    consumer.close()
    key = lambda r: (r["_partition"], r["_offset"])  # noqa: E731
    table_rows = table.scan().to_arrow().select(["_partition", "_offset", "a", "bee", "d"]).to_pylist()
    assert sorted(table_rows, key=key) == sorted(topic_rows, key=key)
    assert len(table_rows) == 36
    polars_rows = (pl.scan_iceberg(table, storage_options=options)
                   .select(["_partition", "_offset", "a", "bee", "d"]).collect().to_dicts())
    assert sorted(polars_rows, key=key) == sorted(topic_rows, key=key)
    broker.close()
