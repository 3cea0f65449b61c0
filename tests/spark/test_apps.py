"""The example pipeline's stages (``spark_apps/``), in-process through ``txn_stage`` and as
Spark applications through ``spark-submit``, on generated data with duplicates, dirty rows
and aborted transactions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

import pytest
from spark_helpers import consume_all

from spark_apps import clean_orders, daily_revenue, datagen, ledger_check
from txn_broker import TopicPartition
from txn_broker.spark import txn_stage

pytestmark = [pytest.mark.spark, pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]
SPARK_SUBMIT = Path(sys.executable).with_name("spark-submit")


def clean_rows(broker) -> dict[str, dict]:  # type: ignore[no-untyped-def]
    out = consume_all(broker, "orders_clean").to_pylist()
    ids = [r["order_id"] for r in out]
    assert len(ids) == len(set(ids)), "an order appears twice in orders_clean"
    return {r["order_id"]: r for r in out}


def expected_revenue(clean: dict[str, dict]) -> dict[tuple, tuple[Decimal, int]]:
    totals: dict[tuple, list] = defaultdict(lambda: [Decimal(0), 0])
    for r in clean.values():
        key = (r["ts"].date(), r["country"], r["currency"])
        totals[key][0] += r["amount"]
        totals[key][1] += 1
    return {k: (v[0], v[1]) for k, v in totals.items()}


def revenue(broker) -> dict[tuple, tuple[Decimal, int]]:  # type: ignore[no-untyped-def]
    totals: dict[tuple, list] = defaultdict(lambda: [Decimal(0), 0])
    for r in consume_all(broker, "revenue_daily").to_pylist():
        key = (r["day"], r["country"], r["currency"])
        totals[key][0] += r["revenue"]
        totals[key][1] += r["orders"]
    return {k: (v[0], v[1]) for k, v in totals.items()}


def run_stage(spark, broker, app, tid: str, **kwargs):  # type: ignore[no-untyped-def]
    with txn_stage(spark, broker, transactional_id=tid, group_id=tid, inputs=app.INPUTS) as stage:
        app.run(spark, stage, **kwargs)
    return stage.summary


def test_orders_pipeline_in_process(spark, broker) -> None:  # type: ignore[no-untyped-def]
    first = datagen.orders(400, seed=3)
    datagen.produce_orders(broker, first, batch=150)
    s1 = run_stage(spark, broker, clean_orders, "orders.clean")
    want = datagen.expected_clean(first)
    got = clean_rows(broker)
    assert set(got) == set(want)
    for order_id, row in want.items():
        assert {k: got[order_id][k] for k in row} == row
    assert s1.records_in == len(first) and s1.records_out == len(want)

    s2 = run_stage(spark, broker, daily_revenue, "orders.revenue")
    assert revenue(broker) == expected_revenue(got)
    assert s2.records_in == len(want)

    # the next batch: only new input is read, and the totals stay exact
    more = datagen.orders(150, seed=4)
    datagen.produce_orders(broker, more)
    run_stage(spark, broker, clean_orders, "orders.clean")
    run_stage(spark, broker, daily_revenue, "orders.revenue")
    want_all = {**want, **datagen.expected_clean(more)}
    assert set(clean_rows(broker)) == set(want_all)
    assert revenue(broker) == expected_revenue(clean_rows(broker))


def test_ledger_check_sees_only_whole_committed_transfers(spark, broker) -> None:  # type: ignore[no-untyped-def]
    pairs = datagen.transfers(120, seed=5)
    datagen.produce_transfers(broker, pairs, per_transaction=10)
    # a transfer whose transaction aborted after writing only its debit: money destroyed,
    # but never committed, so read_committed must not see it
    producer = broker.producer(transactional_id="bank.broken")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("transfers", [datagen.transfers(1, seed=99)[0][0]], key="account")
    producer.flush()
    producer.abort_transaction()

    summary = run_stage(spark, broker, ledger_check, "bank.ledger")
    assert summary.outcome == "committed" and summary.records_in == 240
    [check] = consume_all(broker, "ledger_checks").to_pylist()
    assert (check["ok"], check["transfers"], check["legs"], check["total"], check["unbalanced"]) == (
        True, 120, 240, 0, 0)

    # a committed imbalance (one leg only) is caught: the stage aborts, offsets stay
    producer.begin_transaction()
    producer.send("transfers", [datagen.transfers(1, seed=100)[0][1]], key="account")
    producer.commit_transaction()
    committed = broker.committed_offsets("bank.ledger", [TopicPartition("transfers", p) for p in range(4)])
    with pytest.raises(ledger_check.LedgerImbalanceError, match="1 unbalanced transfer"):
        run_stage(spark, broker, ledger_check, "bank.ledger")
    assert broker.committed_offsets("bank.ledger", committed) == committed
    summary = run_stage(spark, broker, ledger_check, "bank.ledger", fail_on_imbalance=False)
    checks = consume_all(broker, "ledger_checks").to_pylist()
    assert [c["ok"] for c in sorted(checks, key=lambda c: c["checked_at"])] == [True, False]


def spark_submit(app: str, backend, tmp_path: Path, *args: str) -> dict:  # type: ignore[no-untyped-def]
    env = {**os.environ, **backend.env, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
           "TXN_BROKER_HOME": str(tmp_path / "home")}
    summary = tmp_path / f"{app}.json"
    cmd = [str(SPARK_SUBMIT), "--master", "local[2]", "--conf", "spark.ui.enabled=false",
           "--conf", "spark.sql.shuffle.partitions=2", str(ROOT / "spark_apps" / f"{app}.py"), *args,
           "--json", "--summary-file", str(summary)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    data = json.loads(summary.read_text())
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == data  # --json prints the same summary
    return dict(data)


@pytest.mark.slow
# PostgreSQL + S3, as in production; tests/airflow runs spark-submit on SQLite + a directory
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_stages_run_with_spark_submit(backend, broker, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    rows = datagen.orders(200, seed=7)
    datagen.produce_orders(broker, rows)
    summary = spark_submit("clean_orders", backend, tmp_path, "--transactional-id", "orders.clean",
                           "--group-id", "clean")
    want = datagen.expected_clean(rows)
    assert summary["outcome"] == "committed" and summary["records_out"] == len(want)
    assert set(clean_rows(broker)) == set(want)
    if backend.name != "sqlite":
        return  # the other applications: once is enough (same entry point, same code)
    summary = spark_submit("daily_revenue", backend, tmp_path, "--transactional-id", "orders.revenue")
    assert summary["records_in"] == len(want)
    assert revenue(broker) == expected_revenue(clean_rows(broker))
    datagen.produce_transfers(broker, datagen.transfers(30, seed=8))
    summary = spark_submit("ledger_check", backend, tmp_path, "--transactional-id", "bank.ledger")
    assert summary["records_in"] == 60
    assert [c["ok"] for c in consume_all(broker, "ledger_checks").to_pylist()] == [True]
