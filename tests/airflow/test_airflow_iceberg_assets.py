"""The Iceberg table of an ``iceberg.enabled`` topic as an Airflow Asset (assets.py,
table_publishing.py): which tasks declare it, the URI checks, and the publish a task makes
after its commit so that the asset event means the table holds it. A downstream DAG
scheduled on the table under a real scheduler: test_airflow_e2e.py."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

pytestmark = [pytest.mark.airflow]

HERE = Path(__file__).resolve().parent
SCHEMA = pa.schema([("order_id", pa.string()), ("amount", pa.float64())])


def test_outputs_declared_with_iceberg_have_the_table_as_outlet(airflow_env) -> None:  # type: ignore[no-untyped-def]
    from airflow.dag_processing.dagbag import DagBag
    from txn_broker_airflow import (
        ProcessCommittedRecordsOperator,
        ProduceToTopicOperator,
        TopicSpec,
        TransactionalSparkOperator,
    )

    bag = DagBag(dag_folder=str(HERE / "dag_files" / "txn_test_iceberg_producer.py"))
    assert bag.import_errors == {}
    assert [a.uri for a in bag.get_dag("txn_test_iceberg_producer").get_task("ingest").outlets] == [
        "txn-topic://txn_broker_default/test_iceberg_orders", "txn-iceberg://txn_broker_default/test_iceberg_orders"]

    iceberg = {"iceberg.enabled": True}
    plain = ProduceToTopicOperator(task_id="plain", topic="a", source="a.csv", topics=[TopicSpec("a", 1, SCHEMA)])
    assert [a.uri for a in plain.outlets] == ["txn-topic://txn_broker_default/a"]
    stage = TransactionalSparkOperator(task_id="stage", application="x.py", inputs=["a"], outputs=["b", "c"],
                                       topics=[TopicSpec("b", 1, SCHEMA), TopicSpec("c", 1, SCHEMA, iceberg)],
                                       txn_broker_conn_id="other")
    assert [a.uri for a in stage.outlets] == ["txn-topic://other/b", "txn-topic://other/c",
                                              "txn-iceberg://other/c"]
    events = ProcessCommittedRecordsOperator(task_id="events", output_topic="d", transform="m.f",
                                             inputs=["a"], topics=[TopicSpec("d", 1, SCHEMA, iceberg)])
    assert [a.uri for a in events.outlets] == ["txn-topic://txn_broker_default/d",
                                               "txn-iceberg://txn_broker_default/d"]


@pytest.mark.parametrize("uri", ["txn-iceberg:///orders", "txn-iceberg://conn/a/b", "txn-iceberg://conn/orders?x=1",
                                 "txn-iceberg://conn/bad topic"])
def test_a_malformed_table_uri_is_refused_where_declared(airflow_env, uri) -> None:  # type: ignore[no-untyped-def]
    from airflow.sdk import Asset
    from txn_broker_airflow.assets import iceberg_table_asset

    assert iceberg_table_asset("orders", "conn").uri == "txn-iceberg://conn/orders"
    with pytest.raises(ValueError, match="txn-iceberg"):
        Asset(uri)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # the publish itself is tested on both in tests/iceberg
def test_a_task_publishes_its_declared_tables(airflow_env, backend) -> None:  # type: ignore[no-untyped-def]
    from txn_broker_airflow.assets import iceberg_table_asset, topic_asset
    from txn_broker_airflow.table_publishing import publish_outlet_tables

    from txn_broker import TopicSpec
    from txn_broker.errors import InvalidConfigError

    with backend.connect() as broker:
        broker.ensure_topics([TopicSpec("lake", 2, SCHEMA, {"iceberg.enabled": "true"}), TopicSpec("plain", 1, SCHEMA)])
        producer = broker.producer(transactional_id="t")
        producer.init_transactions()
        with producer.transaction():
            producer.send("lake", pa.table({"order_id": ["a", "b", "c"], "amount": [1.0, 2.0, 3.0]}), key="order_id")
        outlets = [topic_asset("lake"), iceberg_table_asset("lake"), iceberg_table_asset("lake", "another_conn")]
        (done,) = publish_outlet_tables(broker, outlets, "txn_broker_default")
        assert (done["topic"], done["rows"]) == ("lake", 3)
        assert broker.iceberg_table("lake").scan().to_arrow().num_rows == 3
        assert publish_outlet_tables(broker, [topic_asset("lake")], "txn_broker_default") == []
        with pytest.raises(InvalidConfigError):  # declared as a table, but the topic has none
            publish_outlet_tables(broker, [iceberg_table_asset("plain")], "txn_broker_default")
