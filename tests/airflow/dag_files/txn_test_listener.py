"""Test DAG: a task of a transactional operator dies with its transaction open; the
failure listener aborts it at once (its timeout is 10 minutes).

``CrashingProducer`` writes into its transaction and fails without aborting, as a worker
killed mid-task would (a real operator aborts in its own error handling).
"""

from __future__ import annotations

from typing import Any

import pendulum
import pyarrow as pa
from airflow.sdk import DAG
from txn_broker_airflow.hooks.txn_broker import TxnBrokerHook
from txn_broker_airflow.operators.produce import ProduceToTopicOperator

TOPIC = "listener_events"
SCHEMA = pa.schema([("n", pa.int64())])


class CrashingProducer(ProduceToTopicOperator):
    def execute(self, context: Any) -> Any:
        tid = self.resolve_transactional_id(context)
        broker = TxnBrokerHook(self.txn_broker_conn_id).get_conn()
        broker.ensure_topics({TOPIC: (1, SCHEMA)})
        producer = broker.producer(transactional_id=tid, transaction_timeout_ms=600_000)
        producer.init_transactions()
        self.remember_producer_epoch(producer.epoch)
        producer.begin_transaction()
        producer.send(TOPIC, [{"n": i} for i in range(4)])
        producer.flush()
        raise RuntimeError("injected: the worker died in the middle of its transaction")


with DAG(
    dag_id="txn_test_listener",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    max_active_runs=1,
    default_args={"retries": 0},
) as dag:
    CrashingProducer(task_id="crash", topic=TOPIC, python_callable="builtins.list")
