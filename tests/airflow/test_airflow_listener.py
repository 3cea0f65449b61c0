"""The failure listener aborts a failed task's open transaction at once, not after its
(10 minute) timeout; and it recognises task instances as the scheduler hands them over."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

pytestmark = [pytest.mark.airflow, pytest.mark.integration]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # one backend: see conftest.py
def test_listener_aborts_failed_tasks_transaction(airflow_site, backend, tmp_path) -> None:  # type: ignore[no-untyped-def]
    started_ms = time.time() * 1000
    result = airflow_site.run_dag("txn_test_listener", backend_env=backend.env, broker_home=tmp_path)
    assert result.state == "failed" and result.task_state("crash") == "failed", result.tail()
    assert "injected: the worker died" in result.output
    with backend.connect() as broker:
        txn = broker.describe_transaction("txn_test_listener.crash")
        assert txn.state == "CompleteAbort"
        assert txn.timeout_ms == 600_000
        abort = next(h for h in txn.history if h.to_state == "PrepareEpochFence")
        assert abort.reason == "aborted by an administrator"
        assert abort.at_ms - started_ms < 120_000  # long before the timeout
        assert txn.producer_epoch == 1  # fenced: the dead task's epoch 0 can never commit
        partitions = broker.describe_topic("listener_events").partitions
        assert partitions[0].high_watermark == 4 and partitions[0].last_stable_offset == 4
        consumer = broker.consumer(isolation_level="read_committed")
        consumer.subscribe(["listener_events"])
        assert consumer.poll(max_records=100).num_rows == 0


def _ti(task, task_id: str = "ingest", map_index: int = -1, **more):  # type: ignore[no-untyped-def]
    return SimpleNamespace(task=task, dag_id="d", task_id=task_id, map_index=map_index, **more)


def test_listener_recognises_transactional_task_instances(airflow_env) -> None:  # type: ignore[no-untyped-def]
    from txn_broker_airflow.listeners import AbortTarget, _transactional_target
    from txn_broker_airflow.operators.produce import ProduceToTopicOperator

    # in the task's process: the operator itself, which knows what its try opened
    op = ProduceToTopicOperator(task_id="ingest", topic="t", source="/x.csv", txn_broker_conn_id="mine")
    assert _transactional_target(_ti(op)) is None  # this try never started a transaction
    op.resolve_transactional_id({"ti": _ti(None)})
    assert _transactional_target(_ti(op)) == AbortTarget("d.ingest", "mine", None)
    op.remember_producer_epoch(4)
    assert _transactional_target(_ti(op)) == AbortTarget("d.ingest", "mine", 4)
    op2 = ProduceToTopicOperator(task_id="ingest", topic="t", source="/x.csv", transactional_id="custom.id")
    op2.resolve_transactional_id({"ti": _ti(None, map_index=3)})
    assert _transactional_target(_ti(op2, map_index=3)) == AbortTarget("custom.id", "txn_broker_default")
    # in the scheduler: a deserialized operator (task_type only), templates left unrendered
    ser = SimpleNamespace(task_type="TransactionalSparkOperator", transactional_id="{{ params.x }}",
                          txn_broker_conn_id="{{ var.value.c }}")
    assert _transactional_target(_ti(ser, "clean", 2)) == AbortTarget("d.clean.2", "txn_broker_default")
    # a subclass defined in a DAG file, deserialized: recognised by its template fields
    sub = SimpleNamespace(task_type="ProduceThenCrash", transactional_id=None, txn_broker_conn_id="c2")
    assert _transactional_target(_ti(sub, "i")) == AbortTarget("d.i", "c2")
    # no task at all, only the ORM row's operator name
    row = _ti(None, "t", operator="ProduceToTopicOperator")
    assert _transactional_target(row) == AbortTarget("d.t", "txn_broker_default")
    # anything else is left alone
    assert _transactional_target(_ti(SimpleNamespace(task_type="PythonOperator"), "p")) is None


def test_listener_in_the_task_process_never_aborts_a_newer_try(airflow_env, backend, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The task's own process reports the failure before its listener runs, so a retry
    may already hold the transactional id: only the failed try's epoch is aborted."""
    import pyarrow as pa
    from txn_broker_airflow.listeners import failure_listener
    from txn_broker_airflow.operators.produce import ProduceToTopicOperator

    from txn_broker.errors import ProducerFencedError

    for key, value in backend.env.items():
        monkeypatch.setenv(key, value)
    with backend.connect() as broker:
        broker.create_topic("retried", partitions=1, schema=pa.schema([("n", pa.int64())]))
        tries = []
        for _ in range(2):  # try 1 opens a transaction and dies; try 2 fences it and opens its own
            op = ProduceToTopicOperator(task_id="ingest", topic="retried", source="/x.csv")
            tid = op.resolve_transactional_id({"ti": _ti(None)})
            producer = broker.producer(transactional_id=tid)
            producer.init_transactions()
            op.remember_producer_epoch(producer.epoch)
            producer.begin_transaction()
            producer.send("retried", [{"n": 1}])
            producer.flush()
            tries.append((op, producer))
        (first, _), (second, newest) = tries
        failure_listener.on_task_instance_failed(previous_state=None, task_instance=_ti(first), error=None)
        txn = broker.describe_transaction("d.ingest")
        assert txn.state == "Ongoing" and txn.producer_epoch == newest.epoch  # the retry is untouched

        failure_listener.on_task_instance_failed(previous_state=None, task_instance=_ti(second), error=None)
        txn = broker.describe_transaction("d.ingest")
        assert txn.state == "CompleteAbort" and txn.producer_epoch == newest.epoch + 1
        with pytest.raises(ProducerFencedError):
            newest.commit_transaction()
        # the scheduler's view (no epoch): whatever is open is aborted
        late = broker.producer(transactional_id="d.ingest")
        late.init_transactions()
        late.begin_transaction()
        late.send("retried", [{"n": 2}])
        late.flush()
        row = _ti(None, operator="ProduceToTopicOperator")
        failure_listener.on_task_instance_failed(previous_state=None, task_instance=row, error=None)
        assert broker.describe_transaction("d.ingest").state == "CompleteAbort"
        consumer = broker.consumer(isolation_level="read_committed")
        consumer.subscribe(["retried"])
        assert consumer.poll(max_records=100).num_rows == 0
