"""``TopicToPostgresOperator``: committed records of a topic into a SQL table, exactly once.

Kafka's transactions cover only Kafka; this goes further (docs/semantics.md, "What is not promised"): the
rows and the sink's offsets are written in the same transaction of the *target* database,
and the start offsets are read back from that database, never from the broker. A retry
after any crash therefore resumes exactly where the last committed load ended: no row is
loaded twice or skipped. See ``warehouse.py`` for the offsets table and the
compare-and-set that makes two concurrent loads of one group safe.

After the database commit the offsets are also committed to the broker's consumer group
of the same name, only so that lag shows up in the broker's tools; the database's copy is
the one that counts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from airflow.sdk import BaseOperator

from ..errors import LoadStalledError
from ..hooks.txn_broker import DEFAULT_CONN_ID, TxnBrokerHook
from ..ids import transactional_id_for
from ..lineage import TxnBrokerLineageMixin, table_dataset
from ..stats import AIRFLOW_CLIENT_METRICS
from ..warehouse import Sink, open_sink, resolve_target

if TYPE_CHECKING:
    from airflow.sdk import Context

    from txn_broker import Broker, TopicPartition


class TopicToPostgresOperator(TxnBrokerLineageMixin, BaseOperator):
    """Load the records of ``topic`` committed since the last load into ``table``.

    Target database: ``postgres_conn_id`` (Postgres provider connection), else
    ``warehouse_url`` (an SQLAlchemy URL), else ``$TXN_BROKER_WAREHOUSE_URL``, else an
    SQLite file ``$TXN_BROKER_HOME/warehouse.db`` (the demo; the log and XCom say so).
    ``table`` is created from the topic's schema unless ``create_table=False``.
    ``group_id`` names this load's offsets (default ``{dag_id}.{task_id}``). Records are
    read ``read_committed`` up to the end offsets fixed when the task starts, in database
    transactions of at most ``batch_records`` rows, each with its offsets.

    XCom: ``{"topic", "table", "group_id", "rows_loaded", "start_offsets",
    "end_offsets", "target", "target_is_fallback_sqlite"}``.
    """

    template_fields: Sequence[str] = (
        "topic", "table", "group_id", "postgres_conn_id", "warehouse_url", "txn_broker_conn_id",
    )
    ui_color = "#d5f5e3"

    def __init__(
        self,
        *,
        topic: str,
        table: str,
        group_id: str | None = None,
        postgres_conn_id: str | None = None,
        warehouse_url: str | None = None,
        db_schema: str | None = None,
        create_table: bool = True,
        batch_records: int = 100_000,
        txn_broker_conn_id: str = DEFAULT_CONN_ID,
        **kwargs: Any,
    ) -> None:
        if batch_records <= 0:
            raise ValueError("batch_records must be positive")
        super().__init__(**kwargs)
        self.topic = topic
        self.table = table
        self.group_id = group_id
        self.postgres_conn_id = postgres_conn_id
        self.warehouse_url = warehouse_url
        self.db_schema = db_schema
        self.create_table = create_table
        self.batch_records = batch_records
        self.txn_broker_conn_id = txn_broker_conn_id

    def execute(self, context: Context) -> dict[str, Any]:
        group = self.group_id or transactional_id_for(context)
        hook = TxnBrokerHook(self.txn_broker_conn_id)
        target = resolve_target(self.postgres_conn_id, self.warehouse_url)
        if target.fallback:
            self.log.warning("no PostgreSQL configured (postgres_conn_id, warehouse_url or "
                             "TXN_BROKER_WAREHOUSE_URL): loading into the demo SQLite warehouse %s",
                             target.description)
        try:
            broker = hook.get_conn()
            schema = broker.describe_topic(self.topic).schema
            sink = open_sink(target, self.table, schema, self.db_schema, self.create_table)
            summary = self._load(broker, sink, group)
        finally:
            target.engine.dispose()
            hook.close()
        return {**summary, "target": target.description, "target_is_fallback_sqlite": target.fallback}

    # OpenLineage (lineage.py): the topic in, the table out (OpenLineage's naming of its database)
    def lineage_topics(self) -> tuple[list[str], list[str]]:
        return [self.topic], []

    def lineage_other_datasets(self, result: dict[str, Any] | None) -> tuple[list[Any], list[Any]]:
        target = resolve_target(self.postgres_conn_id, self.warehouse_url)
        try:
            rows = int(result["rows_loaded"]) if result and "rows_loaded" in result else None
            return [], [table_dataset(target.engine.url, self.db_schema, self.table, rows)]
        finally:
            target.engine.dispose()

    def _load(self, broker: Broker, sink: Sink, group: str) -> dict[str, Any]:
        from txn_broker import TopicPartition

        partitions = [TopicPartition(self.topic, p.partition)
                      for p in broker.describe_topic(self.topic).partitions]
        ends = broker.end_offsets(partitions)  # fixed now: the batch is bounded
        starts_db = sink.next_offsets(group, self.topic)
        log_starts = broker.beginning_offsets(partitions)
        loaded = 0
        start_offsets: dict[str, int] = {}
        consumer = broker.consumer(isolation_level="read_committed", metrics=AIRFLOW_CLIENT_METRICS)
        try:
            for tp in partitions:
                committed = starts_db.get(tp.partition)
                start = max(committed if committed is not None else 0, log_starts[tp])
                if committed is not None and committed < log_starts[tp]:
                    self.log.warning("%s-%d: records %d..%d were deleted by retention before they "
                                     "were loaded", tp.topic, tp.partition, committed, log_starts[tp])
                start_offsets[str(tp.partition)] = start
                loaded += self._load_partition(broker, consumer, sink, group, tp, start, committed,
                                               ends[tp])
        finally:
            consumer.close()
        final = {TopicPartition(self.topic, p): o for p, o in sink.next_offsets(group, self.topic).items()}
        if final:
            broker.commit_offsets(group, final)  # a mirror for monitoring only
        self.log.info("loaded %d rows from %s into %s", loaded, self.topic, self.table)
        return {"topic": self.topic, "table": self.table, "group_id": group, "rows_loaded": loaded,
                "start_offsets": start_offsets,
                "end_offsets": {str(tp.partition): o for tp, o in ends.items()}}

    def _load_partition(self, broker: Broker, consumer: Any, sink: Sink, group: str, tp: TopicPartition,
                        start: int, committed: int | None, end: int) -> int:
        if start >= end:
            return 0
        consumer.assign([tp])
        consumer.seek(tp, start)
        expected: int | None = committed
        loaded = 0
        position = start
        while position < end:
            batch = consumer.poll(max_records=self.batch_records)
            after = consumer.position(tp)
            if batch.num_rows:
                batch = batch.filter(pc.less(batch["_offset"], pa.scalar(end, pa.int64())))
            if after <= position and not batch.num_rows:
                raise LoadStalledError(f"{tp.topic}-{tp.partition}: no progress at offset {position} "
                                       f"below the fixed end {end}")
            new_position = min(after, end)
            loaded += sink.write(group, tp.topic, batch, {tp.partition: expected}, {tp.partition: new_position})
            expected = position = new_position
        return loaded
