"""The DAG files and operators as Airflow's dag-processor sees them: they parse without
touching the broker (no I/O at parse time or in operator constructors), declare their
outputs as Assets, and derive stable transactional ids."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = [pytest.mark.airflow]

REPO = Path(__file__).resolve().parents[2]


def test_dag_files_parse_without_touching_the_broker(airflow_env, monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    # a broker that cannot be reached, and an embedded home that must not be created
    monkeypatch.setenv("TXN_BROKER_DATABASE_URL", "postgresql+psycopg2://u:p@127.0.0.1:9/nothing")
    monkeypatch.setenv("TXN_BROKER_HOME", str(tmp_path / "never_created"))
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO / "dags"))
    assert bag.import_errors == {}
    assert set(bag.dag_ids) == {"orders_pipeline", "orders_events", "bank_transfers", "txn_broker_maintenance"}
    assert not (tmp_path / "never_created").exists()

    orders = bag.get_dag("orders_pipeline")
    assert orders.max_active_runs == 1  # transactional ids are per task, shared by runs
    outlets = {t.task_id: [a.uri for a in t.outlets] for t in orders.tasks}
    prefix = "txn-topic://txn_broker_default/"
    assert outlets["ingest_orders"] == [prefix + "orders_raw"]
    assert outlets["clean_orders"] == [prefix + "orders_clean"]
    assert outlets["daily_revenue"] == [prefix + "revenue_daily"]
    assert [t.task_id for t in orders.topological_sort()] == [
        "setup_topics", "generate_orders", "ingest_orders", "clean_orders", "daily_revenue", "load_revenue"]
    stages = [orders.get_task("clean_orders"), orders.get_task("daily_revenue")]
    assert all(Path(t.application).is_file() for t in stages)
    assert all(t.retries >= 1 for t in orders.tasks)
    assert bag.get_dag("bank_transfers").get_task("check_ledger").inputs == ["transfers"]

    events = bag.get_dag("orders_events")  # event-driven: scheduled on the committed-records asset
    assert events.max_active_runs == 1
    assert [t.task_id for t in events.tasks] == ["accept_orders"]
    assert [a.uri for a in events.get_task("accept_orders").outlets] == [prefix + "orders_accepted"]


def test_default_transactional_ids() -> None:
    from txn_broker_airflow.ids import default_transactional_id

    assert default_transactional_id("orders_pipeline", "clean_orders") == "orders_pipeline.clean_orders"
    assert default_transactional_id("d", "t", -1) == "d.t"
    assert default_transactional_id("d", "t", 0) == "d.t.0"  # mapped: one id per map index
    assert default_transactional_id("d", "t", 7) == "d.t.7"
    long = default_transactional_id("d" * 200, "t" * 100)
    assert len(long) <= 249 and long == default_transactional_id("d" * 200, "t" * 100)  # stable
    assert long != default_transactional_id("d" * 200, "t" * 99 + "u")


def test_operators_refuse_bad_arguments_at_parse_time() -> None:
    from txn_broker_airflow.operators.produce import ProduceToTopicOperator
    from txn_broker_airflow.operators.topic_to_postgres import TopicToPostgresOperator
    from txn_broker_airflow.operators.transactional_spark import TransactionalSparkOperator

    with pytest.raises(ValueError, match="exactly one"):
        ProduceToTopicOperator(task_id="p", topic="t")
    with pytest.raises(ValueError, match="dotted path"):
        ProduceToTopicOperator(task_id="p", topic="t", python_callable=print)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="deploy"):
        TransactionalSparkOperator(task_id="s", application="a.py", inputs=["i"], outputs=["o"], deploy="yarn")
    with pytest.raises(ValueError, match="batch_records"):
        TopicToPostgresOperator(task_id="l", topic="t", table="x", batch_records=0)
