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

    broker.ensure_topics(pipeline_topics(REPO / "spark_apps", [SOURCE, OUTPUT]))


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


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_trigger_announces_again_what_no_run_committed(backend, airflow_env) -> None:  # type: ignore[no-untyped-def]
    """An event Airflow's scheduler left unconsumed (the trigger's "Re-announcing"): after
    ``reannounce_after`` seconds with no new event and the group's offsets unchanged, the
    ranges still above them are announced again, once per quiet period; not while a run's
    commits move the offsets, never with ``reannounce_after=0``."""
    import time

    from txn_broker_airflow.event_ranges import ranges_from_payload
    from txn_broker_airflow.triggers.committed_records import CommittedRecordsEventTrigger

    with pytest.raises(ValueError, match="reannounce_after"):
        CommittedRecordsEventTrigger(topics=[SOURCE], group_id=GROUP, reannounce_after=-1)
    quiet = 0.4
    with backend.connect() as broker:
        setup_topics(broker)
        trigger = CommittedRecordsEventTrigger(topics=[SOURCE], group_id=GROUP, reannounce_after=quiet)
        never = CommittedRecordsEventTrigger(topics=[SOURCE], group_id=GROUP, reannounce_after=0)
        produce(broker, "gen.a", orders(0, 20))
        first = trigger.poll_once(broker)
        assert first is not None and never.poll_once(broker) is not None
        produce(broker, "gen.b", orders(20, 20))
        second = trigger.poll_once(broker)
        assert second is not None and never.poll_once(broker) is not None
        # the scheduler's run consumed only the first event
        assert process(broker, [first])["records_in"] == 20

        assert trigger.poll_once(broker) is None  # the quiet period begins
        assert trigger.poll_once(broker) is None
        time.sleep(quiet + 0.1)
        again = trigger.poll_once(broker)
        assert again is not None
        _, left = ranges_from_payload(again)
        _, announced = ranges_from_payload(second)
        assert {(r.tp, r.end) for r in left} == {(r.tp, r.end) for r in announced}
        assert trigger.poll_once(broker) is None  # once per quiet period: a new one begins
        time.sleep(quiet + 0.1)
        assert trigger.poll_once(broker) is not None  # still nothing committed: announced again
        time.sleep(quiet + 0.1)
        assert never.poll_once(broker) is None  # turned off

        out = process(broker, [again])
        assert out["outcome"] == "committed" and out["records_in"] == 20
        time.sleep(quiet + 0.1)
        assert trigger.poll_once(broker) is None  # the offsets moved: a new quiet period
        time.sleep(quiet + 0.1)
        assert trigger.poll_once(broker) is None  # everything announced is committed

        # while runs keep committing, nothing is announced again
        produce(broker, "gen.c", orders(40, 10))
        produce_more = trigger.poll_once(broker)
        assert produce_more is not None
        produce(broker, "gen.d", orders(50, 10))
        assert trigger.poll_once(broker) is not None
        assert trigger.poll_once(broker) is None
        process(broker, [produce_more])
        time.sleep(quiet + 0.1)
        assert trigger.poll_once(broker) is None  # the offsets moved since the quiet period began


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
                      "poll_interval": 2.0, "reannounce_after": 60.0}
    with pytest.warns(Warning, match="deprecated"):
        by_uri = MessageQueueTrigger(
            queue=f"txn_broker://other_conn/{SOURCE},more?group_id=g&poll_interval=3&reannounce_after=0")
    assert by_uri.serialize()[1] == {"topics": [SOURCE, "more"], "group_id": "g", "txn_broker_conn_id": "other_conn",
                                     "poll_interval": 3.0, "reannounce_after": 0.0}
    with pytest.raises(ValueError, match="group_id"):
        parse_queue_uri("txn_broker://c/t")


# -- end to end: a real scheduler, dag-processor, triggerer and api-server ---------------


def committed_input(broker: Any) -> dict[tuple[int, int], str]:
    """(partition, offset) -> order id of every committed orders_raw record."""
    from txn_broker import TopicPartition

    consumer = broker.consumer(isolation_level="read_committed")
    try:
        consumer.assign([TopicPartition(SOURCE, p.partition) for p in broker.describe_topic(SOURCE).partitions])
        consumer.seek_to_beginning()
        found: dict[tuple[int, int], str] = {}
        while True:
            batch = consumer.poll(max_records=10_000)
            if not batch.num_rows:
                return found
            for row in batch.select(["_partition", "_offset", "order_id"]).to_pylist():
                found[(row["_partition"], row["_offset"])] = row["order_id"]
    finally:
        consumer.close()


def as_json(value: Any) -> Any:
    """A JSON column's value: text on SQLite, already decoded on PostgreSQL."""
    import json

    return json.loads(value) if isinstance(value, str | bytes) else value


def caught_up(broker: Any) -> bool:
    """The group's committed offsets reached the last stable offset of every partition."""
    from txn_broker import TopicPartition

    tps = [TopicPartition(SOURCE, p.partition) for p in broker.describe_topic(SOURCE).partitions]
    stable = broker.end_offsets(tps)
    committed = broker.committed_offsets(GROUP, tps)
    return all((committed[tp] or 0) >= stable[tp] for tp in tps)


@pytest.mark.e2e
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_scheduler_runs_orders_events_exactly_once_across_a_triggerer_kill(backend, pg_server, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import time

    from airflow_harness import REPO, AirflowServices, clean_environment, site_settings

    from txn_broker import TopicPartition

    home = tmp_path / "airflow"
    dags = home / "dags"
    dags.mkdir(parents=True)
    (dags / "orders_events.py").symlink_to(REPO / "dags" / "orders_events.py")
    # Airflow's metadata database on PostgreSQL: five Airflow processes write to it at once,
    # more than SQLite's one writer serves without timeouts on a loaded machine
    env = {
        **site_settings(home, dags, pg_server.new_database()),
        **backend.env,
        "TXN_BROKER_HOME": str(tmp_path / "broker_home"),
        "TXN_BROKER_EVENTS_POLL_INTERVAL": "1",
        # an event Airflow's scheduler leaves unconsumed (the trigger's "Re-announcing") is
        # announced again after 10 s, within the waits below
        "TXN_BROKER_EVENTS_REANNOUNCE_AFTER": "10",
        "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
        "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "1",
        # the restarted triggerer takes over the killed one's triggers 5 s after its last heartbeat
        "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": "5",
        # a task process lost on the way (e.g. its start call timed out) is failed and retried
        # after 60 s instead of 5 minutes; the retry is exactly once like any other
        "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "60",
    }
    services = AirflowServices(home, {**clean_environment(), **env},
                               components=("api-server", "scheduler", "dag-processor", "triggerer"))
    # the DAG runs as soon as it is parsed: its watcher starts without an `airflow dags unpause`
    services.env["AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION"] = "False"
    dag_id = "orders_events"

    def runs() -> list[Any]:
        return services.query("SELECT run_id, state FROM dag_run WHERE dag_id = :d ORDER BY id", d=dag_id)

    def watcher_running() -> bool:
        return bool(services.query(
            "SELECT t.id FROM trigger t JOIN asset_watcher w ON w.trigger_id = t.id "
            "WHERE t.classpath LIKE '%CommittedRecordsEventTrigger' AND t.triggerer_id IS NOT NULL"))

    def batch(broker: Any, n: int, first: int) -> None:
        produce(broker, f"gen.{first}", orders(first, n))

    t0 = time.monotonic()

    def phase(name: str) -> None:
        print(f"[{time.monotonic() - t0:6.1f}s] {name}")

    services.start()
    phase("airflow db migrated, components started")
    try:
        with backend.connect() as broker:
            setup_topics(broker)
            services.wait_for(f"the dag-processor to parse {dag_id}", lambda: services.query(
                "SELECT dag_id FROM dag WHERE dag_id = :d", d=dag_id), timeout=120)
            phase("DAG parsed")
            services.wait_for("the triggerer to run the asset watcher", watcher_running, timeout=90)
            phase("watcher running")

            # an aborted transaction and an open one (all four partitions): no run
            produce(broker, "gen.aborted", orders(0, 50), "abort")
            open_producer = produce(broker, "gen.open", orders(50, 50), "open")
            time.sleep(4)  # four polls of the watcher
            assert runs() == [], runs()
            open_producer.abort_transaction()  # its records never become readable
            open_producer.close()
            time.sleep(1.5)
            assert runs() == [], runs()

            # committed batches start runs; the triggerer is SIGKILLed mid-stream
            batch(broker, 20, 1000)
            services.wait_for("the first run", lambda: len(runs()) >= 1, timeout=60)
            phase("first run created")
            batch(broker, 20, 2000)
            batch(broker, 20, 3000)
            # kill once the next event is saved, while the first run still holds its slot: the
            # restarted trigger announces again what that event announced, unless its run
            # commits first
            services.wait_for("the second event", lambda: services.query(
                "SELECT COUNT(*) FROM asset_event e JOIN asset a ON a.id = e.asset_id "
                "WHERE a.uri LIKE 'txn-committed://%'")[0][0] >= 2, timeout=30, interval=0.2)
            # a replacement triggerer is already up (as a supervisor would restart one): it
            # takes the watcher over 5 s after the killed one's last heartbeat
            killed = services.query("SELECT triggerer_id FROM trigger WHERE classpath LIKE "
                                    "'%CommittedRecordsEventTrigger'")[0].triggerer_id
            services.start_component("triggerer-2", "triggerer")
            services.kill("triggerer")
            # ranges announced (asset events) whose run has not committed them yet
            announced = {}
            for e in services.query("SELECT e.extra FROM asset_event e JOIN asset a ON a.id = e.asset_id "
                                    "WHERE a.uri LIKE 'txn-committed://%'"):
                for r in as_json(e.extra)["payload"]["ranges"]:
                    announced[r["partition"]] = max(announced.get(r["partition"], 0), r["end"])
            committed_at_kill = {tp.partition: o for tp, o in broker.committed_offsets(
                GROUP, [TopicPartition(SOURCE, p) for p in announced]).items()}
            phase(f"triggerer killed: announced ends {announced}, committed {committed_at_kill}")
            assert any((committed_at_kill[p] or 0) < end for p, end in announced.items())
            batch(broker, 20, 4000)  # produced before the replacement takes over
            services.wait_for("the replacement triggerer to take the watcher over", lambda: services.query(
                "SELECT id FROM trigger WHERE classpath LIKE '%CommittedRecordsEventTrigger' "
                "AND triggerer_id IS NOT NULL AND triggerer_id <> :k", k=killed), timeout=90)
            phase("the replacement triggerer runs the watcher")
            batch(broker, 20, 5000)
            services.wait_for("every committed record processed", lambda: caught_up(broker) and all(
                r.state in ("success", "failed") for r in runs()), timeout=150, interval=2)
            phase(f"caught up after {len(runs())} runs")
            time.sleep(3)  # a late duplicate event would start one more run: let it
            services.wait_for("the last runs to finish", lambda: all(
                r.state in ("success", "failed") for r in runs()), timeout=60, interval=2)

            rows = services.query(
                "SELECT d.run_id, d.state, x.value FROM dag_run d LEFT JOIN xcom x ON x.run_id = d.run_id "
                "AND x.dag_id = d.dag_id AND x.key = 'return_value' WHERE d.dag_id = :d ORDER BY d.id", d=dag_id)
            assert rows and all(r.state == "success" for r in rows), \
                f"{rows}\n{services.log_tail('scheduler', 100)}"
            summaries = [as_json(r.value) for r in rows]
            for s in summaries:
                phase(f"run: {s['outcome']}, in {s['records_in']}, events {len(s['event_ids'])}, "
                      f"processed {[(p['partition'], p['start'], p['end']) for p in s.get('processed', [])]}")
            assert sum(s["records_in"] for s in summaries) == 100
            # each run says which events started it; asset events carry those ids
            events = [as_json(e.extra)["payload"] for e in services.query(
                "SELECT e.extra FROM asset_event e JOIN asset a ON a.id = e.asset_id "
                "WHERE a.uri LIKE 'txn-committed://%' ORDER BY e.id")]
            event_ids = {e["event_id"] for e in events}
            assert event_ids and {i for s in summaries for i in s["event_ids"]} == event_ids
            # offsets announced more than once (only the triggerer restart can do that)
            seen: dict[int, list[tuple[int, int]]] = {}
            again = 0
            for e in events:
                for r in e["ranges"]:
                    spans = seen.setdefault(r["partition"], [])
                    again += sum(max(0, min(r["end"], b) - max(r["start"], a)) for a, b in spans)
                    spans.append((r["start"], r["end"]))
            phase(f"{len(events)} events, {again} offsets announced twice, {len(rows)} runs")

            inputs = committed_input(broker)
            out = accepted(broker)
        assert sorted(inputs.values()) == [f"o{i:06d}" for k in (1000, 2000, 3000, 4000, 5000)
                                           for i in range(k, k + 20)]
        # exactly once: every committed input record once in the output, nothing else
        assert sorted((r["source_partition"], r["source_offset"]) for r in out) == sorted(inputs)
        assert sorted(r["order_id"] for r in out) == sorted(inputs.values())
    finally:
        services.stop()
