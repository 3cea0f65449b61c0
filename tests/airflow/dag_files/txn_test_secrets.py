"""Test DAG: the operators run against connections that hold passwords (the broker's
database URL and S3 secret key in ``txn_broker`` extras, the warehouse's password in a
Postgres connection); the test scans XCom and the task logs for them.

``dag_run.conf``: ``{"csv": path}``. Connections (set by the test): ``txn_broker_default``,
``txn_test_warehouse`` and ``txn_test_unreachable`` (a broker whose database refuses the
connection, so the error path and the failure listener run with a password in hand).
"""

from __future__ import annotations

import pendulum
import pyarrow as pa
from airflow.sdk import DAG, task
from txn_broker_airflow.operators.produce import ProduceToTopicOperator
from txn_broker_airflow.operators.topic_to_postgres import TopicToPostgresOperator
from txn_broker_airflow.sensors.topic_records import TopicRecordsSensor

SCHEMA = pa.schema([("order_id", pa.string()), ("amount", pa.float64()), ("day", pa.string())])

with DAG(
    dag_id="txn_test_secrets",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    max_active_runs=1,
    default_args={"retries": 0},
) as dag:

    @task
    def setup() -> dict[str, str]:
        from txn_broker_airflow.hooks.txn_broker import TxnBrokerHook

        hook = TxnBrokerHook()
        try:
            return hook.get_conn().ensure_topics({"secret_orders": (2, SCHEMA)})
        finally:
            hook.close()

    ingest = ProduceToTopicOperator(task_id="ingest", topic="secret_orders", source="{{ dag_run.conf['csv'] }}",
                                    key="order_id")
    wait = TopicRecordsSensor(task_id="wait", topics=["secret_orders"], group_id="secret_load", min_records=3,
                              poke_interval=0.5, timeout=60)
    load = TopicToPostgresOperator(task_id="load", topic="secret_orders", table="secret_orders",
                                   group_id="secret_load", postgres_conn_id="txn_test_warehouse")
    unreachable = ProduceToTopicOperator(task_id="unreachable", topic="secret_orders",
                                         source="{{ dag_run.conf['csv'] }}",
                                         txn_broker_conn_id="txn_test_unreachable")
    ready = setup()
    ready >> ingest >> wait >> load
    ready >> unreachable
