"""The ``txn_topic`` Spark data source (Spark 4 Python Data Source API): reading.

Where each part runs (Spark runs a Python data source's methods in Python worker
processes the JVM starts, never in the driver's own Python process):

* ``schema()`` (once, at ``load()``), ``reader()`` and ``partitions()`` run on the driver
  side: they look up the topics, fix the offsets, and plan which segment objects each
  Spark task reads. They are the only read steps that use the metadata database.
* ``read(split)`` runs in the executors: it fetches the split's segment objects from
  object storage and yields Arrow record batches (no per-row Python).

The offsets are fixed at ``load()`` (``endingOffsets=latest`` is resolved then, once), so
every action on the DataFrame reads the same records. They are exposed on the DataFrame:
``txn_broker.spark.planned_offsets(df)``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from ..log.batches import schema_from_text, schema_to_text
from ..log.field_ids import strip_field_ids
from ..log.projection import project
from ..log.reader import load_segment, read_rows, with_metadata
from . import options as opts
from .offsets import METADATA_KEY, OffsetRanges, resolve_offsets
from .planning import TopicSplit, plan_splits
from .schemas import arrow_target, check_user_schema, spark_schema, to_target, union_schema

log = logging.getLogger(__name__)
#: segment objects fetched ahead of the one being converted, per task
PREFETCH = 2


@dataclass(frozen=True)
class ReadPlan:
    """What ``schema()`` fixed at ``load()``: plain values, pickled with the data source."""

    topic_schemas: tuple[tuple[str, str], ...]  # (topic, schema as text)
    ranges_json: str
    #: the schema version of each topic read (the latest at load())
    versions: tuple[tuple[str, int], ...] = ()

    @property
    def ranges(self) -> OffsetRanges:
        return OffsetRanges.from_json(self.ranges_json)

    def arrow_schema(self) -> pa.Schema:
        return union_schema([(t, strip_field_ids(schema_from_text(s))) for t, s in self.topic_schemas])

    def spark_schema(self) -> Any:
        return spark_schema(self.arrow_schema(), {METADATA_KEY: self.ranges_json})


class TxnTopicDataSource(DataSource):
    """``spark.read.format("txn_topic")`` and ``df.write.format("txn_topic")``: see
    docs/spark.md for the options."""

    @classmethod
    def name(cls) -> str:
        return "txn_topic"

    def _plan(self) -> ReadPlan:
        plan: ReadPlan | None = getattr(self, "_read_plan", None)
        if plan is None:
            read = opts.read_options(self.options)
            with opts.connection(self.options).open_broker() as broker:
                ranges = resolve_offsets(
                    broker, read.topics, read.starting, read.ending, isolation_level=read.isolation_level,
                    group_id=read.group_id, fail_on_data_loss=read.fail_on_data_loss)
                metas = [broker._topics.get(t, refresh=True) for t in read.topics]
                schemas = tuple((m.name, schema_to_text(m.schema)) for m in metas)
                versions = tuple((m.name, m.schema_version) for m in metas)
            plan = ReadPlan(schemas, ranges.to_json(), versions)
            self._read_plan = plan
        return plan

    def schema(self) -> Any:
        return self._plan().spark_schema()

    def reader(self, schema: Any) -> DataSourceReader:
        plan = self._plan()
        check_user_schema(schema, plan.spark_schema())
        read = opts.read_options(self.options)
        conn = opts.connection(self.options)
        with conn.open_broker() as broker:
            splits = plan_splits(broker, plan.ranges, max_bytes=read.max_bytes_per_partition,
                                 max_records=read.max_records_per_partition, min_partitions=read.min_partitions,
                                 read_versions=dict(plan.versions) or None)
        log.info("txn_topic read of %s: %d split(s), %d record(s)", ",".join(read.topics), len(splits),
                 sum(s.records for s in splits))
        # Spark pickles this data source into every read task: executors need no database,
        # so they do not get its URL (and password) either.
        self.options.pop("database.url", None)
        return TxnTopicReader(conn.storage(), schema, splits)

    def writer(self, schema: Any, overwrite: bool) -> Any:
        from .writer import make_writer

        return make_writer(self.options, schema, overwrite)


class TxnTopicReader(DataSourceReader):
    """Pickled to every read task: the storage location and the output schema. The splits
    themselves are sent to their tasks by Spark, so they are left out of the pickle."""

    def __init__(self, storage: opts.StorageLocation, schema: Any, splits: list[TopicSplit]) -> None:
        self.storage = storage
        self.schema = schema
        self._splits = splits

    def __getstate__(self) -> dict[str, Any]:
        return {"storage": self.storage, "schema": self.schema}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._splits = []

    def partitions(self) -> list[InputPartition]:
        return list(self._splits)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, TopicSplit) or not partition.segments:
            return iter(())
        return self._read(partition)

    def _read(self, split: TopicSplit) -> Iterator[pa.RecordBatch]:
        store = self.storage.open_store()
        target = arrow_target(self.schema)
        schemas = {v: schema_from_text(text) for v, text in split.schemas.items()}
        with ThreadPoolExecutor(PREFETCH, "txn-topic-read") as pool:
            pending = {i: pool.submit(load_segment, store, seg.planned())
                       for i, seg in enumerate(split.segments[:PREFETCH])}
            for i, seg in enumerate(split.segments):
                table = pending.pop(i).result()
                if i + PREFETCH < len(split.segments):
                    pending[i + PREFETCH] = pool.submit(load_segment, store, split.segments[i + PREFETCH].planned())
                rows = read_rows(table, seg.planned(), seg.start, seg.end)
                if schemas and seg.schema_version != split.read_version:  # by field id
                    rows = project(rows, schemas[seg.schema_version], schemas[split.read_version], keep_ids=False)
                yield from to_target(with_metadata(rows, split.topic, split.partition, seg.start), target)
