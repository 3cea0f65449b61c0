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

import pendulum
from airflow.sdk import DAG, Param
from txn_broker_airflow import ProcessCommittedRecordsOperator, TopicSpec
from txn_broker_airflow.assets import committed_records_asset
from txn_broker_airflow.examples import pipeline_topics, spark_apps_dir

SOURCE, OUTPUT, GROUP = "orders_raw", "orders_accepted", "orders_events.accept"
# the topics' shapes live with the Spark stages (spark_apps/pipeline.py)
TOPICS = pipeline_topics(spark_apps_dir(__file__), [SOURCE, OUTPUT])
POLL_INTERVAL = float(os.environ.get("TXN_BROKER_EVENTS_POLL_INTERVAL", "5"))
REANNOUNCE_AFTER = float(os.environ.get("TXN_BROKER_EVENTS_REANNOUNCE_AFTER", "60"))

committed_orders = committed_records_asset([SOURCE], GROUP, poll_interval=POLL_INTERVAL,
                                           reannounce_after=REANNOUNCE_AFTER)

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

    # fences older instances, processes [committed, end) of the announced ranges and commits
    # the output with the group's new offsets (event_ranges.process_ranges); lineage: lineage.py
    ProcessCommittedRecordsOperator(
        task_id="accept_orders",
        events_asset=committed_orders,
        output_topic=OUTPUT,
        transform="txn_broker_airflow.examples.accept_orders",
        key="order_id",
        topics=[TopicSpec(name, partitions, schema) for name, (partitions, schema) in TOPICS.items()],
    )
