"""``txn_broker_maintenance`` under dag.test: the sweep aborts a hung transaction (it defers
until the transaction is past its timeout), gc then purges the aborted segments, committed
data is untouched, and a topic with iceberg.enabled is published to its table. Run twice:
the second run finds nothing to do."""

from __future__ import annotations

import pyarrow as pa
import pytest

pytestmark = [pytest.mark.airflow, pytest.mark.integration]

SCHEMA = pa.schema([("n", pa.int64())])


def committed(broker) -> list[int]:  # type: ignore[no-untyped-def]
    consumer = broker.consumer(isolation_level="read_committed")
    consumer.subscribe(["kept"])
    values: list[int] = []
    while (batch := consumer.poll(max_records=1000)).num_rows:
        values += batch.column("n").to_pylist()
    consumer.close()
    return sorted(values)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # one backend: see conftest.py
def test_maintenance_dag_sweeps_and_collects(airflow_site, backend, tmp_path) -> None:  # type: ignore[no-untyped-def]
    with backend.connect() as broker:
        broker.create_topic("kept", partitions=2, schema=SCHEMA)
        broker.create_topic("lake", partitions=1, schema=SCHEMA, config={"iceberg.enabled": "true"})
        good = broker.producer(transactional_id="maint.good")
        good.init_transactions()
        with good.transaction():
            good.send("kept", [{"n": i} for i in range(10)], key=None)
            good.send("lake", [{"n": i} for i in range(3)], partition=0)
        aborted = broker.producer(transactional_id="maint.aborted")
        aborted.init_transactions()
        aborted.begin_transaction()
        aborted.send("kept", [{"n": 100 + i} for i in range(5)], partition=0)
        aborted.abort_transaction()
        hung = broker.producer(transactional_id="maint.hung", transaction_timeout_ms=1000)
        hung.init_transactions()
        hung.begin_transaction()
        hung.send("kept", [{"n": 200 + i} for i in range(5)], partition=1)
        hung.flush()

        result = airflow_site.run_dag("txn_broker_maintenance", backend_env=backend.env, broker_home=tmp_path)
        assert result.state == "success", result.tail()
        assert result.xcom["sweep"]["aborted"] == ["maint.hung"]
        gc = result.xcom["collect_garbage"]
        assert gc["dry_run"] is False
        assert gc["aborted_segments"] == 1  # the hung transaction's (the aborted one never flushed)
        assert gc["objects_waiting"] == 1  # deleted by a run after gc's delete delay
        assert "purged 1 aborted segments" in result.xcom["report"]
        assert [(p["table"], p["rows"]) for p in result.xcom["publish_iceberg"]] == [("txn_broker.lake", 3)]
        assert broker.iceberg_table("lake").scan().to_arrow().column("n").to_pylist() == [0, 1, 2]

        assert broker.describe_transaction("maint.hung").state == "CompleteAbort"
        assert all(p.last_stable_offset == p.high_watermark for p in broker.describe_topic("kept").partitions)
        assert committed(broker) == list(range(10))
        from txn_broker.errors import ProducerFencedError

        with pytest.raises(ProducerFencedError):
            hung.commit_transaction()

        again = airflow_site.run_dag("txn_broker_maintenance", backend_env=backend.env, broker_home=tmp_path)
        assert again.state == "success", again.tail()
        assert again.xcom["sweep"]["aborted"] == [] and again.xcom["collect_garbage"]["aborted_segments"] == 0
        assert [p["rows"] for p in again.xcom["publish_iceberg"]] == [0]
        assert committed(broker) == list(range(10))
