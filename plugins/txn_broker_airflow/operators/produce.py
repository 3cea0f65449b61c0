"""``ProduceToTopicOperator``: files or a callable's output into a topic, in ONE transaction,
exactly once across retries.

Why a retry cannot ingest twice: every input has an *identity*: for each file, the topic
plus the file's path, size and SHA-256 of its content; for a callable, the topic plus the
task instance's dag id, task id, run id and map index; or an explicit ``idempotency_key``.
The commit that writes the records also commits offsets for one marker consumer group per
input, named after a hash of its identity (``txn_broker.ingest.<hash>``), atomically with
the records. A later attempt
first calls ``init_transactions`` (which fences any earlier attempt still running and
settles whatever it left, so nothing can commit behind our back), then looks for each
input's marker group: inputs whose group has committed offsets are already in the topic
and are skipped (a glob source thus ingests only its new files). So the records and the proof of ingestion become
visible together or not at all, with no second store to keep in step.

Consequence: ingesting the same unchanged file into the same topic again is a no-op,
whatever the run (a changed file is a new input). To ingest files once per run instead,
pass ``idempotency_key="{{ run_id }}"``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from ..assets import output_assets
from ..hooks.txn_broker import DEFAULT_CONN_ID, TxnBrokerHook
from ..ingest import callable_table, detect_format, fingerprint, read_file, resolve_sources
from ..lineage import TxnBrokerLineageMixin
from ..loading import import_callable
from ..stats import AIRFLOW_CLIENT_METRICS
from ..table_publishing import publish_outlet_tables
from ..topic_setup import declared_topics, set_up_topics
from .base import TransactionalOperatorMixin

if TYPE_CHECKING:
    from airflow.sdk import Context

    from txn_broker import Broker, TopicSpec

MARKER_GROUP_PREFIX = "txn_broker.ingest."


def marker_group(identity: dict[str, Any]) -> str:
    """The marker consumer group that records one ingest identity."""
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()
    return MARKER_GROUP_PREFIX + digest[:40]


class ProduceToTopicOperator(TxnBrokerLineageMixin, TransactionalOperatorMixin, BaseOperator):
    """Ingest ``source`` (paths or glob patterns of CSV, JSON-lines or Parquet files; the
    format comes from the suffix unless ``format`` is given) or the output of
    ``python_callable`` (a dotted path; called with ``op_kwargs``; returns a pyarrow Table
    or a list of dicts) into ``topic`` in one transaction.

    Columns are matched to the topic's schema by name and cast to its types: a missing
    nullable column becomes nulls; a column the topic does not have fails the task before
    anything is written (SchemaMismatchError), as does a value that does not cast.
    ``key``: the column whose value picks the partition.

    ``topics``: the topics this task writes, as ``TopicSpec(name, partitions, schema,
    config)`` values: created when missing, checked when they exist (same partitions, same
    schema), when the task starts. Without it ``topic`` must exist already.
    The transactional id defaults to ``{dag_id}.{task_id}[.map_index]``.

    XCom: ``{"topic", "outcome": "committed" | "already_ingested", "records_out",
    "ingested": [...], "skipped": [...], "transactional_id", "producer_id",
    "producer_epoch", "offsets"}``. Files are read whole into memory: split very large
    inputs.
    """

    template_fields: Sequence[str] = (
        "topic", "source", "op_kwargs", "transactional_id", "idempotency_key", "txn_broker_conn_id",
    )
    ui_color = "#d6eaf8"

    def __init__(
        self,
        *,
        topic: str,
        source: str | list[str] | None = None,
        format: str | None = None,
        python_callable: str | None = None,
        op_kwargs: dict[str, Any] | None = None,
        key: str | None = None,
        transactional_id: str | None = None,
        idempotency_key: str | None = None,
        transaction_timeout_ms: int | None = None,
        topics: list[TopicSpec] | None = None,
        txn_broker_conn_id: str = DEFAULT_CONN_ID,
        **kwargs: Any,
    ) -> None:
        declared = declared_topics(topics, kwargs.get("task_id", "?"))
        if (source is None) == (python_callable is None):
            raise ValueError("pass exactly one of source= (files) or python_callable= (a dotted path)")
        if python_callable is not None and not isinstance(python_callable, str):
            raise ValueError("python_callable must be a dotted path string, e.g. 'mypkg.orders.fetch'")
        if "outlets" not in kwargs and "{{" not in topic:
            kwargs["outlets"] = output_assets([topic], declared, txn_broker_conn_id)
        super().__init__(**kwargs)
        self.topics = declared
        self.topic = topic
        self.source = source
        self.format = format
        self.python_callable = python_callable
        self.op_kwargs = op_kwargs or {}
        self.key = key
        self.transactional_id = transactional_id
        self.idempotency_key = idempotency_key
        self.transaction_timeout_ms = transaction_timeout_ms
        self.txn_broker_conn_id = txn_broker_conn_id

    def execute(self, context: Context) -> dict[str, Any]:
        tid = self.resolve_transactional_id(context)
        hook = TxnBrokerHook(self.txn_broker_conn_id)
        try:
            broker = hook.get_conn()
            set_up_topics(broker, self.topics, [self.topic], self.task_id, self.txn_broker_conn_id)
            summary = self._ingest(broker, tid, context)
            tables = publish_outlet_tables(broker, self.outlets, self.txn_broker_conn_id)
            return {**summary, "iceberg": tables} if tables else summary
        finally:
            hook.close()

    # OpenLineage (lineage.py): the topic is the output, with the records this run committed
    def lineage_topics(self) -> tuple[list[str], list[str]]:
        return [], [self.topic]

    def lineage_output_statistics(self, result: dict[str, Any] | None) -> dict[str, tuple[int, int | None]]:
        return {self.topic: (int(result.get("records_out", 0)), None)} if result else {}

    def _callable_identity(self, context: Context) -> dict[str, Any]:
        if self.idempotency_key:
            return {"topic": self.topic, "key": str(self.idempotency_key)}
        ti = context["ti"]
        return {"topic": self.topic, "callable": self.python_callable, "dag_id": ti.dag_id,
                "task_id": ti.task_id, "run_id": ti.run_id, "map_index": ti.map_index}

    def _ingest(self, broker: Broker, tid: str, context: Context) -> dict[str, Any]:
        from txn_broker import READ_UNCOMMITTED, TopicPartition

        description = broker.describe_topic(self.topic)
        schema = description.schema
        partitions = [TopicPartition(self.topic, p.partition) for p in description.partitions]
        # one marker group per input file (so a glob picks up only new files), or one
        # for the whole callable output / idempotency key
        inputs: list[tuple[str, Path | None, dict[str, Any]]] = []
        if self.source is not None:
            for file in resolve_sources(self.source):
                info = fingerprint(file)
                identity = ({"topic": self.topic, "key": str(self.idempotency_key), "file": str(file)}
                            if self.idempotency_key else {"topic": self.topic, "file": info})
                inputs.append((marker_group(identity), file, info))
        else:
            inputs.append((marker_group(self._callable_identity(context)), None, {}))

        producer = broker.producer(transactional_id=tid, transaction_timeout_ms=self.transaction_timeout_ms,
                                   metrics=AIRFLOW_CLIENT_METRICS)
        try:
            # init first: it fences any earlier attempt and settles what it left, so the
            # marker checks below see final answers.
            producer.init_transactions()
            self.remember_producer_epoch(producer.epoch)
            summary: dict[str, Any] = {"topic": self.topic, "transactional_id": tid,
                                       "producer_id": producer.producer_id, "producer_epoch": producer.epoch}
            pending: list[tuple[str, Path | None, dict[str, Any]]] = []
            skipped: list[str] = []
            for group, path, info in inputs:
                done = broker.committed_offsets(group, partitions)
                if any(offset is not None for offset in done.values()):
                    skipped.append(str(path) if path else group)
                    self.log.info("already ingested (marker group %s): %s", group, path or self.python_callable)
                else:
                    pending.append((group, path, info))
            summary["skipped"] = skipped
            if not pending:
                return {**summary, "outcome": "already_ingested", "records_out": 0, "ingested": [],
                        "offsets": {}}

            records = 0
            with producer.transaction():
                for _group, path, info in pending:
                    if path is not None:
                        fmt = detect_format(path, self.format)
                        table = read_file(path, fmt, schema)
                        self.log.info("%s (%s, %d bytes): %d records", path, fmt, info["size"], table.num_rows)
                    else:
                        assert self.python_callable is not None
                        table = callable_table(import_callable(self.python_callable), self.op_kwargs, schema)
                    producer.send(self.topic, table, key=self.key)
                    records += table.num_rows
                appends = producer.flush()
                ends: dict[TopicPartition, int] = {}
                for a in appends:
                    tp = TopicPartition(a.topic, a.partition)
                    ends[tp] = max(ends.get(tp, 0), a.base_offset + a.record_count)
                if not ends:  # nothing to write: still record that these inputs were ingested
                    ends = broker.end_offsets([partitions[0]], READ_UNCOMMITTED)
                for group, _path, _info in pending:
                    producer.send_offsets_to_transaction(ends, group)
            self.log.info("committed %d records into %s (transactional id %s, epoch %s)",
                          records, self.topic, tid, producer.epoch)
            return {**summary, "outcome": "committed", "records_out": records,
                    "ingested": [str(p) if p else g for g, p, _ in pending],
                    "offsets": {str(tp.partition): o for tp, o in sorted(ends.items())}}
        finally:
            producer.close()
