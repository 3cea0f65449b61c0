"""End to end: a real Airflow scheduler (LocalExecutor), dag-processor and api-server run
``orders_pipeline`` from ``airflow dags trigger`` to success, on a SQLite metadata
database (Airflow 3 accepts LocalExecutor with SQLite; the api-server is needed because
Airflow 3 task processes report to its Execution API). The UI's connection form lists
the ``txn_broker`` connection type."""

from __future__ import annotations

import json
import urllib.request

import pytest
import sqlalchemy as sa
from airflow_harness import AirflowServices, clean_environment, link_dags, site_settings

pytestmark = [pytest.mark.airflow, pytest.mark.e2e, pytest.mark.spark, pytest.mark.slow]

DAG_ID = "orders_pipeline"


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_scheduler_runs_orders_pipeline(backend, tmp_path) -> None:  # type: ignore[no-untyped-def]
    home = tmp_path / "airflow"
    dags = home / "dags"
    link_dags(dags, include_test_dags=False)
    env = {
        **site_settings(home, dags, f"sqlite:///{home / 'airflow.db'}"),
        **backend.env,
        "TXN_BROKER_HOME": str(tmp_path / "broker_home"),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
    }
    services = AirflowServices(home, {**clean_environment(), **env})
    services.start()
    try:
        services.wait_for(f"the dag-processor to parse {DAG_ID}", lambda: services.query(
            "SELECT dag_id FROM dag WHERE dag_id = :d", d=DAG_ID), timeout=180)
        services.cli("dags", "unpause", DAG_ID)
        services.cli("dags", "trigger", DAG_ID, "--conf", json.dumps({"rows": 200}))
        state = services.wait_for(f"{DAG_ID} to finish", lambda: next(
            (r.state for r in services.query("SELECT state FROM dag_run WHERE dag_id = :d", d=DAG_ID)
             if r.state in ("success", "failed")), None), timeout=420, interval=2)
        tasks = services.query("SELECT task_id, state, try_number FROM task_instance WHERE dag_id = :d",
                               d=DAG_ID)
        assert state == "success", f"{tasks}\n{services.log_tail('scheduler', 150)}"
        assert {r.task_id: r.state for r in tasks} == dict.fromkeys(
            ["setup_topics", "generate_orders", "ingest_orders", "clean_orders", "daily_revenue", "load_revenue"],
            "success")
        # the stages' outputs are Assets: downstream DAGs can be scheduled on them
        events = {r.uri for r in services.query(
            "SELECT a.uri FROM asset_event e JOIN asset a ON a.id = e.asset_id")}
        assert {"txn-topic://txn_broker_default/orders_raw", "txn-topic://txn_broker_default/orders_clean",
                "txn-topic://txn_broker_default/revenue_daily"} <= events

        # the UI's connection form knows the connection type (declared by the provider)
        url = f"http://127.0.0.1:{services.api_port}/ui/connections/hook_meta"
        with urllib.request.urlopen(url, timeout=30) as response:
            hooks = json.loads(response.read())
        ours = next(h for h in hooks if h["connection_type"] == "txn_broker")
        assert "database_url" in ours["extra_fields"]
        assert ours["standard_fields"]["password"]["hidden"] is True
    finally:
        services.stop()

    with backend.connect() as broker:
        clean = sum(p.last_stable_offset for p in broker.describe_topic("orders_clean").partitions)
        revenue = sum(p.last_stable_offset for p in broker.describe_topic("revenue_daily").partitions)
        assert clean > 0 and revenue > 0
    warehouse = sa.create_engine(f"sqlite:///{tmp_path / 'broker_home' / 'warehouse.db'}")
    try:
        with warehouse.connect() as conn:
            assert conn.execute(sa.text("SELECT COUNT(*) FROM revenue_daily")).scalar() == revenue
    finally:
        warehouse.dispose()
