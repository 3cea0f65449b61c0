"""ProduceToTopicOperator and TopicToPostgresOperator under Airflow: each task fails right
after its commit on the first try and Airflow retries it; the topic and the warehouse
table still hold every record exactly once. On the postgres backend the warehouse is a
real PostgreSQL database; on sqlite it is the demo's SQLite fallback."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa

pytestmark = [pytest.mark.airflow, pytest.mark.integration]

ROWS = [("o1", 10.5, "2024-01-01"), ("o2", 3.0, "2024-01-01"), ("o3", 7.25, "2024-01-02"),
        ("o4", 1.0, "2024-01-02"), ("o5", 99.0, "2024-01-03")]


def write_csv(path: Path, rows: list[tuple[str, float, str]]) -> Path:
    # exactly the topic's columns: a column the topic does not have fails the task (the
    # one reader's rule, tests/unit/test_record_files.py)
    lines = ["order_id,amount,day"] + [f"{o},{a},{d}" for o, a, d in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def read_topic(broker, topic: str) -> list[str]:  # type: ignore[no-untyped-def]
    consumer = broker.consumer(isolation_level="read_committed")
    consumer.subscribe([topic])
    ids: list[str] = []
    while (batch := consumer.poll(max_records=1000)).num_rows:
        ids += batch.column("order_id").to_pylist()
    consumer.close()
    return ids


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)  # one backend: see conftest.py
def test_retried_ingest_and_load_are_exactly_once(airflow_site, backend, tmp_path, request) -> None:  # type: ignore[no-untyped-def]
    csv = write_csv(tmp_path / "orders.csv", ROWS)
    env = {"TXN_TEST_CRASH_AFTER_COMMIT": "1"}
    if backend.name == "postgres":
        pg = request.getfixturevalue("pg_server")
        warehouse = pg.new_database(f"wh_{uuid.uuid4().hex[:10]}")
        env["TXN_BROKER_WAREHOUSE_URL"] = warehouse
    else:
        warehouse = f"sqlite:///{tmp_path / 'home' / 'warehouse.db'}"

    result = airflow_site.run_dag("txn_test_ingest_load", backend_env=backend.env,
                                  broker_home=tmp_path / "home", extra_env=env, conf={"csv": str(csv)})
    assert result.state == "success", result.tail()
    # both tasks failed once after committing, and were retried
    assert result.tasks["ingest"]["try_number"] == 2 and result.tasks["load"]["try_number"] == 2
    assert result.xcom["ingest"]["outcome"] == "already_ingested"
    assert result.xcom["load"]["rows_loaded"] == 0
    assert result.xcom["load"]["target_is_fallback_sqlite"] is (backend.name == "sqlite")

    with backend.connect() as broker:
        assert sorted(read_topic(broker, "test_orders")) == [r[0] for r in ROWS]
        # the load mirrored its offsets to the broker group: nothing left to load
        assert broker.describe_group("txn_test_ingest_load.load").lag == 0
    engine = sa.create_engine(warehouse)
    try:
        with engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT order_id, amount, day FROM test_orders ORDER BY order_id")).all()
            offsets = conn.execute(sa.text("SELECT SUM(next_offset) FROM txn_broker_sink_offsets")).scalar()
        assert [tuple(r) for r in rows] == ROWS
        assert offsets == len(ROWS)
    finally:
        engine.dispose()

    # a glob over the old file and a new one: only the new file is ingested, and loaded once
    more = [("o6", 5.0, "2024-01-04"), ("o7", 6.0, "2024-01-04")]
    write_csv(tmp_path / "orders2.csv", more)
    again = airflow_site.run_dag("txn_test_ingest_load", backend_env=backend.env, broker_home=tmp_path / "home",
                                 conf={"csv": str(tmp_path / "orders*.csv")},
                                 extra_env={k: v for k, v in env.items() if k != "TXN_TEST_CRASH_AFTER_COMMIT"})
    assert again.state == "success", again.tail()
    assert again.xcom["ingest"]["outcome"] == "committed"
    assert again.xcom["ingest"]["skipped"] == [str(csv)]
    assert again.xcom["ingest"]["records_out"] == 2 and again.xcom["load"]["rows_loaded"] == 2
    engine = sa.create_engine(warehouse)
    try:
        with engine.connect() as conn:
            ids = conn.execute(sa.text("SELECT order_id FROM test_orders ORDER BY order_id")).scalars().all()
        assert ids == [r[0] for r in ROWS + more]
    finally:
        engine.dispose()
