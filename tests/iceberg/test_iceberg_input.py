"""Bad input to Iceberg publishing gets a typed error and changes nothing: an unknown
catalog, a catalog that cannot be reached, a topic schema an Iceberg table cannot hold,
a topic without iceberg.enabled; and the topic configs' own checks."""

from __future__ import annotations

import socket

import pyarrow as pa
import pytest
from _bank import SCHEMA

import txn_broker
from txn_broker.errors import CatalogUnavailableError, IcebergSchemaError, InvalidConfigError
from txn_broker.topic_configs import check_changes

pytestmark = pytest.mark.integration

ENABLED = {"iceberg.enabled": "true"}


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_topic_configs_are_checked():
    assert check_changes({"iceberg.enabled": "TRUE", "iceberg.target.file.bytes": "1048576"}) == {
        "iceberg.enabled": True, "iceberg.target.file.bytes": 1048576}
    for bad in ({"iceberg.enabled": "yes"}, {"iceberg.target.file.bytes": "0"}, {"iceberg.target.file.bytes": "x"}):
        with pytest.raises(InvalidConfigError):
            check_changes(bad)


def embedded(tmp_path, **kwargs):
    return txn_broker.connect(f"sqlite:///{tmp_path}/broker.db", (tmp_path / "segments").as_uri(), **kwargs)


@pytest.mark.parametrize("catalog", [{"type": "oracle"}, {"uri": "http://x"}, {"type": "rest", "uri": 5}])
def test_unknown_catalog_is_refused_at_connect(tmp_path, catalog):
    with pytest.raises(InvalidConfigError):
        embedded(tmp_path, iceberg_catalog=catalog)
    with pytest.raises(InvalidConfigError):
        embedded(tmp_path, iceberg_namespace="a.b; drop")


@pytest.mark.parametrize("kind", ["rest", "sql"])
def test_unreachable_catalog_changes_nothing(tmp_path, kind):
    port = closed_port()
    catalog = ({"type": "rest", "uri": f"http://127.0.0.1:{port}", "warehouse": "file:///nowhere"} if kind == "rest"
               else {"type": "sql", "uri": f"postgresql+psycopg2://u:p@127.0.0.1:{port}/db",
                     "warehouse": "file:///nowhere"})
    broker = embedded(tmp_path, iceberg_catalog=catalog)
    with pytest.raises(CatalogUnavailableError) as raised:
        broker.create_topic("orders", partitions=2, schema=SCHEMA, config=ENABLED)
    assert raised.value.retriable and ":p@" not in str(raised.value)
    assert broker.list_topics() == []
    broker.close()


@pytest.mark.parametrize("column", [pa.uint64(), pa.uint32(), pa.dense_union([pa.field("a", pa.int32())]),
                                    pa.struct([("inner", pa.duration("s"))]), pa.list_(pa.time32("s"))])
def test_schema_iceberg_cannot_hold_is_refused(backend, column):
    broker = backend.connect()
    schema = pa.schema([("id", pa.string()), ("bad", column)])
    with pytest.raises(IcebergSchemaError, match="bad"):
        broker.create_topic("orders", schema=schema, config=ENABLED)
    assert broker.list_topics() == []
    assert not list(broker._store.list("iceberg/"))
    broker.create_topic("orders", schema=schema)  # without Iceberg the same schema is fine
    broker.close()


def test_publishing_a_topic_without_iceberg_is_refused(backend):
    broker = backend.connect()
    broker.create_topic("plain", schema=SCHEMA)
    with pytest.raises(InvalidConfigError, match="iceberg.enabled"):
        broker.publish_iceberg(["plain"])
    assert broker.publish_iceberg() == []
    broker.close()


def test_deleting_a_topic_drops_its_table(backend):
    broker = backend.connect()
    broker.create_topic("orders", schema=SCHEMA, config=ENABLED)
    catalog = broker._iceberg_publisher().catalog
    assert catalog.table_exists(("txn_broker", "orders"))
    broker.delete_topic("orders")
    assert not catalog.table_exists(("txn_broker", "orders"))
    recreated = broker.create_topic("orders", schema=SCHEMA, config=ENABLED)  # a new table, a new location
    assert str(recreated.topic_id) in broker.iceberg_table("orders").location()
    broker.close()
