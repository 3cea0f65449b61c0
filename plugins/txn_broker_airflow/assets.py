"""Airflow Assets that stand for topics, so DAGs can be scheduled on data.

``topic_asset("orders_clean")`` is ``Asset("txn-topic://txn_broker_default/orders_clean")``:
the operators that commit into a topic declare it as an outlet, and a DAG with
``schedule=[topic_asset("orders_clean")]`` runs after each such commit. (The scheme is
``txn-topic``, not ``txn_topic``: an underscore is not allowed in a URI scheme, and Airflow
would then treat the whole string as an opaque name.)
"""

from __future__ import annotations

from airflow.sdk import Asset

from txn_broker.names import validate_topic_name

from .hooks.txn_broker import DEFAULT_CONN_ID

SCHEME = "txn-topic"


def topic_asset(topic: str, txn_broker_conn_id: str = DEFAULT_CONN_ID) -> Asset:
    """The Asset of ``topic`` on the broker of ``txn_broker_conn_id``."""
    validate_topic_name(topic)
    return Asset(uri=f"{SCHEME}://{txn_broker_conn_id}/{topic}", group="txn_topic")


def topic_assets(topics: list[str] | tuple[str, ...], txn_broker_conn_id: str = DEFAULT_CONN_ID) -> list[Asset]:
    return [topic_asset(t, txn_broker_conn_id) for t in topics]
