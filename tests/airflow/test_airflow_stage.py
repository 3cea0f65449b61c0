"""TransactionalSparkOperator under Airflow's retries and zombies.

* Retry: the stage fails after its output was written into the transaction; Airflow
  retries it. The output holds every input record exactly once and the failed try's
  records are never visible to read_committed readers.
* Zombie: two instances of the same task (same transactional id) run at once: the first
  is paused after writing, the second runs to its commit, then the first resumes. The
  first is fenced (its commit fails), and the output is exactly once.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.integration]

TID = "txn_test_stage.copy"
IN_SCHEMA = pa.schema([("n", pa.int64()), ("label", pa.string())])
OUT_SCHEMA = pa.schema([("n", pa.int64()), ("doubled", pa.int64()), ("label", pa.string())])
N = 120


def prepare(broker) -> None:  # type: ignore[no-untyped-def]
    broker.create_topic("stage_in", partitions=3, schema=IN_SCHEMA)
    broker.create_topic("stage_out", partitions=2, schema=OUT_SCHEMA)
    producer = broker.producer(transactional_id="test.input")
    producer.init_transactions()
    with producer.transaction():
        producer.send("stage_in", [{"n": i, "label": f"r{i}"} for i in range(N)], key="label")


def committed_output(broker) -> list[int]:  # type: ignore[no-untyped-def]
    consumer = broker.consumer(isolation_level="read_committed")
    consumer.subscribe(["stage_out"])
    values: list[int] = []
    while (batch := consumer.poll(max_records=10_000)).num_rows:
        values += batch.column("n").to_pylist()
    consumer.close()
    return values


def high_watermarks(broker, topic: str) -> int:  # type: ignore[no-untyped-def]
    return sum(p.high_watermark for p in broker.describe_topic(topic).partitions)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # one backend: see conftest.py
def test_retried_stage_output_is_exactly_once(airflow_site, backend, tmp_path) -> None:  # type: ignore[no-untyped-def]
    with backend.connect() as broker:
        prepare(broker)
    result = airflow_site.run_dag("txn_test_stage", backend_env=backend.env, broker_home=tmp_path,
                                  extra_env={"TXN_TEST_FAIL_FIRST_TRY": "1"})
    assert result.state == "success", result.tail()
    assert result.tasks["copy"]["try_number"] == 2
    assert "injected: the stage failed after writing its output" in result.output
    summary = result.xcom["copy"]
    assert summary["transactional_id"] == TID
    with backend.connect() as broker:
        assert sorted(committed_output(broker)) == list(range(N))
        # the failed try did write (its records are in the log), but they were aborted
        assert high_watermarks(broker, "stage_out") == 2 * N
        txn = broker.describe_transaction(TID)
        outcomes = [t["outcome"] for t in txn.transactions]
        assert outcomes[:2] == ["COMMIT", "ABORT"]  # newest first
        assert summary["producer_epoch"] == txn.producer_epoch
        group = broker.describe_group(TID)
        assert group.lag == 0 and sum(p.committed_offset for p in group.partitions) == N


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)  # one backend: see conftest.py
def test_zombie_is_fenced_and_output_is_exactly_once(airflow_site, backend, tmp_path) -> None:  # type: ignore[no-untyped-def]
    with backend.connect() as broker:
        prepare(broker)
    pause = tmp_path / "pause"
    pause.mkdir()
    env = airflow_site.environment(backend.env, tmp_path, TXN_TEST_PAUSE_DIR=str(pause))
    zombie = airflow_site.popen_dag("txn_test_stage", env=env, log=tmp_path / "zombie.log")
    try:
        deadline = time.monotonic() + 240
        while not (pause / "reached").exists():
            assert zombie.poll() is None, (tmp_path / "zombie.log").read_text()[-5000:]
            assert time.monotonic() < deadline, "the first instance never reached its pause"
            time.sleep(0.2)
        with backend.connect() as broker:
            open_txn = broker.describe_transaction(TID)
            assert open_txn.state == "Ongoing"
            zombie_epoch = open_txn.producer_epoch
        # the same task again, while the first instance still holds its transaction open
        second = airflow_site.run_dag("txn_test_stage", backend_env=backend.env, broker_home=tmp_path)
        assert second.state == "success", second.tail()
        assert second.xcom["copy"]["producer_epoch"] > zombie_epoch
        (pause / "release").write_text("go")
        assert zombie.wait(240) == 0
    finally:
        if zombie.poll() is None:
            zombie.kill()
            zombie.wait(30)
    log = Path(tmp_path / "zombie.log").read_text()
    # the zombie's commit was refused (InvalidProducerEpochError is a ProducerFencedError)
    assert "stage txn_test_stage.copy: fenced" in log
    assert "InvalidProducerEpochError" in log or "ProducerFencedError" in log
    zombie_result = json.loads(next(ln for ln in reversed(log.splitlines()) if ln.startswith("DAG_RESULT "))[11:])
    # Airflow retried the fenced try: the new try found nothing left to read
    assert zombie_result["tasks"]["copy"]["try_number"] == 2
    assert zombie_result["xcom"]["copy"]["records_in"] == 0 and zombie_result["xcom"]["copy"]["records_out"] == 0
    with backend.connect() as broker:
        assert sorted(committed_output(broker)) == list(range(N))
        txn = broker.describe_transaction(TID)
        reasons = " ".join(h.reason for h in txn.history)
        assert "fence" in reasons


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_stage_through_spark_submit(airflow_site, backend, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """deploy="spark-submit": the driver is started by the Spark provider's SparkSubmitHook
    (local master here), gets the broker from its environment, and returns its summary."""
    with backend.connect() as broker:
        prepare(broker)
    spark = json.dumps({"conn_type": "spark", "host": "local[2]"})
    bin_dir = str(Path(sys.executable).parent)  # spark-submit is installed with pyspark
    result = airflow_site.run_dag("txn_test_stage", backend_env=backend.env, broker_home=tmp_path,
                                  extra_env={"TXN_TEST_DEPLOY": "spark-submit", "AIRFLOW_CONN_TXN_TEST_SPARK": spark,
                                             "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"})
    assert result.state == "success", result.tail()
    assert "Spark-Submit cmd" in result.output
    summary = result.xcom["copy"]
    assert summary["outcome"] == "committed" and summary["records_in"] == N and summary["records_out"] == N
    with backend.connect() as broker:
        assert sorted(committed_output(broker)) == list(range(N))
