"""Observability of the operators inside Airflow, in one DAG run (ingest a CSV into a topic,
load the topic into a table) with Airflow's StatsD metrics pointed at a UDP port this test
listens on and OpenLineage's file transport:

* the clients' metrics arrive through Airflow's Stats under the documented names;
* each task emits OpenLineage START and COMPLETE events with the topic as a dataset in the
  broker's namespace (schema facet from the topic's schema, output statistics), the
  transaction as a run facet of the ingest, and the load's table in OpenLineage's naming;

then a second run whose ingest fails mid-transaction (its second file has a column the topic
lacks) emits FAIL with the aborted transaction."""

from __future__ import annotations

import json
import socket
import threading

import pytest
from test_airflow_ingest_load import ROWS, write_csv

pytestmark = [pytest.mark.airflow, pytest.mark.integration]


class StatsdListener:
    """A UDP socket on loopback collecting StatsD lines."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.lines: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            self.lines += data.decode(errors="replace").splitlines()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


def total(lines: list[str], name: str) -> float:
    """The sum of a StatsD counter's increments (``name:value|c``)."""
    return sum(float(line.split(":", 1)[1].split("|")[0]) for line in lines
               if line.startswith(name + ":") and line.endswith("|c"))


def read_events(path) -> list[dict]:  # type: ignore[no-untyped-def]
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def event(events: list[dict], task: str, kind: str) -> dict:
    found = [e for e in events if e["eventType"] == kind and e["job"]["name"].endswith(f".{task}")]
    assert found, (task, kind, [(e["eventType"], e["job"]["name"]) for e in events])
    return found[-1]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # neither path depends on it
def test_stats_and_lineage_of_a_dag_run(airflow_site, backend, tmp_path) -> None:  # type: ignore[no-untyped-def]
    csv = write_csv(tmp_path / "orders.csv", ROWS)
    events_file = tmp_path / "lineage.jsonl"
    statsd = StatsdListener()
    env = {"AIRFLOW__METRICS__STATSD_ON": "True", "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
           "AIRFLOW__METRICS__STATSD_PORT": str(statsd.port), "AIRFLOW__METRICS__STATSD_PREFIX": "airflow",
           "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps({"type": "file", "log_file_path": str(events_file),
                                                          "append": True}),
           "AIRFLOW__OPENLINEAGE__NAMESPACE": "txn-broker-tests",
           # emit from a thread of the task process (docs/observability.md says why)
           "AIRFLOW__OPENLINEAGE__EXECUTE_IN_THREAD": "True"}
    try:
        result = airflow_site.run_dag("txn_test_ingest_load", backend_env=backend.env, broker_home=tmp_path / "home",
                                      conf={"csv": str(csv)}, extra_env=env)
    finally:
        statsd.close()
    assert result.state == "success", result.tail()

    # the clients' metrics, through Airflow's Stats
    lines = statsd.lines
    assert total(lines, "airflow.txn_broker.records_sent.test_orders") == len(ROWS), lines[:50]
    assert total(lines, "airflow.txn_broker.bytes_sent.test_orders") > 0
    assert total(lines, "airflow.txn_broker.records_polled.test_orders") == len(ROWS)
    assert [line for line in lines if line.startswith("airflow.txn_broker.commit_duration:") and line.endswith("|ms")]

    # OpenLineage
    events = read_events(events_file)
    namespace = f"txn-broker://localhost/{backend.database_url.removeprefix('sqlite:///').lstrip('/')}"
    fields = [{"name": "order_id", "type": "string"}, {"name": "amount", "type": "double"},
              {"name": "day", "type": "string"}]
    start = event(events, "ingest", "START")
    assert [(d["namespace"], d["name"]) for d in start["outputs"]] == [(namespace, "test_orders")]
    complete = event(events, "ingest", "COMPLETE")
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
    load = event(events, "load", "COMPLETE")
    assert [(d["namespace"], d["name"]) for d in load["inputs"]] == [(namespace, "test_orders")]
    (table,) = load["outputs"]
    assert table["namespace"].startswith("sqlite://") and table["name"] == "test_orders"
    assert table["outputFacets"]["outputStatistics"]["rowCount"] == len(ROWS)
    assert "password" not in json.dumps(events).lower()

    # a failed ingest: the first file is sent, the second has a column the topic lacks, so the
    # transaction aborts and the task fails (each try): FAIL names the aborted transaction
    write_csv(tmp_path / "more_1.csv", [("o8", 1.0, "2024-01-05")])
    (tmp_path / "more_2.csv").write_text("order_id,amount,day,extra\no9,2.0,2024-01-05,x\n")
    failed = airflow_site.run_dag("txn_test_ingest_load", backend_env=backend.env, broker_home=tmp_path / "home",
                                  conf={"csv": str(tmp_path / "more_*.csv")}, extra_env=env)
    assert failed.tasks["ingest"]["state"] == "failed", failed.tail()
    fail = event(read_events(events_file), "ingest", "FAIL")
    aborted = fail["run"]["facets"]["txnBroker_transaction"]
    assert aborted["state"] == "CompleteAbort", aborted
    assert aborted["transactionId"] != txn["transactionId"]
    assert aborted["partitions"] and {p["marker"] for p in aborted["partitions"]} == {"ABORT"}


def test_namespaces_and_postgres_table_names() -> None:
    import sqlalchemy as sa
    from txn_broker_airflow.lineage import broker_namespace, table_dataset

    assert broker_namespace("postgresql+psycopg2://client:***@db.internal:5433/txn_broker") == \
        "txn-broker://db.internal:5433/txn_broker"
    assert broker_namespace("sqlite:////var/lib/broker/broker.db") == "txn-broker://localhost/var/lib/broker/broker.db"
    dataset = table_dataset(sa.make_url("postgresql://loader:secret@wh.internal/warehouse"), None, "orders", 3)
    assert (dataset.namespace, dataset.name) == ("postgres://wh.internal:5432", "warehouse.public.orders")
