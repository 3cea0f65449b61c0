"""``orders_pipeline``: orders from a CSV export to daily revenue in the warehouse, every
stage exactly once whatever Airflow does (retries, zombies, duplicate runs).

    generate_orders ─► ingest_orders ─► clean_orders ─► daily_revenue ─► load_revenue
       (CSV file)      orders_raw        orders_clean     revenue_daily    warehouse table
                       (1 transaction)   (Spark, 1 txn)   (Spark, 1 txn)   (rows + offsets in 1 DB txn)

* ``generate_orders`` stands in for the shop's export: a realistic CSV (duplicates, dirty
  rows) in ``$TXN_BROKER_HOME/landing/orders/``, new for every run (``params.rows`` rows).
* ``ingest_orders`` (``ProduceToTopicOperator``): the file into ``orders_raw``, one
  transaction; a retry never ingests the same file twice.
* ``clean_orders`` and ``daily_revenue`` (``TransactionalSparkOperator``,
  ``spark_apps/clean_orders.py`` and ``spark_apps/daily_revenue.py``): each reads what its
  consumer group has not consumed yet, up to end offsets fixed at the start, and commits
  its output together with the new offsets. Their outputs are Airflow Assets
  (``txn-topic://txn_broker_default/orders_clean``, ``.../revenue_daily``).
* ``load_revenue`` (``TopicToPostgresOperator``): the committed ``revenue_daily`` records
  into the warehouse table ``revenue_daily``, rows and offsets in one database transaction.
  The warehouse is ``$TXN_BROKER_WAREHOUSE_URL`` (PostgreSQL), else the demo's SQLite file.

Transactional ids are ``orders_pipeline.<task_id>``, the same for every run, hence
``max_active_runs=1``. ``revenue_daily`` holds one row per (day, country, currency) and
batch: a day's revenue is the sum of its rows.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import DAG, Param, task
from txn_broker_airflow.examples import spark_apps_dir
from txn_broker_airflow.operators.produce import ProduceToTopicOperator
from txn_broker_airflow.operators.topic_to_postgres import TopicToPostgresOperator
from txn_broker_airflow.operators.transactional_spark import TransactionalSparkOperator

# the stage files: $TXN_BROKER_SPARK_APPS, else spark_apps/ beside this file or beside its folder
SPARK_APPS = spark_apps_dir(__file__)
TOPICS = ("orders_raw", "orders_clean", "revenue_daily")

with DAG(
    dag_id="orders_pipeline",
    schedule="@daily",
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 2, "retry_delay": timedelta(seconds=20)},
    params={"rows": Param(2000, type="integer", minimum=1, maximum=1_000_000,
                          description="orders in the generated export")},
    tags=["txn_broker", "example"],
    doc_md=__doc__,
) as dag:

    @task
    def setup_topics() -> dict[str, str]:
        """Create the pipeline's topics if they do not exist (idempotent)."""
        from txn_broker_airflow.examples import pipeline_topics
        from txn_broker_airflow.hooks.txn_broker import TxnBrokerHook

        hook = TxnBrokerHook()
        try:
            return hook.get_conn().ensure_topics(pipeline_topics(SPARK_APPS, TOPICS))
        finally:
            hook.close()

    @task
    def generate_orders(run_id: str | None = None, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """Write this run's order export (deterministic for the run id)."""
        from txn_broker_airflow.datagen import write_orders_csv

        from txn_broker import broker_home

        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", run_id or "manual")
        path = broker_home() / "landing" / "orders" / f"orders_{safe}.csv"
        expected = write_orders_csv(path, rows=int((params or {}).get("rows", 2000)), seed=run_id)
        return {"path": str(path), **expected.as_dict()}

    generated = generate_orders()
    ingest = ProduceToTopicOperator(
        task_id="ingest_orders",
        topic="orders_raw",
        source="{{ ti.xcom_pull(task_ids='generate_orders')['path'] }}",
        key="order_id",
    )
    clean = TransactionalSparkOperator(
        task_id="clean_orders",
        application=str(SPARK_APPS / "clean_orders.py"),
        inputs=["orders_raw"],
        outputs=["orders_clean"],
    )
    revenue = TransactionalSparkOperator(
        task_id="daily_revenue",
        application=str(SPARK_APPS / "daily_revenue.py"),
        inputs=["orders_clean"],
        outputs=["revenue_daily"],
    )
    load = TopicToPostgresOperator(task_id="load_revenue", topic="revenue_daily", table="revenue_daily")

    setup_topics() >> generated >> ingest >> clean >> revenue >> load
