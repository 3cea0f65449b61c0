"""The sensors under Airflow (deferred: dag.test runs their triggers) and their triggers'
serialisation and behaviour against a real broker."""

from __future__ import annotations

import asyncio
import threading
import time

import pyarrow as pa
import pytest

pytestmark = [pytest.mark.airflow, pytest.mark.integration]

SCHEMA = pa.schema([("n", pa.int64())])


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)  # one backend: see conftest.py
def test_timeout_sensor_aborts_hung_transaction_and_records_sensor_counts_committed(
        airflow_site, backend, tmp_path) -> None:  # type: ignore[no-untyped-def]
    result = airflow_site.run_dag("txn_test_sensors", backend_env=backend.env, broker_home=tmp_path)
    assert result.state == "success", result.tail()
    sweep = result.xcom["sweep"]
    assert sweep["aborted"] == ["txn_test_sensors.hung"]
    assert sweep["sweeps"] >= 1
    assert result.xcom["wait_records"]["records"] == 5
    with backend.connect() as broker:
        hung = broker.describe_transaction("txn_test_sensors.hung")
        assert hung.state == "CompleteAbort"
        assert any("timeout" in h.reason for h in hung.history)
        offsets = broker.describe_topic("sensor_events").partitions
        assert all(p.last_stable_offset == p.high_watermark for p in offsets)
        consumer = broker.consumer(isolation_level="read_committed")
        consumer.subscribe(["sensor_events"])
        seen = consumer.poll(max_records=100).column("n").to_pylist()
        assert sorted(seen) == [0, 1, 2, 3, 4]  # the hung transaction's records never appear


def test_trigger_serialize_round_trips(airflow_env) -> None:  # type: ignore[no-untyped-def]
    from txn_broker_airflow.triggers.topic_records import TopicRecordsTrigger
    from txn_broker_airflow.triggers.transaction_timeout import TransactionTimeoutTrigger

    for trigger in (
        TopicRecordsTrigger(topics=["a", "b"], group_id="g", min_records=7, txn_broker_conn_id="c",
                            poll_interval=2.5),
        TopicRecordsTrigger(topics=["a"]),
        TransactionTimeoutTrigger(topics=["x"], expire_transactional_ids=False, txn_broker_conn_id="c",
                                  poll_interval=1),
        TransactionTimeoutTrigger(),
    ):
        classpath, kwargs = trigger.serialize()
        module, _, name = classpath.rpartition(".")
        cls = getattr(__import__(module, fromlist=[name]), name)
        assert cls is type(trigger)
        again = cls(**kwargs)
        assert again.serialize() == (classpath, kwargs)
        # what Airflow stores must survive its own serialisation
        from airflow.sdk.serde import deserialize, serialize

        assert deserialize(serialize(kwargs)) == kwargs


def _first_event(trigger, timeout: float = 30):  # type: ignore[no-untyped-def]
    async def first():  # type: ignore[no-untyped-def]
        async for event in trigger.run():
            return event.payload
        return None

    return asyncio.run(asyncio.wait_for(first(), timeout))


def test_records_trigger_waits_for_committed_records(airflow_env, backend, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from txn_broker_airflow.triggers.topic_records import TopicRecordsTrigger
    from txn_broker_airflow.waiting import committed_records_available

    for key, value in backend.env.items():
        monkeypatch.setenv(key, value)
    with backend.connect() as broker:
        broker.create_topic("trig", partitions=2, schema=SCHEMA)
        aborted = broker.producer(transactional_id="trig.aborted")
        aborted.init_transactions()
        aborted.begin_transaction()
        aborted.send("trig", [{"n": i} for i in range(10)], partition=0)
        aborted.abort_transaction()
        # 10 offsets of lag, none of them committed
        assert committed_records_available(broker, ["trig"], "readers", 1) == 0

        def commit_later() -> None:
            time.sleep(1.0)
            p = broker.producer(transactional_id="trig.late")
            p.init_transactions()
            with p.transaction():
                p.send("trig", [{"n": 100}, {"n": 101}], partition=1)

        started = time.monotonic()
        writer = threading.Thread(target=commit_later)
        writer.start()
        payload = _first_event(TopicRecordsTrigger(topics=["trig"], group_id="readers", min_records=2,
                                                   poll_interval=0.2))
        writer.join()
        assert payload == {"status": "success", "records": 2, "topics": ["trig"], "group_id": "readers"}
        assert time.monotonic() - started >= 1.0


def test_timeout_trigger_is_safe_to_run_twice(airflow_env, backend, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from txn_broker_airflow.triggers.transaction_timeout import TransactionTimeoutTrigger

    for key, value in backend.env.items():
        monkeypatch.setenv(key, value)
    with backend.connect() as broker:
        broker.create_topic("hung", partitions=1, schema=SCHEMA)
        p = broker.producer(transactional_id="hung.writer", transaction_timeout_ms=500)
        p.init_transactions()
        p.begin_transaction()
        p.send("hung", [{"n": 1}])
        p.flush()
        first = _first_event(TransactionTimeoutTrigger(topics=["hung"], poll_interval=0.2))
        second = _first_event(TransactionTimeoutTrigger(topics=["hung"], poll_interval=0.2))
        assert first["status"] == "success" and first["aborted"] == ["hung.writer"]
        assert second == {"status": "success", "aborted": [], "completed": [], "expired_ids": [],
                          "producer_states_removed": 0, "sweeps": 1}
        assert broker.describe_transaction("hung.writer").state == "CompleteAbort"
        from txn_broker.errors import ProducerFencedError

        with pytest.raises(ProducerFencedError):  # the hung producer, woken up, is fenced
            p.commit_transaction()
