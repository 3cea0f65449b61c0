"""Test DAG: one TransactionalSparkOperator stage (``stages/copy_stage.py``) from
``stage_in`` to ``stage_out``, retried once after a failure. The test prepares the topics
and the input; env variables inject failures (see the stage). ``TXN_TEST_DEPLOY=spark-submit``
submits the stage with the Spark provider's hook (connection ``txn_test_spark``)."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import pendulum
from airflow.sdk import DAG
from txn_broker_airflow.operators.transactional_spark import TransactionalSparkOperator

STAGE = Path(__file__).resolve().parents[1] / "stages" / "copy_stage.py"

with DAG(
    dag_id="txn_test_stage",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    default_args={"retries": 1, "retry_delay": timedelta(0)},
) as dag:
    TransactionalSparkOperator(
        task_id="copy",
        application=str(STAGE),
        inputs=["stage_in"],
        outputs=["stage_out"],
        application_kwargs={"try_number": "{{ ti.try_number }}"},
        transaction_timeout_ms=600_000,
        deploy=os.environ.get("TXN_TEST_DEPLOY", "session"),
        spark_conn_id="txn_test_spark",
    )
