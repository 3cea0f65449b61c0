"""Airflow provider metadata of the ``txn-broker`` distribution (its Airflow layer).

Airflow's ProvidersManager finds :func:`get_provider_info` through the
``apache_airflow_provider`` entry point declared in ``pyproject.toml`` and reads from it the
``txn_broker`` connection type (with its form, declared so the UI renders it without
importing the hook), the hook, operators, sensors and triggers (``airflow providers ...``),
the ``txn-topic`` asset URI scheme and the plugin. The providers manager calls this in
every Airflow process: it imports nothing (no Airflow, no pyarrow, not even this package's
other modules), and only names classes and modules as strings.

The plugin itself (listener, Transactions page) is registered through the ``airflow.plugins``
entry point (``txn_broker_airflow.plugin``) only; see the end of :func:`get_provider_info`.
"""

from __future__ import annotations

from typing import Any

PACKAGE_NAME = "txn-broker"
#: the distribution's version (kept equal to ``pyproject.toml``'s; a test checks it)
VERSION = "0.1.0"
INTEGRATION = "Transactional topics (txn_broker)"
CONNECTION_TYPE = "txn_broker"
HOOK_CLASS_NAME = "txn_broker_airflow.hooks.txn_broker.TxnBrokerHook"
PLUGIN_NAME = "txn_broker_airflow"
PLUGIN_CLASS_NAME = "txn_broker_airflow.plugin.TxnBrokerAirflowPlugin"
#: the scheme of topic Assets (``txn_broker_airflow.assets``)
ASSET_SCHEME = "txn-topic"
#: the Asset URI scheme of an ``iceberg.enabled`` topic's Iceberg table (assets.py)
ICEBERG_ASSET_SCHEME = "txn-iceberg"

#: the standard connection fields the form hides: every setting is an extra
HIDDEN_FIELDS = ["host", "schema", "login", "password", "port"]

#: extras of a ``txn_broker`` connection, as Airflow's declarative ``conn-fields``
CONN_FIELDS: dict[str, dict[str, Any]] = {
    "database_url": {
        "label": "Metadata database URL",
        "description": "SQLAlchemy URL of the broker's metadata database, e.g. "
                       "postgresql+psycopg2://txn_client:...@db/txn_broker, a login of the "
                       "least-privilege client role (sql/roles.sql), not the owner. Empty: "
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
    """The provider description Airflow validates against its ``provider_info.schema.json``."""
    return {
        "package-name": PACKAGE_NAME,
        "name": INTEGRATION,
        "description": "Kafka-style transactional topics on PostgreSQL and object storage: "
                       "the txn_broker connection type and hook, exactly-once Spark, ingest and "
                       "warehouse-load operators, deferrable sensors, a failure listener and "
                       "the Transactions page of the UI.",
        "versions": [VERSION],
        "integrations": [
            {"integration-name": INTEGRATION, "tags": ["software"]},
        ],
        "connection-types": [
            {
                "connection-type": CONNECTION_TYPE,
                "hook-class-name": HOOK_CLASS_NAME,
                "hook-name": INTEGRATION,
                "conn-fields": CONN_FIELDS,
                "ui-field-behaviour": UI_FIELD_BEHAVIOUR,
            }
        ],
        "hooks": [
            {"integration-name": INTEGRATION, "python-modules": ["txn_broker_airflow.hooks.txn_broker"]},
        ],
        "operators": [
            {
                "integration-name": INTEGRATION,
                "python-modules": [
                    "txn_broker_airflow.operators.committed_records",
                    "txn_broker_airflow.operators.produce",
                    "txn_broker_airflow.operators.topic_to_postgres",
                    "txn_broker_airflow.operators.transactional_spark",
                ],
            }
        ],
        "sensors": [
            {
                "integration-name": INTEGRATION,
                "python-modules": [
                    "txn_broker_airflow.sensors.topic_records",
                    "txn_broker_airflow.sensors.transaction_timeout",
                ],
            }
        ],
        "triggers": [
            {
                "integration-name": INTEGRATION,
                "python-modules": [
                    "txn_broker_airflow.triggers.committed_records",
                    "txn_broker_airflow.triggers.topic_records",
                    "txn_broker_airflow.triggers.transaction_timeout",
                ],
            }
        ],
        "asset-uris": [
            {
                "schemes": [ASSET_SCHEME],
                "handler": "txn_broker_airflow.assets.sanitize_uri",
                "factory": "txn_broker_airflow.assets.create_asset",
            },
            {
                "schemes": [ICEBERG_ASSET_SCHEME],
                "handler": "txn_broker_airflow.assets.sanitize_uri",
                "factory": "txn_broker_airflow.assets.create_iceberg_asset",
            },
        ],
        # MessageQueueTrigger(scheme="txn_broker", ...) of the common-messaging provider
        "queues": [QUEUE_PROVIDER_CLASS_NAME],
        # no "plugins" entry: the plugin is registered by the airflow.plugins entry point
        # (PLUGIN_CLASS_NAME). With [core] lazy_discover_providers = False, Airflow's plugins
        # manager also loads the plugins listed here, finds the name a second time and
        # records "already registered" as a plugin import error.
    }
