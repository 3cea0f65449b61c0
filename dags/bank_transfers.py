"""``bank_transfers``: money moves between accounts, each transfer one transaction across
two partitions, and a Spark check proves that no money is created or lost in what
``read_committed`` readers see.

    request_transfers ─► execute_transfers ─► check_ledger
    transfer_requests     transfers            ledger_checks
    (1 transaction)       (1 txn per transfer) (Spark, 1 txn)

* ``request_transfers`` (``ProduceToTopicOperator``): this run's payment orders
  (``params.transfers`` of them, generated) into ``transfer_requests``.
* ``execute_transfers``: a consume-transform-produce loop, Kafka's exactly-once pattern.
  For each request, one transaction writes the debit (a negative amount on the debit
  account) and the credit (positive, on the credit account, which is always in another
  partition of ``transfers``) and commits the request's offset for the task's consumer
  group. When the bank rejects a transfer (its credit account is closed), the debit was
  already written: the transaction is aborted, and only the request's offset is committed
  in a transaction of its own. A retry resumes after the last committed request, so no
  transfer is executed twice or lost.
* ``check_ledger`` (``TransactionalSparkOperator``, ``spark_apps/ledger_check.py``): reads
  the new ``transfers`` records read_committed and fails unless every transfer has both
  legs and they sum to zero; records the check in ``ledger_checks``. The aborted debits
  are in the log (a read_uncommitted reader would see money vanish) but never in
  read_committed data.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import DAG, Param, task
from txn_broker_airflow.assets import topic_asset
from txn_broker_airflow.examples import spark_apps_dir
from txn_broker_airflow.operators.produce import ProduceToTopicOperator
from txn_broker_airflow.operators.transactional_spark import TransactionalSparkOperator

# the stage files: $TXN_BROKER_SPARK_APPS, else spark_apps/ beside this file or beside its folder
SPARK_APPS = spark_apps_dir(__file__)

with DAG(
    dag_id="bank_transfers",
    schedule="@hourly",
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 2, "retry_delay": timedelta(seconds=20)},
    params={"transfers": Param(100, type="integer", minimum=1, maximum=100_000,
                               description="transfer requests generated for this run")},
    tags=["txn_broker", "example"],
    doc_md=__doc__,
) as dag:

    @task
    def setup_topics() -> dict[str, str]:
        """Create the topics if they do not exist (idempotent)."""
        from txn_broker_airflow.datagen import TRANSFER_REQUESTS
        from txn_broker_airflow.examples import pipeline_topics
        from txn_broker_airflow.hooks.txn_broker import TxnBrokerHook

        topics = pipeline_topics(SPARK_APPS, ["transfers", "ledger_checks"])
        topics["transfer_requests"] = (topics["transfers"][0], TRANSFER_REQUESTS)
        hook = TxnBrokerHook()
        try:
            return hook.get_conn().ensure_topics(topics)
        finally:
            hook.close()

    request = ProduceToTopicOperator(
        task_id="request_transfers",
        topic="transfer_requests",
        python_callable="txn_broker_airflow.datagen.transfer_requests",
        op_kwargs={"count": "{{ params.transfers }}", "seed": "{{ run_id }}"},
    )

    @task(outlets=[topic_asset("transfers")])
    def execute_transfers(ti: Any = None) -> dict[str, int]:
        """One transaction per transfer request (see the module docstring)."""
        import datetime as dt

        from txn_broker_airflow.hooks.txn_broker import TxnBrokerHook
        from txn_broker_airflow.ids import default_transactional_id

        from txn_broker import TopicPartition

        class TransferRejected(Exception):
            """The bank refused the transfer after its debit was written."""

        tid = default_transactional_id(ti.dag_id, ti.task_id, ti.map_index)
        hook = TxnBrokerHook()
        broker = hook.get_conn()
        producer = broker.producer(transactional_id=tid)
        consumer = broker.consumer(group_id=tid, isolation_level="read_committed")
        done = {"committed": 0, "rejected": 0}
        try:
            producer.init_transactions()  # fences an earlier try and aborts what it left open
            consumer.subscribe(["transfer_requests"])  # from the group's committed offsets
            while (batch := consumer.poll(max_records=500)).num_rows:
                for req in batch.to_pylist():
                    handled = {TopicPartition("transfer_requests", req["_partition"]): req["_offset"] + 1}
                    leg = {"transfer_id": req["transfer_id"], "currency": req["currency"],
                           "ts": dt.datetime.now(dt.UTC)}
                    try:
                        with producer.transaction():  # aborts on an exception
                            producer.send("transfers", [{**leg, "account": req["debit_account"],
                                                         "amount": -req["amount"]}], key="account")
                            if req["credit_account_closed"]:
                                producer.flush()  # the debit is in the log now, and will be aborted
                                raise TransferRejected(req["transfer_id"])
                            producer.send("transfers", [{**leg, "account": req["credit_account"],
                                                         "amount": req["amount"]}], key="account")
                            producer.send_offsets_to_transaction(handled, tid)
                        done["committed"] += 1
                    except TransferRejected:
                        with producer.transaction():  # the request is handled: its offset alone
                            producer.send_offsets_to_transaction(handled, tid)
                        done["rejected"] += 1
        finally:
            consumer.close()
            producer.close()
            hook.close()
        return done

    check = TransactionalSparkOperator(
        task_id="check_ledger",
        application=str(SPARK_APPS / "ledger_check.py"),
        inputs=["transfers"],
        outputs=["ledger_checks"],
    )

    setup_topics() >> request >> execute_transfers() >> check
