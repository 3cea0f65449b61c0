"""Observability of the operators inside Airflow, in one DAG run of ``txn_test_observability``
(ingest a CSV into a topic; then load the topic into a table, copy it with a Spark stage whose
first try fails after writing, and process it event-driven) with Airflow's StatsD metrics
pointed at a UDP port this test listens on and OpenLineage's file transport:

* the clients' metrics arrive through Airflow's Stats under the documented names;
* each task emits OpenLineage START and COMPLETE events with its topics as datasets in the
  broker's namespace (schema facets from the topics' schemas, output statistics), its
  transaction as a run facet (with the input offsets it committed), and the load's table in
  OpenLineage's naming; the Spark stage's failed first try emits FAIL with the transaction
  it aborted;

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
           # dag.test() only: its in-process supervisor cannot serve a forked child
           # (docs/observability.md); the scheduler test of test_airflow_e2e.py
           # runs the provider's default fork mode
           "AIRFLOW__OPENLINEAGE__EXECUTE_IN_THREAD": "True"}
    try:
        result = airflow_site.run_dag("txn_test_observability", backend_env=backend.env,
                                      broker_home=tmp_path / "home", conf={"csv": str(csv)}, extra_env=env,
                                      timeout=600)  # a Spark stage run twice, on a shared machine
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
    assert topic["outputFacets"]["outputStatistics"]["size"] > 0  # from the committed transaction
    ingest_txn = txn = complete["run"]["facets"]["txnBroker_transaction"]
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

    # the Spark stage: try 1 wrote its output and failed (FAIL names the aborted transaction),
    # try 2 committed it with the input offsets (COMPLETE)
    copy_fields = fields
    stage = result.xcom["stage"]
    assert result.tasks["stage"]["try_number"] == 2 and stage["outcome"] == "committed"
    start = event(events, "stage", "START")
    assert [(d["namespace"], d["name"]) for d in start["inputs"]] == [(namespace, "test_orders")]
    assert [(d["namespace"], d["name"]) for d in start["outputs"]] == [(namespace, "test_orders_copy")]
    stage_fail = event(events, "stage", "FAIL")["run"]["facets"]["txnBroker_transaction"]
    assert stage_fail["state"] == "CompleteAbort" and stage_fail["transactionalId"] == stage["transactional_id"]
    assert {p["marker"] for p in stage_fail["partitions"]} == {"ABORT"}
    assert sum(p["records"] for p in stage_fail["partitions"]) == len(ROWS)
    complete = event(events, "stage", "COMPLETE")
    (source,) = complete["inputs"]
    assert [{"name": f["name"], "type": f["type"]} for f in source["facets"]["schema"]["fields"]] == fields
    (copy,) = complete["outputs"]
    assert (copy["namespace"], copy["name"]) == (namespace, "test_orders_copy")
    assert [{"name": f["name"], "type": f["type"]} for f in copy["facets"]["schema"]["fields"]] == copy_fields
    statistics = copy["outputFacets"]["outputStatistics"]
    assert statistics["rowCount"] == len(ROWS) == stage["records_out_by_topic"]["test_orders_copy"]
    assert statistics["size"] == stage["bytes_out_by_topic"]["test_orders_copy"] > 0
    committed = complete["run"]["facets"]["txnBroker_transaction"]
    assert committed["state"] == "CompleteCommit" and committed["transactionId"] == stage["txn_id"]
    assert committed["producerEpoch"] == stage["producer_epoch"] > stage_fail["producerEpoch"]
    assert stage_fail["transactionId"] != committed["transactionId"]
    assert {p["marker"] for p in committed["partitions"]} == {"COMMIT"}
    assert sum(p["bytes"] for p in committed["partitions"]) == statistics["size"]
    assert {f"{o['topic']}-{o['partition']}": o["offset"] for o in committed["groupOffsets"]} == \
        {tp: span["end"] for tp, span in stage["input_offsets"].items()}
    assert {o["group"] for o in committed["groupOffsets"]} == {stage["group_id"]}

    # the event-driven stage: the announced ranges in, its output out, the ranges' ends committed
    accept = result.xcom["accept"]
    assert accept["outcome"] == "committed" and accept["records_out"] == len(ROWS)
    assert [(d["namespace"], d["name"]) for d in event(events, "accept", "START")["inputs"]] == \
        [(namespace, "test_orders")]
    complete = event(events, "accept", "COMPLETE")
    (accepted,) = complete["outputs"]
    assert (accepted["namespace"], accepted["name"]) == (namespace, "test_orders_accepted")
    assert [f["name"] for f in accepted["facets"]["schema"]["fields"]] == \
        ["order_id", "amount", "day", "source_partition", "source_offset", "event_ids"]
    assert accepted["outputFacets"]["outputStatistics"]["rowCount"] == len(ROWS)
    assert accepted["outputFacets"]["outputStatistics"]["size"] > 0
    txn = complete["run"]["facets"]["txnBroker_transaction"]
    assert (txn["transactionalId"], txn["producerEpoch"], txn["state"]) == \
        (accept["transactional_id"], accept["producer_epoch"], "CompleteCommit")
    assert sorted((o["group"], o["topic"], o["partition"], o["offset"]) for o in txn["groupOffsets"]) == \
        sorted((accept["group_id"], r["topic"], r["partition"], r["end"]) for r in accept["processed"])

    # a failed ingest: the first file is sent, the second has a column the topic lacks, so the
    # transaction aborts and the task fails (each try): FAIL names the aborted transaction
    write_csv(tmp_path / "more_1.csv", [("o8", 1.0, "2024-01-05")])
    (tmp_path / "more_2.csv").write_text("order_id,amount,day,extra\no9,2.0,2024-01-05,x\n")
    failed = airflow_site.run_dag("txn_test_observability", backend_env=backend.env, broker_home=tmp_path / "home",
                                  conf={"csv": str(tmp_path / "more_*.csv")}, extra_env=env)
    assert failed.tasks["ingest"]["state"] == "failed", failed.tail()
    fail = event(read_events(events_file), "ingest", "FAIL")
    aborted = fail["run"]["facets"]["txnBroker_transaction"]
    assert aborted["state"] == "CompleteAbort", aborted
    assert aborted["transactionId"] != ingest_txn["transactionId"]
    assert aborted["partitions"] and {p["marker"] for p in aborted["partitions"]} == {"ABORT"}


def test_namespaces_and_postgres_table_names() -> None:
    import sqlalchemy as sa
    from txn_broker_airflow.lineage import broker_namespace, table_dataset

    assert broker_namespace("postgresql+psycopg2://client:***@db.internal:5433/txn_broker") == \
        "txn-broker://db.internal:5433/txn_broker"
    assert broker_namespace("sqlite:////var/lib/broker/broker.db") == "txn-broker://localhost/var/lib/broker/broker.db"
    dataset = table_dataset(sa.make_url("postgresql://loader:secret@wh.internal/warehouse"), None, "orders", 3)
    assert (dataset.namespace, dataset.name) == ("postgres://wh.internal:5432", "warehouse.public.orders")
