"""Test DAG of the observability test: one run covers every operator's metrics and lineage.

    setup ─► ingest (CSV ─► test_orders) ─┬─► load (test_orders ─► SQL table)
                                          ├─► stage (Spark: test_orders ─► test_orders_copy;
                                          │          try 1 fails after writing, try 2 commits)
                                          └─► accept (event-driven: the committed ranges of
                                                      test_orders ─► test_orders_accepted)

``dag_run.conf``: ``{"csv": path}``. ``accept`` gets its event as ``orders_events`` gets it
from the triggerer, computed here in the task by the trigger's own function
(``find_new_ranges``), since ``dag.test()`` runs no triggerer.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pendulum
import pyarrow as pa
from airflow.sdk import DAG, task
from txn_broker_airflow import (
    ProcessCommittedRecordsOperator,
    ProduceToTopicOperator,
    TopicSpec,
    TopicToPostgresOperator,
    TransactionalSparkOperator,
)
from txn_broker_airflow.assets import committed_records_asset

SCHEMA = pa.schema([("order_id", pa.string()), ("amount", pa.float64()), ("day", pa.string())])
ACCEPTED = SCHEMA.append(pa.field("source_partition", pa.int32())).append(
    pa.field("source_offset", pa.int64())).append(pa.field("event_ids", pa.string()))
STAGE = Path(__file__).resolve().parents[1] / "stages" / "lineage_stage.py"
GROUP = "txn_test_observability.accept"
committed_orders = committed_records_asset(["test_orders"], GROUP)


class AcceptAnnounced(ProcessCommittedRecordsOperator):
    """Processes the event the trigger would announce now."""

    def execute(self, context: Any) -> dict[str, Any]:
        from txn_broker_airflow.event_ranges import event_payload, find_new_ranges
        from txn_broker_airflow.hooks.txn_broker import TxnBrokerHook

        hook = TxnBrokerHook()
        try:
            ranges = find_new_ranges(hook.get_conn(), ["test_orders"], GROUP, {})
        finally:
            hook.close()
        context["params"]["events"] = [event_payload(GROUP, ["test_orders"], ranges)]
        return super().execute(context)


with DAG(
    dag_id="txn_test_observability",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    max_active_runs=1,
    default_args={"retries": 1, "retry_delay": timedelta(0)},
) as dag:

    @task
    def setup() -> dict[str, str]:
        from txn_broker_airflow.hooks.txn_broker import TxnBrokerHook

        hook = TxnBrokerHook()
        try:
            return hook.get_conn().ensure_topics([TopicSpec("test_orders", 3, SCHEMA),
                                                  TopicSpec("test_orders_copy", 2, SCHEMA)])
        finally:
            hook.close()

    ingest = ProduceToTopicOperator(task_id="ingest", topic="test_orders", source="{{ dag_run.conf['csv'] }}",
                                    key="order_id")
    load = TopicToPostgresOperator(task_id="load", topic="test_orders", table="test_orders")
    stage = TransactionalSparkOperator(task_id="stage", application=str(STAGE), inputs=["test_orders"],
                                       outputs=["test_orders_copy"],
                                       application_kwargs={"try_number": "{{ ti.try_number }}"})
    accept = AcceptAnnounced(task_id="accept", events_asset=committed_orders, output_topic="test_orders_accepted",
                             transform="txn_broker_airflow.examples.accept_orders", key="order_id",
                             topics=[TopicSpec("test_orders_accepted", 1, ACCEPTED)])
    setup() >> ingest >> [load, stage, accept]
