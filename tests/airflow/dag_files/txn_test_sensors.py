"""Test DAG: a hung transaction is aborted by the (deferred) timeout sensor, then the records
sensor waits for committed records only.

``hang`` opens a transaction with a 1.5 s timeout and leaves it open, as a producer that
died outside Airflow's control would. ``sweep`` defers until the coordinator's sweep has
aborted it. ``publish`` commits 5 records; ``wait_records`` needs 5 committed records past
its group's offsets (the 3 aborted ones must not count).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pendulum
import pyarrow as pa
from airflow.sdk import DAG, chain, task
from txn_broker_airflow.sensors.topic_records import TopicRecordsSensor
from txn_broker_airflow.sensors.transaction_timeout import TransactionTimeoutSensor

TOPIC = "sensor_events"
SCHEMA = pa.schema([("n", pa.int64())])
HUNG_ID = "txn_test_sensors.hung"

with DAG(
    dag_id="txn_test_sensors",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    max_active_runs=1,
    default_args={"retries": 0},
) as dag:

    @task
    def hang() -> dict[str, Any]:
        from txn_broker_airflow.hooks.txn_broker import TxnBrokerHook

        broker = TxnBrokerHook().get_conn()
        broker.ensure_topics({TOPIC: (2, SCHEMA)})
        producer = broker.producer(transactional_id=HUNG_ID, transaction_timeout_ms=1500)
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(TOPIC, [{"n": -1}, {"n": -2}, {"n": -3}], partition=0)
        producer.flush()
        # no commit and no abort: this producer is simply gone
        return {"transactional_id": HUNG_ID, "epoch": producer.epoch}

    sweep = TransactionTimeoutSensor(task_id="sweep", topics=[TOPIC], poke_interval=0.5,
                                     timeout=120)

    @task
    def publish() -> int:
        from txn_broker_airflow.hooks.txn_broker import TxnBrokerHook

        broker = TxnBrokerHook().get_conn()
        producer = broker.producer(transactional_id="txn_test_sensors.publish")
        producer.init_transactions()
        with producer.transaction():
            producer.send(TOPIC, [{"n": i} for i in range(5)], partition=1)
        return 5

    wait_records = TopicRecordsSensor(task_id="wait_records", topics=[TOPIC], group_id="sensor_reader",
                                      min_records=5, poke_interval=0.5, timeout=60,
                                      execution_timeout=timedelta(minutes=2))

    chain(hang(), sweep, publish(), wait_records)
