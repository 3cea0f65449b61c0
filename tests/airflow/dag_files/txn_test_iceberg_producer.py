"""Test DAGs of the Iceberg table Asset: ``txn_test_iceberg_producer`` ingests a CSV
(``dag_run.conf["csv"]``) into ``test_iceberg_orders``, a topic it declares with
``iceberg.enabled``, so the task's outlets are the topic's Asset and its table's
(``txn-iceberg://txn_broker_default/test_iceberg_orders``) and it publishes the table after
its commit; ``txn_test_iceberg_consumer`` is scheduled on the table's Asset and reads the
table with pyiceberg."""

from __future__ import annotations

from typing import Any

import pendulum
import pyarrow as pa
from airflow.sdk import DAG, task
from txn_broker_airflow import ProduceToTopicOperator, TopicSpec
from txn_broker_airflow.assets import iceberg_table_asset

TOPIC = "test_iceberg_orders"
SCHEMA = pa.schema([("order_id", pa.string()), ("amount", pa.float64()), ("day", pa.string())])

with DAG(dag_id="txn_test_iceberg_producer", schedule=None, start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
         max_active_runs=1) as producer:
    ProduceToTopicOperator(task_id="ingest", topic=TOPIC, source="{{ dag_run.conf['csv'] }}", key="order_id",
                           topics=[TopicSpec(TOPIC, 2, SCHEMA, {"iceberg.enabled": "true"})])

with DAG(dag_id="txn_test_iceberg_consumer", schedule=[iceberg_table_asset(TOPIC)],
         start_date=pendulum.datetime(2024, 1, 1, tz="UTC"), catchup=False) as consumer:

    @task
    def read_table(**context: Any) -> dict[str, Any]:
        from txn_broker_airflow.hooks.txn_broker import TxnBrokerHook

        hook = TxnBrokerHook()
        try:
            rows = hook.get_conn().iceberg_table(TOPIC).scan().to_arrow()
        finally:
            hook.close()
        events = [e.asset.uri for evs in (context.get("triggering_asset_events") or {}).values() for e in evs]
        return {"order_ids": sorted(rows.column("order_id").to_pylist()), "triggered_by": events}

    read_table()
