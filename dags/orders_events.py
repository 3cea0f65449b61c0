"""``orders_events``: event-driven, exactly once. A run starts when COMMITTED orders arrive
in ``orders_raw`` and processes exactly the offset ranges the event announced.

    orders_raw ──(CommittedRecordsEventTrigger, in the triggerer)──► asset event {ranges}
        └──► run: accept_orders ─► orders_accepted  (1 transaction: output + group offsets)

* The schedule is the asset ``txn-committed://txn_broker_default/orders_raw/orders_events.accept``
  (``committed_records_asset``): its watcher polls the last stable offsets and fires an
  event with the new ``(topic, partition, start, end)`` ranges that hold committed records
  past the group ``orders_events.accept``. Records of an open transaction (past the LSO)
  or of an aborted one (never read read_committed) start no run.
* ``accept_orders`` (a light Python stage, no Spark): fences older instances of its
  transactional id ``orders_events.accept_orders``, reads the group's committed offsets,
  and processes ``[committed, end)`` of every partition its events announced: each order
  goes to ``orders_accepted`` with its source partition and offset and the ids of the
  events that started the run, and the ends are committed as the group's offsets in the
  same transaction. An event announced twice (triggerer restart) or events that overlap
  find their ranges committed already and process nothing twice; a range a failed run never
  committed is processed by the next run, so nothing is skipped.
* Without a triggering event (``dag.test()``, a manual trigger) the run processes the
  events in ``params.events`` (a list of event payloads): the demo passes the payload the
  trigger computes in process.

One transactional id for every run, hence ``max_active_runs=1`` (two runs at once would
fence each other; the fenced one fails and is retried, still without double processing).
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import pendulum
from airflow.sdk import DAG, Param, task
from txn_broker_airflow.assets import committed_records_asset, topic_asset

SPARK_APPS = Path(os.environ.get("TXN_BROKER_SPARK_APPS") or Path(__file__).resolve().parents[1] / "spark_apps")
SOURCE, OUTPUT, GROUP = "orders_raw", "orders_accepted", "orders_events.accept"
POLL_INTERVAL = float(os.environ.get("TXN_BROKER_EVENTS_POLL_INTERVAL", "5"))

committed_orders = committed_records_asset([SOURCE], GROUP, poll_interval=POLL_INTERVAL)

with DAG(
    dag_id="orders_events",
    schedule=[committed_orders],
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 2, "retry_delay": timedelta(seconds=10)},
    params={"events": Param([], type="array", description="event payloads to process when no asset event "
                                                          "started the run (dag.test, manual runs)")},
    tags=["txn_broker", "example", "event-driven"],
    doc_md=__doc__,
) as dag:

    @task(outlets=[topic_asset(OUTPUT)])
    def accept_orders(**context: Any) -> dict[str, Any]:
        """Process the committed ranges of the events that started this run, exactly once."""
        from txn_broker_airflow.event_ranges import process_ranges, run_events
        from txn_broker_airflow.examples import accept_orders as transform
        from txn_broker_airflow.examples import pipeline_topics
        from txn_broker_airflow.hooks.txn_broker import TxnBrokerHook
        from txn_broker_airflow.ids import transactional_id_for

        events = run_events(context, committed_orders)
        hook = TxnBrokerHook()
        try:
            broker = hook.get_conn()
            broker.ensure_topics(pipeline_topics(SPARK_APPS, [SOURCE, OUTPUT]))
            return process_ranges(broker, transactional_id=transactional_id_for(context), events=events,
                                  output_topic=OUTPUT, transform=transform, key="order_id")
        finally:
            hook.close()

    accept_orders()
