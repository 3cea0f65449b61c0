"""Event-driven DAGs on committed topic data (``orders_events``), exactly once.

In process, on both backends: the event trigger announces committed records only (never
an aborted or an open transaction's), never the same offsets twice in one trigger
instance, and the processing step turns duplicate and overlapping events into exactly-once
output. The common-messaging ``MessageQueueTrigger`` resolves the ``txn_broker`` scheme.

End to end (one backend): a real api-server, scheduler (LocalExecutor), dag-processor and
triggerer run ``orders_events`` from committed batches; aborted and open transactions
start no run; the triggerer is SIGKILLed mid-stream and restarted, and every record is
processed exactly once, none skipped.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pyarrow as pa
import pytest

pytestmark = [pytest.mark.airflow, pytest.mark.slow]

SOURCE, OUTPUT, GROUP = "orders_raw", "orders_accepted", "orders_events.accept"
TID = "orders_events.accept_orders"


def orders(first: int, n: int) -> pa.Table:
    from decimal import Decimal

    from airflow_harness import REPO
    from txn_broker_airflow.examples import pipeline_module

    schema = pipeline_module(REPO / "spark_apps").ORDERS_RAW
    return pa.Table.from_pylist([
        {"order_id": f"o{i:06d}", "customer_id": f"c{i % 7}", "country": "FR", "amount": Decimal("1.50"),
         "currency": "EUR", "ts": 1_700_000_000_000 + i} for i in range(first, first + n)], schema=schema)


def setup_topics(broker: Any) -> None:
    from airflow_harness import REPO
    from txn_broker_airflow.examples import pipeline_topics
    from txn_broker_airflow.topics import ensure_topics

    ensure_topics(broker, pipeline_topics(REPO / "spark_apps", [SOURCE, OUTPUT]))


def produce(broker: Any, tid: str, table: pa.Table, outcome: str = "commit", partition: int | None = None) -> Any:
    """One transaction of ``table`` into orders_raw: committed, aborted, or left open
    (the open producer is returned; its records are flushed into the log)."""
    producer = broker.producer(transactional_id=tid)
    producer.init_transactions()
    producer.begin_transaction()
    if partition is None:
        producer.send(SOURCE, table, key="order_id")
    else:
        producer.send(SOURCE, table, partition=partition)
    if outcome == "commit":
        producer.commit_transaction()
    elif outcome == "abort":
        producer.flush()
        producer.abort_transaction()
    else:
        producer.flush()
        return producer
    producer.close()
    return None


def accepted(broker: Any) -> list[dict[str, Any]]:
    from txn_broker import TopicPartition

    consumer = broker.consumer(isolation_level="read_committed")
    try:
        consumer.assign([TopicPartition(OUTPUT, p.partition) for p in broker.describe_topic(OUTPUT).partitions])
        consumer.seek_to_beginning()
        rows: list[dict[str, Any]] = []
        while True:
            batch = consumer.poll(max_records=10_000)
            if not batch.num_rows:
                return rows
            rows += batch.select(["order_id", "source_partition", "source_offset", "event_ids"]).to_pylist()
    finally:
        consumer.close()


def process(broker: Any, events: list[dict[str, Any]]) -> dict[str, Any]:
    from txn_broker_airflow.event_ranges import process_ranges
    from txn_broker_airflow.examples import accept_orders

    return process_ranges(broker, transactional_id=TID, events=events, output_topic=OUTPUT,
                          transform=accept_orders, key="order_id")


def test_trigger_announces_committed_ranges_only_and_processing_is_exactly_once(backend, airflow_env) -> None:  # type: ignore[no-untyped-def]
    from txn_broker_airflow.event_ranges import ranges_from_payload
    from txn_broker_airflow.triggers.committed_records import CommittedRecordsEventTrigger

    with backend.connect() as broker:
        trigger = CommittedRecordsEventTrigger(topics=[SOURCE], group_id=GROUP, poll_interval=0.1)
        assert trigger.poll_once(broker) is None  # no topic yet: waits
        setup_topics(broker)
        assert trigger.poll_once(broker) is None
        # aborted records and an open transaction's records: no event
        produce(broker, "gen.aborted", orders(0, 40), "abort")
        open_producer = produce(broker, "gen.open", orders(40, 40), "open", partition=0)
        assert trigger.poll_once(broker) is None
        assert trigger.poll_once(broker) is None

        produce(broker, "gen.a", orders(100, 30))
        first = trigger.poll_once(broker)
        assert first is not None and first["group_id"] == GROUP and len(first["event_id"]) == 32
        # the open transaction holds back partition 0's LSO: the committed records behind it
        # there are not announced yet
        assert 0 not in {r["partition"] for r in first["ranges"]}
        in_first = sum(r["end"] - r["start"] for r in first["ranges"])
        # the open transaction holds back the LSO of the partitions it wrote to: the
        # committed batch behind it is not announced yet there, and nothing is announced twice
        assert trigger.poll_once(broker) is None
        open_producer.commit_transaction()
        open_producer.close()
        second = trigger.poll_once(broker)
        assert second is not None
        _, r1 = ranges_from_payload(first)
        _, r2 = ranges_from_payload(second)
        for a in r1:  # no offset announced twice by one trigger instance
            assert all(b.start >= a.end for b in r2 if b.tp == a.tp)

        # a fresh trigger (triggerer restart) announces everything not committed yet again
        restarted = CommittedRecordsEventTrigger(topics=[SOURCE], group_id=GROUP)
        again = restarted.poll_once(broker)
        assert again is not None

        out1 = process(broker, [first])
        assert out1["outcome"] == "committed" and out1["records_in"] == in_first
        assert process(broker, [first])["outcome"] == "nothing to do"  # the same event twice
        out2 = process(broker, [again, second])  # overlapping events: only what is left
        assert out2["outcome"] == "committed" and out2["records_in"] == 70 - in_first
        assert process(broker, [again])["outcome"] == "nothing to do"
        assert restarted.poll_once(broker) is None and trigger.poll_once(broker) is None

        rows = accepted(broker)
        ids = sorted(r["order_id"] for r in rows)
        assert ids == [f"o{i:06d}" for i in [*range(40, 80), *range(100, 130)]]  # none aborted, none twice
        assert len({(r["source_partition"], r["source_offset"]) for r in rows}) == 70

        # a run whose event the trigger announced but which never committed: the next
        # event's run processes the gap too (nothing skipped)
        produce(broker, "gen.b", orders(200, 10))
        lost = trigger.poll_once(broker)
        produce(broker, "gen.c", orders(300, 10))
        later = trigger.poll_once(broker)
        assert lost is not None and later is not None
        out3 = process(broker, [later])
        assert out3["records_in"] == 20 and out3["outcome"] == "committed"
        assert process(broker, [lost])["outcome"] == "nothing to do"
        assert len(accepted(broker)) == 90


def test_trigger_runs_as_an_event_trigger(backend, airflow_env, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """``run()`` keeps yielding one event per new batch (it is not a one-shot trigger)."""
    from airflow.triggers.base import BaseEventTrigger
    from txn_broker_airflow.triggers.committed_records import CommittedRecordsEventTrigger

    for key, value in backend.env.items():  # the hook's fallback: no connection defined
        monkeypatch.setenv(key, value)
    with backend.connect() as broker:
        setup_topics(broker)
        produce(broker, "gen.a", orders(0, 5))
    trigger = CommittedRecordsEventTrigger(topics=[SOURCE], group_id=GROUP, poll_interval=0.05)
    assert isinstance(trigger, BaseEventTrigger)
    classpath, kwargs = trigger.serialize()
    assert CommittedRecordsEventTrigger(**kwargs).serialize() == (classpath, kwargs)

    async def two_events() -> list[dict[str, Any]]:
        events = []
        agen = trigger.run()
        events.append((await agen.__anext__()).payload)
        with backend.connect() as broker:
            produce(broker, "gen.b", orders(5, 5))
        events.append((await asyncio.wait_for(agen.__anext__(), 30)).payload)
        await agen.aclose()
        return events

    first, second = asyncio.run(two_events())
    assert first["offsets"] >= 5 and first["event_id"] != second["event_id"]


def test_message_queue_trigger_resolves_the_txn_broker_scheme(airflow_env) -> None:  # type: ignore[no-untyped-def]
    import importlib.metadata

    from airflow.providers.common.messaging.triggers.msg_queue import MessageQueueTrigger
    from txn_broker_airflow.queues import parse_queue_uri
    from txn_broker_airflow.triggers.committed_records import CommittedRecordsEventTrigger

    assert importlib.metadata.version("apache-airflow-providers-common-messaging") == "2.1.2"
    by_scheme = MessageQueueTrigger(scheme="txn_broker", topics=[SOURCE], group_id=GROUP, poll_interval=2)
    assert isinstance(by_scheme.trigger, CommittedRecordsEventTrigger)
    classpath, kwargs = by_scheme.serialize()
    assert classpath == "txn_broker_airflow.triggers.committed_records.CommittedRecordsEventTrigger"
    assert kwargs == {"topics": [SOURCE], "group_id": GROUP, "txn_broker_conn_id": "txn_broker_default",
                      "poll_interval": 2.0}
    with pytest.warns(Warning, match="deprecated"):
        by_uri = MessageQueueTrigger(queue=f"txn_broker://other_conn/{SOURCE},more?group_id=g&poll_interval=3")
    assert by_uri.serialize()[1] == {"topics": [SOURCE, "more"], "group_id": "g", "txn_broker_conn_id": "other_conn",
                                     "poll_interval": 3.0}
    with pytest.raises(ValueError, match="group_id"):
        parse_queue_uri("txn_broker://c/t")
