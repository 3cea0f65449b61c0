"""Test DAG: ingest a CSV into a topic and load the topic into a SQL table, each exactly
once even when the task fails right after its commit and Airflow retries it.

``dag_run.conf``: ``{"csv": path}``. Env ``TXN_TEST_CRASH_AFTER_COMMIT=1`` makes the first
try of ``ingest`` and of ``load`` fail after they committed (as if the worker died before
Airflow recorded the success).
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

import pendulum
import pyarrow as pa
from airflow.sdk import DAG, task
from txn_broker_airflow.operators.produce import ProduceToTopicOperator
from txn_broker_airflow.operators.topic_to_postgres import TopicToPostgresOperator

SCHEMA = pa.schema([("order_id", pa.string()), ("amount", pa.float64()), ("day", pa.string())])


def _crash_on_first_try(context: Any) -> None:
    if context["ti"].try_number == 1 and os.environ.get("TXN_TEST_CRASH_AFTER_COMMIT"):
        raise RuntimeError("injected: the worker was lost after the commit")


class ProduceThenCrash(ProduceToTopicOperator):
    def execute(self, context: Any) -> dict[str, Any]:
        result = super().execute(context)
        _crash_on_first_try(context)
        return result


class LoadThenCrash(TopicToPostgresOperator):
    def execute(self, context: Any) -> dict[str, Any]:
        result = super().execute(context)
        _crash_on_first_try(context)
        return result


with DAG(
    dag_id="txn_test_ingest_load",
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
            return hook.get_conn().ensure_topics({"test_orders": (3, SCHEMA)})
        finally:
            hook.close()

    ingest = ProduceThenCrash(task_id="ingest", topic="test_orders", source="{{ dag_run.conf['csv'] }}",
                              key="order_id")
    load = LoadThenCrash(task_id="load", topic="test_orders", table="test_orders")
    setup() >> ingest >> load
