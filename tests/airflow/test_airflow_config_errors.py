"""A new user's mistakes in connections and warehouse URLs (issue 28, findings 5 and 7):
every error is a typed txn_broker error that names the connection (or where the URL came
from) and the field, and never shows a secret; the failure listener logs one line with
the cause when it cannot reach the database, no second traceback."""

from __future__ import annotations

import json
import logging
import uuid
from types import SimpleNamespace

import pyarrow as pa
import pytest

from txn_broker.errors import DatabaseUnavailableError, InvalidConfigError, TxnBrokerError

pytestmark = [pytest.mark.airflow, pytest.mark.integration]

SECRET = "pw-" + uuid.uuid4().hex[:10]
#: nothing listens on port 1: refused at once
UNREACHABLE = f"postgresql+psycopg2://user:{SECRET}@127.0.0.1:1/db"


def set_connection(monkeypatch, conn_id: str, **extra: str) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "txn_broker", "extra": extra}))


def connect_error(conn_id: str) -> TxnBrokerError:
    from txn_broker_airflow import TxnBrokerHook

    hook = TxnBrokerHook(conn_id)
    try:
        with pytest.raises(TxnBrokerError) as caught:
            hook.get_conn()
    finally:
        hook.close()
    return caught.value


def test_bad_connection_fields_are_typed_and_named(airflow_env, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from txn_broker_airflow.errors import ConnectionFieldError

    cases = {
        "database_url": dict(database_url=f"postgresql//user:{SECRET}@db.example/warehouse"),
        "storage_url": dict(database_url=f"sqlite:///{tmp_path / 'b.db'}", storage_url=f"ftp://u:{SECRET}@host/x"),
        "settings": dict(database_url=f"sqlite:///{tmp_path / 'b.db'}", settings="{not json"),
    }
    for field, extras in cases.items():
        conn_id = f"tb_bad_{field}"
        set_connection(monkeypatch, conn_id, **extras)
        error = connect_error(conn_id)
        assert isinstance(error, ConnectionFieldError) and isinstance(error, InvalidConfigError), repr(error)
        assert (error.conn_id, error.field) == (conn_id, field)
        assert f"connection {conn_id!r}, field {field!r}" in str(error) and SECRET not in str(error)

    # a well-formed URL of a database that is not there: retriable, named, masked
    set_connection(monkeypatch, "tb_down", database_url=UNREACHABLE, settings='{"retry_budget_ms": 200}')
    error = connect_error("tb_down")
    assert isinstance(error, DatabaseUnavailableError) and error.retriable
    assert "connection 'tb_down', field 'database_url'" in str(error) and SECRET not in str(error)


def test_bad_warehouse_urls_are_typed_and_masked(airflow_env) -> None:  # type: ignore[no-untyped-def]
    from txn_broker_airflow.errors import WarehouseUnavailableError, WarehouseURLError
    from txn_broker_airflow.warehouse import open_sink, resolve_target

    with pytest.raises(WarehouseURLError) as malformed:
        resolve_target(None, f"postgresql//user:{SECRET}@db.example/warehouse")
    assert "from the task's warehouse_url" in str(malformed.value) and SECRET not in str(malformed.value)

    target = resolve_target(None, UNREACHABLE)
    try:
        with pytest.raises(WarehouseUnavailableError) as down:
            open_sink(target, "t", pa.schema([("x", pa.int64())]))
    finally:
        target.engine.dispose()
    assert down.value.retriable
    message = str(down.value)
    assert "from the task's warehouse_url" in message and "127.0.0.1" in message and SECRET not in message


def test_listener_logs_one_line_when_the_database_is_unreachable(airflow_env, monkeypatch, caplog) -> None:  # type: ignore[no-untyped-def]
    from txn_broker_airflow import ProduceToTopicOperator
    from txn_broker_airflow.listeners import failure_listener

    set_connection(monkeypatch, "tb_gone", database_url=UNREACHABLE, settings='{"retry_budget_ms": 200}')
    op = ProduceToTopicOperator(task_id="ingest", topic="t", source="/x.csv", txn_broker_conn_id="tb_gone")
    ti = SimpleNamespace(task=op, dag_id="d", task_id="ingest", map_index=-1)
    op.resolve_transactional_id({"ti": ti})
    op.remember_producer_epoch(0)
    caplog.set_level(logging.INFO)
    failure_listener.on_task_instance_failed(None, ti, RuntimeError("the task's own failure"))
    ours = [r for r in caplog.records if r.name.startswith("txn_broker_airflow.listeners")]
    assert len(ours) == 1, [r.getMessage() for r in ours]
    (record,) = ours
    assert record.exc_info is None and record.levelno == logging.WARNING
    line = record.getMessage()
    assert "\n" not in line and "Traceback" not in caplog.text
    assert "could not abort the transaction of d.ingest" in line and "DatabaseUnavailableError" in line
    assert SECRET not in caplog.text
