"""A DAG whose id contains a dot, so the UI tests can check that transactions are
attributed to the DAG Airflow knows (``ui.pipeline`` + task ``load_orders``), not split at
the first dot. Its tasks never run in the tests: the broker data is produced directly."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, task

with DAG("ui.pipeline", schedule=None, start_date=pendulum.datetime(2025, 1, 1, tz="UTC"), catchup=False,
         max_active_runs=1, tags=["txn_broker", "ui-test"]):

    @task
    def load_orders() -> None:
        """Stands for a transactional stage."""

    @task
    def transform() -> None:
        """Stands for a transactional stage."""

    @task
    def publish(part: int) -> None:
        """A mapped stage: transactional ids ``ui.pipeline.publish.{map_index}``."""

    load_orders() >> transform() >> publish.expand(part=[0, 1])
