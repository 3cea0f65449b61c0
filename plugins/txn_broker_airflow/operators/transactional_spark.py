"""``TransactionalSparkOperator``: one PySpark stage, one transaction, exactly once whatever
Airflow does (retries, zombies, duplicate runs).

The transactional id defaults to ``{dag_id}.{task_id}`` (``.{map_index}`` for a mapped
task), the same for every try: a retry's ``init_transactions`` fences the attempt before
it and aborts whatever that attempt left open, and the input offsets commit atomically
with the output, so a retry re-reads exactly the input the failed attempt did not commit.
The consumer group defaults to the transactional id.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from ..assets import output_assets
from ..hooks.txn_broker import DEFAULT_CONN_ID, TxnBrokerHook
from ..lineage import TxnBrokerLineageMixin
from ..stage_runner import StageSpec, run_stage
from ..table_publishing import publish_outlet_tables
from ..topic_setup import declared_topics, set_up_topics
from .base import TransactionalOperatorMixin

if TYPE_CHECKING:
    from airflow.sdk import Context

    from txn_broker import Broker, TopicSpec

DEPLOY_MODES = ("session", "spark-submit")
SPARK_SUBMIT_ENTRY = Path(__file__).resolve().parents[1] / "spark_submit_entry.py"


class TransactionalSparkOperator(TxnBrokerLineageMixin, TransactionalOperatorMixin, BaseOperator):
    """Run ``application`` (a ``spark_apps`` file with ``run(spark, stage, **kwargs)``, or a
    dotted path to such a function) in one transaction: it reads ``inputs`` from
    ``group_id``'s committed offsets up to end offsets fixed at the start, writes its
    outputs, and commits them with the new offsets; any failure aborts.

    ``deploy="session"`` (default): the Spark driver runs in the task, with a
    SparkSession whose master is ``spark_master``, else ``$TXN_BROKER_SPARK_MASTER``,
    else ``local[2]`` (a ``spark://`` master puts the executors on a cluster).
    ``deploy="spark-submit"``: the driver is submitted with the Spark provider's
    ``SparkSubmitHook`` (connection ``spark_conn_id``; ``spark_submit_kwargs`` are passed
    to the hook); the broker settings reach the driver through its environment.

    ``outputs``: the topics the stage writes, declared as the task's outlets
    (``txn-topic://`` Assets) so other DAGs can be scheduled on them; with the
    ``txn-iceberg://`` Asset of each output declared in ``topics`` with ``iceberg.enabled``,
    whose table is published after the commit (``table_publishing.py``).
    ``topics``: ``TopicSpec(name, partitions, schema, config)`` values for the topics the
    stage writes: created when missing, checked when they exist. Every input and output
    is checked to exist when the task starts, before the Spark JVM starts
    (MissingTopicsError names the missing ones).
    ``reprocess_from`` (templated; an ISO 8601 time, empty for none): before the stage,
    reset ``group_id`` on the inputs to the first offsets at or after that time, once per
    task instance (``reprocessing.py``), so the stage reprocesses everything since then,
    e.g. ``reprocess_from="{{ dag_run.conf.get('reprocess_from', '') }}"``.
    ``application_kwargs`` (templated) are passed to the stage function.
    ``on_kill`` aborts the open transaction through the coordinator (fencing the
    producer) and cancels the Spark jobs.

    XCom: the stage summary: records in and out, input offsets, transactional id,
    producer epoch and outcome.

    OpenLineage (``lineage.py``): ``inputs`` and ``outputs`` as topic datasets, records and
    bytes written per output, the transaction with the input offsets it committed; a
    failed stage reports the transaction it aborted.
    """

    template_fields: Sequence[str] = (
        "application", "inputs", "outputs", "group_id", "transactional_id", "application_kwargs",
        "spark_conf", "spark_master", "txn_broker_conn_id", "reprocess_from",
    )
    template_fields_renderers = {"application_kwargs": "json", "spark_conf": "json"}
    ui_color = "#fdebd0"

    def __init__(
        self,
        *,
        application: str,
        inputs: list[str],
        outputs: list[str],
        group_id: str | None = None,
        transactional_id: str | None = None,
        application_kwargs: dict[str, Any] | None = None,
        transaction_timeout_ms: int | None = None,
        topics: list[TopicSpec] | None = None,
        reprocess_from: str | None = None,
        deploy: str = "session",
        spark_master: str | None = None,
        spark_conf: dict[str, Any] | None = None,
        spark_conn_id: str = "spark_default",
        spark_submit_kwargs: dict[str, Any] | None = None,
        txn_broker_conn_id: str = DEFAULT_CONN_ID,
        **kwargs: Any,
    ) -> None:
        declared = declared_topics(topics, kwargs.get("task_id", "?"))
        if deploy not in DEPLOY_MODES:
            raise ValueError(f"deploy must be one of {DEPLOY_MODES}, got {deploy!r}")
        if not isinstance(application, str):
            raise ValueError("application must be a file path or a dotted path string")
        if "outlets" not in kwargs and not any("{{" in t for t in outputs):
            kwargs["outlets"] = output_assets(list(outputs), declared, txn_broker_conn_id)
        super().__init__(**kwargs)
        self.topics = declared
        self.reprocess_from = reprocess_from
        self.application = application
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self.group_id = group_id
        self.transactional_id = transactional_id
        self.application_kwargs = application_kwargs or {}
        self.transaction_timeout_ms = transaction_timeout_ms
        self.deploy = deploy
        self.spark_master = spark_master
        self.spark_conf = spark_conf or {}
        self.spark_conn_id = spark_conn_id
        self.spark_submit_kwargs = spark_submit_kwargs or {}
        self.txn_broker_conn_id = txn_broker_conn_id
        self._spark: Any = None
        self._submit_hook: Any = None

    def execute(self, context: Context) -> dict[str, Any]:
        tid = self.resolve_transactional_id(context)
        spec = StageSpec(
            application=self.application, transactional_id=tid, group_id=self.group_id or tid,
            inputs=self.inputs, outputs=self.outputs, kwargs=dict(self.application_kwargs),
            transaction_timeout_ms=self.transaction_timeout_ms,
        )
        hook = TxnBrokerHook(self.txn_broker_conn_id)
        try:
            broker = hook.get_conn()
            # before Spark starts: a missing topic costs a message, not a JVM start
            set_up_topics(broker, self.topics, [*self.inputs, *self.outputs], self.task_id,
                          self.txn_broker_conn_id)
            if self.reprocess_from:
                self._reset_to_time(broker, spec, context)
            if self.deploy == "session":
                summary = self._run_in_session(broker, spec, context)
            else:
                summary = self._run_spark_submit(broker, hook, spec)
            tables = publish_outlet_tables(broker, self.outlets, self.txn_broker_conn_id)
            if tables:
                summary["iceberg"] = tables
        finally:
            hook.close()
        written = set(summary.get("records_out_by_topic", {}) or {})
        undeclared = written - set(self.outputs)
        if undeclared:
            self.log.warning("the stage wrote %s, which are not declared in outputs=", sorted(undeclared))
        self.log.info("stage %s: %s", tid, json.dumps(summary, sort_keys=True, default=str))
        return summary

    # OpenLineage (lineage.py): the input topics in, the output topics out
    def lineage_topics(self) -> tuple[list[str], list[str]]:
        return list(self.inputs), list(self.outputs)

    def lineage_output_statistics(self, result: dict[str, Any] | None) -> dict[str, tuple[int, int | None]]:
        if not result:
            return {}
        records = result.get("records_out_by_topic") or {}
        sizes = result.get("bytes_out_by_topic") or {}
        return {t: (int(records.get(t, 0)), int(sizes[t]) if t in sizes else None) for t in self.outputs}

    def _reset_to_time(self, broker: Broker, spec: StageSpec, context: Context) -> None:
        from txn_broker import to_timestamp_ms

        from ..reprocessing import reset_group_to_time

        when = to_timestamp_ms(str(self.reprocess_from))
        ti = context["ti"]
        identity = {"dag_id": ti.dag_id, "task_id": ti.task_id, "run_id": ti.run_id, "map_index": ti.map_index}
        offsets = reset_group_to_time(broker, transactional_id=spec.transactional_id, group_id=spec.group_id,
                                      inputs=spec.inputs, timestamp_ms=when, identity=identity,
                                      transaction_timeout_ms=spec.transaction_timeout_ms)
        if offsets is not None:
            self.log.info("reprocessing from %s: group %s reset to %s", self.reprocess_from, spec.group_id,
                          json.dumps(offsets, sort_keys=True))

    def _run_in_session(self, broker: Broker, spec: StageSpec, context: Context) -> dict[str, Any]:
        from txn_broker.spark import spark_session  # pyspark: only where a stage runs

        ti = context["ti"]
        spark, created = spark_session(f"{ti.dag_id}.{ti.task_id}", self.spark_master, self.spark_conf)
        self._spark = spark
        try:
            return run_stage(spark, broker, spec, on_start=self.remember_producer_epoch)
        finally:
            self._spark = None
            if created and not os.environ.get("TXN_BROKER_SPARK_KEEP_SESSION"):
                spark.stop()

    def _run_spark_submit(self, broker: Broker, hook: TxnBrokerHook, spec: StageSpec) -> dict[str, Any]:
        from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

        from txn_broker import resolve_database_url, resolve_storage_url

        config = hook.broker_config()
        env = {
            "TXN_BROKER_DATABASE_URL": resolve_database_url(config.database_url)[0],
            "TXN_BROKER_STORAGE_URL": resolve_storage_url(config.storage_url),
            **config.s3_environment(),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(SPARK_SUBMIT_ENTRY.parents[1]),
                                                        os.environ.get("PYTHONPATH")])),
        }
        with tempfile.TemporaryDirectory(prefix="txn-stage-") as tmp:
            summary_file = Path(tmp) / "summary.json"
            args = ["--application", spec.application, "--transactional-id", spec.transactional_id,
                    "--group-id", spec.group_id, "--inputs", json.dumps(spec.inputs),
                    "--outputs", json.dumps(spec.outputs), "--kwargs", json.dumps(spec.kwargs),
                    "--summary-file", str(summary_file)]
            if spec.transaction_timeout_ms is not None:
                args += ["--transaction-timeout-ms", str(spec.transaction_timeout_ms)]
            self._submit_hook = SparkSubmitHook(
                conn_id=self.spark_conn_id, conf=self.spark_conf, name=spec.transactional_id,
                application_args=args, env_vars=env, **self.spark_submit_kwargs)
            try:
                self._submit_hook.submit(application=str(SPARK_SUBMIT_ENTRY))
            finally:
                self._submit_hook = None
            if summary_file.exists():  # client mode: the driver ran on this machine
                return dict(json.loads(summary_file.read_text()))
        return self._summary_from_broker(broker, spec)

    @staticmethod
    def _summary_from_broker(broker: Broker, spec: StageSpec) -> dict[str, Any]:
        """What the broker knows of the stage's last transaction (cluster deploy mode,
        where the driver's summary stays on the cluster)."""
        from txn_broker import TopicPartition

        txn = broker.describe_transaction(spec.transactional_id)
        partitions = [TopicPartition(t, p.partition) for t in spec.inputs
                      for p in broker.describe_topic(t).partitions]
        offsets = broker.committed_offsets(spec.group_id, partitions)
        last = txn.transactions[0] if txn.transactions else {}
        return {
            "transactional_id": spec.transactional_id, "group_id": spec.group_id,
            "producer_epoch": txn.producer_epoch, "outcome": last.get("outcome"),
            "records_out": sum(p.record_count for p in txn.partitions),
            "input_offsets": {f"{tp.topic}-{tp.partition}": o for tp, o in offsets.items()},
        }

    def on_kill(self) -> None:
        if self._submit_hook is not None:
            self._submit_hook.on_kill()
        if self._spark is not None:
            try:
                self._spark.sparkContext.cancelAllJobs()
            except Exception as error:  # the session may already be stopping
                self.log.warning("could not cancel Spark jobs: %s", error)
        super().on_kill()
