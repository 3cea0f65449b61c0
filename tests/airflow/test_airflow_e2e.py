"""End to end: a real Airflow scheduler (LocalExecutor), dag-processor and api-server run
``orders_pipeline`` from ``airflow dags trigger`` to success, on a SQLite metadata
database (Airflow 3 accepts LocalExecutor with SQLite; the api-server is needed because
Airflow 3 task processes report to its Execution API). The UI's connection form lists
the ``txn_broker`` connection type.

In the same Airflow: ``txn_test_iceberg_producer`` ingests into an ``iceberg.enabled`` topic
and ``txn_test_iceberg_consumer``, scheduled on that topic's table Asset, runs after it and
finds the ingested rows in the table. OpenLineage runs in the provider's default mode (a
forked child per event, docs/observability.md): the ingest's and the Spark stage's events
arrive with their transaction facets."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest
import sqlalchemy as sa
from airflow_harness import AirflowServices, clean_environment, link_dags, site_settings

pytestmark = [pytest.mark.airflow, pytest.mark.e2e, pytest.mark.spark, pytest.mark.slow]

DAG_ID = "orders_pipeline"
PRODUCER, CONSUMER = "txn_test_iceberg_producer", "txn_test_iceberg_consumer"
ICEBERG_DAGS = Path(__file__).resolve().parent / "dag_files" / "txn_test_iceberg_producer.py"
ROWS = ["o1", "o2", "o3", "o4"]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_scheduler_runs_orders_pipeline(backend, tmp_path) -> None:  # type: ignore[no-untyped-def]
    home = tmp_path / "airflow"
    dags = home / "dags"
    link_dags(dags, include_test_dags=False)
    (dags / ICEBERG_DAGS.name).symlink_to(ICEBERG_DAGS)
    csv = tmp_path / "iceberg_orders.csv"
    csv.write_text("order_id,amount,day\n" + "".join(f"{o},1.5,2024-01-01\n" for o in ROWS))
    lineage = tmp_path / "lineage.jsonl"
    env = {
        **site_settings(home, dags, f"sqlite:///{home / 'airflow.db'}"),
        **backend.env,
        "TXN_BROKER_HOME": str(tmp_path / "broker_home"),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps({"type": "file", "log_file_path": str(lineage),
                                                       "append": True}),
        "AIRFLOW__OPENLINEAGE__NAMESPACE": "txn-broker-tests",
    }
    services = AirflowServices(home, {**clean_environment(), **env})
    services.start()
    try:
        services.wait_for("the dag-processor to parse the DAGs", lambda: len(services.query(
            "SELECT dag_id FROM dag WHERE dag_id IN (:a, :b, :c)", a=DAG_ID, b=PRODUCER, c=CONSUMER)) == 3,
            timeout=180)
        for dag_id in (DAG_ID, PRODUCER, CONSUMER):
            services.cli("dags", "unpause", dag_id)
        services.cli("dags", "trigger", DAG_ID, "--conf", json.dumps({"rows": 200}))
        services.cli("dags", "trigger", PRODUCER, "--conf", json.dumps({"csv": str(csv)}))
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

        # the table's Asset: the consumer ran after the producer's run and read its rows
        consumed = services.wait_for(f"{CONSUMER} to run", lambda: next(
            (r for r in services.query("SELECT state, run_type FROM dag_run WHERE dag_id = :d", d=CONSUMER)
             if r.state in ("success", "failed")), None), timeout=180, interval=2)
        assert (consumed.state, consumed.run_type) == ("success", "asset_triggered"), services.log_tail("scheduler")
        (value,) = [r.value for r in services.query(
            "SELECT value FROM xcom WHERE dag_id = :d AND key = 'return_value'", d=CONSUMER)]
        read = json.loads(value) if isinstance(value, str) else value
        table_uri = "txn-iceberg://txn_broker_default/test_iceberg_orders"
        assert read == {"order_ids": ROWS, "triggered_by": [table_uri]}
        (ingested,) = [r.value for r in services.query(
            "SELECT value FROM xcom WHERE dag_id = :d AND key = 'return_value'", d=PRODUCER)]
        ingested = json.loads(ingested) if isinstance(ingested, str) else ingested
        assert [(t["topic"], t["rows"]) for t in ingested["iceberg"]] == [("test_iceberg_orders", len(ROWS))]

        # OpenLineage in the provider's default fork mode, under a real executor
        emitted = [json.loads(line) for line in lineage.read_text().splitlines() if line.strip()]
        kinds = {(e["job"]["name"], e["eventType"]) for e in emitted}
        for job in (f"{PRODUCER}.ingest", f"{DAG_ID}.daily_revenue"):
            assert {(job, "START"), (job, "COMPLETE")} <= kinds, sorted(kinds)
            complete = next(e for e in emitted if (e["job"]["name"], e["eventType"]) == (job, "COMPLETE"))
            assert complete["run"]["facets"]["txnBroker_transaction"]["state"] == "CompleteCommit"

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
