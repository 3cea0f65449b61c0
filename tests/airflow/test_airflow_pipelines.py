"""The example DAGs end to end with dag.test(), checked against what their input must give.

* ``orders_pipeline``: the generated export says which orders survive cleaning (computed
  without Spark); every stage's count and the revenue, in the topics and in the warehouse
  table, must match it exactly. A second run adds exactly its own new orders.
* ``bank_transfers``: every executed transfer is in ``transfers`` read_committed with both
  legs and the ledger check passes; the rejected transfers' debits are in the log (a
  read_uncommitted reader sees money vanish) but never in read_committed data.
"""

from __future__ import annotations

import uuid
from decimal import Decimal

import pytest
import sqlalchemy as sa

pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.integration, pytest.mark.slow]


def read_all(broker, topic: str, isolation_level: str = "read_committed") -> list[dict]:  # type: ignore[no-untyped-def]
    consumer = broker.consumer(isolation_level=isolation_level)
    consumer.subscribe([topic])
    rows: list[dict] = []
    while (batch := consumer.poll(max_records=10_000)).num_rows:
        rows += batch.to_pylist()
    consumer.close()
    return rows


def warehouse_url(backend, request, tmp_path) -> tuple[str, dict[str, str]]:  # type: ignore[no-untyped-def]
    """The warehouse: a real PostgreSQL database with the postgres backend, else the
    operator's SQLite fallback under the broker home."""
    if backend.name == "postgres":
        url = request.getfixturevalue("pg_server").new_database(f"wh_{uuid.uuid4().hex[:10]}")
        return url, {"TXN_BROKER_WAREHOUSE_URL": url}
    return f"sqlite:///{tmp_path / 'home' / 'warehouse.db'}", {}


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)  # one backend: see conftest.py
def test_orders_pipeline(airflow_site, backend, tmp_path, request) -> None:  # type: ignore[no-untyped-def]
    url, env = warehouse_url(backend, request, tmp_path)
    expected_orders = 0
    expected_revenue = Decimal("0")
    # a second run adds its own new orders and nothing is counted twice (once is enough
    # on the slower postgres backend: the broker calls are the same)
    results = airflow_site.run_dags("orders_pipeline", 2 if backend.name == "sqlite" else 1,
                                    backend_env=backend.env, broker_home=tmp_path / "home", extra_env=env,
                                    conf={"rows": 300}, timeout=900)
    daily_rows = 0
    for result in results:
        assert result.state == "success", result.tail()
        generated = result.xcom["generate_orders"]
        expected_orders += generated["clean_orders"]
        expected_revenue += Decimal(generated["clean_revenue"])
        assert generated["duplicates"] > 0 and generated["dirty"] > 0  # the input has trouble in it
        assert result.xcom["ingest_orders"]["records_out"] == generated["rows_written"]
        clean = result.xcom["clean_orders"]  # each run reads exactly its own new records
        assert clean["outcome"] == "committed" and clean["transactional_id"] == "orders_pipeline.clean_orders"
        assert clean["records_in"] == generated["rows_written"]
        assert clean["records_out"] == generated["clean_orders"]
        revenue = result.xcom["daily_revenue"]
        assert revenue["records_in"] == generated["clean_orders"]
        load = result.xcom["load_revenue"]
        assert load["rows_loaded"] == revenue["records_out"]
        assert load["target_is_fallback_sqlite"] is (backend.name == "sqlite")
        daily_rows += revenue["records_out"]

    with backend.connect() as broker:
        cleaned = read_all(broker, "orders_clean")
        assert len(cleaned) == expected_orders == len({r["order_id"] for r in cleaned})
        daily = read_all(broker, "revenue_daily")
        assert len(daily) == daily_rows
        assert sum(r["revenue"] for r in daily) == expected_revenue
        assert sum(r["orders"] for r in daily) == expected_orders
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            total, orders, rows = conn.execute(sa.text(
                "SELECT SUM(revenue), SUM(orders), COUNT(*) FROM revenue_daily")).one()
    finally:
        engine.dispose()
    assert Decimal(str(total)).quantize(Decimal("0.01")) == expected_revenue
    assert orders == expected_orders and rows == daily_rows


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # one backend: see conftest.py
def test_bank_transfers(airflow_site, backend, tmp_path) -> None:  # type: ignore[no-untyped-def]
    result = airflow_site.run_dag("bank_transfers", backend_env=backend.env, broker_home=tmp_path,
                                  conf={"transfers": 30}, timeout=600)
    assert result.state == "success", result.tail()
    executed = result.xcom["execute_transfers"]
    assert executed["committed"] + executed["rejected"] == 30 and executed["rejected"] > 0
    check = result.xcom["check_ledger"]
    assert check["outcome"] == "committed" and check["records_in"] == 2 * executed["committed"]
    with backend.connect() as broker:
        committed = read_all(broker, "transfers")
        assert len(committed) == 2 * executed["committed"] and sum(r["amount"] for r in committed) == 0
        legs: dict[str, list[int]] = {}
        for r in committed:
            legs.setdefault(r["transfer_id"], []).append(r["_partition"])
        assert all(len(set(p)) == 2 for p in legs.values())  # each transfer spans two partitions
        everything = read_all(broker, "transfers", "read_uncommitted")
        assert len(everything) == len(committed) + executed["rejected"]  # the aborted debits
        assert sum(r["amount"] for r in everything) < 0  # money vanishes for a read_uncommitted reader
        (ledger,) = read_all(broker, "ledger_checks")
        assert ledger["ok"] and ledger["unbalanced"] == 0 and ledger["transfers"] == executed["committed"]
