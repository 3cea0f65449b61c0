"""OpenLineage from the operators, through Airflow's OpenLineage provider and
openlineage-python's file transport: a DAG run (ingest a CSV into a topic, load the topic into
a table) emits START and COMPLETE for each task, with the topic as a dataset in the broker's
namespace (schema facet from the topic's schema, output statistics), the transaction as a
run facet of the ingest, and the load's table in OpenLineage's naming of its database."""

from __future__ import annotations

import json

import pytest
from test_airflow_ingest_load import ROWS, write_csv

pytestmark = [pytest.mark.airflow, pytest.mark.integration]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # the namespace of each is unit-tested below
def test_a_dag_run_emits_lineage_with_topics_and_the_transaction(airflow_site, backend, tmp_path) -> None:  # type: ignore[no-untyped-def]
    csv = write_csv(tmp_path / "orders.csv", ROWS)
    events_file = tmp_path / "lineage.jsonl"
    transport = {"type": "file", "log_file_path": str(events_file), "append": True}
    result = airflow_site.run_dag(
        "txn_test_ingest_load", backend_env=backend.env, broker_home=tmp_path / "home", conf={"csv": str(csv)},
        extra_env={"AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(transport),
                   "AIRFLOW__OPENLINEAGE__NAMESPACE": "txn-broker-tests",
                   # emit from a thread of the task process (docs/observability.md says why)
                   "AIRFLOW__OPENLINEAGE__EXECUTE_IN_THREAD": "True"})
    assert result.state == "success", result.tail()
    events = [json.loads(line) for line in events_file.read_text().splitlines() if line.strip()]

    def event(task: str, kind: str) -> dict:
        found = [e for e in events if e["eventType"] == kind and e["job"]["name"].endswith(f".{task}")]
        assert found, (task, kind, [(e["eventType"], e["job"]["name"]) for e in events])
        return found[-1]

    namespace = f"txn-broker://localhost/{backend.database_url.removeprefix('sqlite:///').lstrip('/')}"
    fields = [{"name": "order_id", "type": "string"}, {"name": "amount", "type": "double"},
              {"name": "day", "type": "string"}]

    start = event("ingest", "START")
    assert [(d["namespace"], d["name"]) for d in start["outputs"]] == [(namespace, "test_orders")]
    complete = event("ingest", "COMPLETE")
    (topic,) = complete["outputs"]
    assert (topic["namespace"], topic["name"]) == (namespace, "test_orders")
    assert [{"name": f["name"], "type": f["type"]} for f in topic["facets"]["schema"]["fields"]] == fields
    assert topic["outputFacets"]["outputStatistics"]["rowCount"] == len(ROWS)
    txn = complete["run"]["facets"]["txnBroker_transaction"]
    assert txn["transactionalId"] == result.xcom["ingest"]["transactional_id"]
    assert txn["producerEpoch"] == result.xcom["ingest"]["producer_epoch"]
    assert txn["state"] == "CompleteCommit" and txn["transactionId"] is not None
    assert {p["marker"] for p in txn["partitions"]} == {"COMMIT"}
    assert sum(p["records"] for p in txn["partitions"]) == len(ROWS)
    assert {str(p["partition"]): p["lastOffset"] + 1 for p in txn["partitions"]} == result.xcom["ingest"]["offsets"]

    load = event("load", "COMPLETE")
    assert [(d["namespace"], d["name"]) for d in load["inputs"]] == [(namespace, "test_orders")]
    (table,) = load["outputs"]
    assert table["namespace"].startswith("sqlite://") and table["name"] == "test_orders"
    assert table["outputFacets"]["outputStatistics"]["rowCount"] == len(ROWS)
    assert "password" not in json.dumps(events).lower()


def test_namespaces_and_postgres_table_names() -> None:
    import sqlalchemy as sa
    from txn_broker_airflow.lineage import broker_namespace, table_dataset

    assert broker_namespace("postgresql+psycopg2://client:***@db.internal:5433/txn_broker") == \
        "txn-broker://db.internal:5433/txn_broker"
    assert broker_namespace("sqlite:////var/lib/broker/broker.db") == "txn-broker://localhost/var/lib/broker/broker.db"
    dataset = table_dataset(sa.make_url("postgresql://loader:secret@wh.internal/warehouse"), None, "orders", 3)
    assert (dataset.namespace, dataset.name) == ("postgres://wh.internal:5432", "warehouse.public.orders")
