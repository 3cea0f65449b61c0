"""Airflow provider metadata: makes the ``txn_broker`` connection type known to Airflow.

Airflow's ProvidersManager finds this through the ``apache_airflow_provider`` entry point
declared in ``pyproject.toml``. It must not import Airflow (or anything heavy): the
providers manager calls it in every Airflow process, and it lists the connection form
declaratively so the UI can render the form without importing the hook.

The hook itself lives in the Airflow plugins folder (``plugins/txn_broker_airflow``),
which Airflow puts on ``sys.path``; ``hook-class-name`` points there.
"""

from __future__ import annotations

from typing import Any

CONNECTION_TYPE = "txn_broker"
HOOK_CLASS_NAME = "txn_broker_airflow.hooks.txn_broker.TxnBrokerHook"

#: the standard connection fields the form hides: every setting is an extra
HIDDEN_FIELDS = ["host", "schema", "login", "password", "port"]

#: extras of a ``txn_broker`` connection, as Airflow's declarative ``conn-fields``
CONN_FIELDS: dict[str, dict[str, Any]] = {
    "database_url": {
        "label": "Metadata database URL",
        "description": "SQLAlchemy URL of the broker's metadata database, e.g. "
                       "postgresql+psycopg2://txn_client:...@db/txn_broker. Empty: "
                       "TXN_BROKER_DATABASE_URL, else the embedded SQLite default.",
        "schema": {"type": ["string", "null"], "format": "password"},
    },
    "storage_url": {
        "label": "Segment storage URL",
        "description": "file:///path or s3://bucket/prefix. Empty: TXN_BROKER_STORAGE_URL, "
                       "else the embedded local directory.",
        "schema": {"type": ["string", "null"]},
    },
    "endpoint_url": {
        "label": "S3 endpoint URL",
        "description": "For MinIO or another S3-compatible store; empty for AWS.",
        "schema": {"type": ["string", "null"]},
    },
    "aws_access_key_id": {
        "label": "AWS access key id",
        "schema": {"type": ["string", "null"]},
    },
    "aws_secret_access_key": {
        "label": "AWS secret access key",
        "schema": {"type": ["string", "null"], "format": "password"},
    },
    "region_name": {
        "label": "AWS region",
        "schema": {"type": ["string", "null"]},
    },
}

UI_FIELD_BEHAVIOUR: dict[str, Any] = {
    "hidden-fields": HIDDEN_FIELDS,
    "relabeling": {},
    "placeholders": {
        "database_url": "postgresql+psycopg2://txn_client:***@postgres:5432/txn_broker",
        "storage_url": "s3://txn-broker/segments",
        "endpoint_url": "http://minio:9000",
    },
}


#: the common-messaging queue provider (imported by Airflow only, by name)
QUEUE_PROVIDER_CLASS_NAME = "txn_broker_airflow.queues.TxnBrokerQueueProvider"


def get_provider_info() -> dict[str, Any]:
    """The provider description Airflow validates against its provider_info schema."""
    return {
        "package-name": "txn-broker",
        "name": "Transactional topics (txn_broker)",
        "description": "Kafka-style transactional topics on PostgreSQL and object storage: "
                       "hook, exactly-once Spark, ingest and load operators, sensors.",
        "versions": ["0.1.0"],
        "connection-types": [
            {
                "connection-type": CONNECTION_TYPE,
                "hook-class-name": HOOK_CLASS_NAME,
                "hook-name": "Transactional topics (txn_broker)",
                "conn-fields": CONN_FIELDS,
                "ui-field-behaviour": UI_FIELD_BEHAVIOUR,
            }
        ],
        # MessageQueueTrigger(scheme="txn_broker", ...) of the common-messaging provider
        "queues": [QUEUE_PROVIDER_CLASS_NAME],
    }
