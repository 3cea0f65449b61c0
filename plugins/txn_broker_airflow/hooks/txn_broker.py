"""``TxnBrokerHook``: the ``txn_broker`` connection type and a cached Broker.

A connection of type ``txn_broker`` keeps every setting in its extras:

=========================  ================================================================
extra                      meaning
=========================  ================================================================
``database_url``           SQLAlchemy URL of the metadata database (PostgreSQL or SQLite)
``storage_url``            ``file:///path`` or ``s3://bucket/prefix``
``endpoint_url``           S3 endpoint (MinIO, any S3-compatible store); empty for AWS
``aws_access_key_id``      S3 credentials (else the standard AWS chain)
``aws_secret_access_key``
``region_name``            AWS region
``settings``               broker settings, e.g. ``{"max_transaction_timeout_ms": 900000}``
=========================  ================================================================

Empty values fall back to the ``TXN_BROKER_*`` environment, then to the embedded default
(SQLite and a local directory under ``$TXN_BROKER_HOME``). When the default connection id
``txn_broker_default`` is not defined at all the hook uses that fallback too, so the demo
works with nothing configured; a named connection that does not exist is an error.

S3 settings are handed to the broker explicitly, as its storage options
(``txn_broker.connect(..., storage_options=...)``), and from the broker to Spark in the
data source's options; the process environment is never written. So two connections used
in one process (the triggerer, the API server, a task with two hooks) each keep their own
endpoint and credentials. An S3 setting a connection leaves empty is not taken from any
other connection: it falls back to this process's own defaults, as boto3 does for any
client (``TXN_BROKER_S3_ENDPOINT_URL`` for the endpoint; the ``AWS_*`` variables, profiles
or instance role for the credentials and region). Secrets are registered with Airflow's
secrets masker and never appear in log lines or ``test_connection`` messages.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException

from ..errors import ConnectionFieldError
from ..provider_info import CONN_FIELDS, CONNECTION_TYPE, HIDDEN_FIELDS, UI_FIELD_BEHAVIOUR

if TYPE_CHECKING:
    from txn_broker import Broker

DEFAULT_CONN_ID = "txn_broker_default"

#: (connection source, masked database URL) whose role this process has checked already,
#: so the owner-role warning is logged once per process and the check costs one query
_ROLE_CHECKED: set[tuple[str, str]] = set()

#: connection extra (a broker storage option, txn_broker.storage.S3_OPTIONS) -> the
#: environment variable a child process (spark-submit's driver) reads it from
_STORAGE_OPTIONS = {
    "endpoint_url": "TXN_BROKER_S3_ENDPOINT_URL",
    "aws_access_key_id": "AWS_ACCESS_KEY_ID",
    "aws_secret_access_key": "AWS_SECRET_ACCESS_KEY",
    "region_name": "AWS_DEFAULT_REGION",
}


@dataclass(frozen=True)
class BrokerConfig:
    """Where a hook's broker lives. ``None`` means: the environment, then the embedded default."""

    database_url: str | None = None
    storage_url: str | None = None
    endpoint_url: str | None = None
    aws_access_key_id: str | None = None
    aws_secret_access_key: str | None = field(default=None, repr=False)
    region_name: str | None = None
    settings: dict[str, int] = field(default_factory=dict)
    #: where the values came from, for messages
    source: str = "environment or embedded default"

    def secrets(self) -> list[str]:
        """Every secret value in this config (the database password, the S3 secret key)."""
        from txn_broker import url_secrets

        found = [self.aws_secret_access_key] if self.aws_secret_access_key else []
        return found + url_secrets(self.database_url or os.environ.get("TXN_BROKER_DATABASE_URL"))

    def storage_options(self) -> dict[str, str]:
        """The broker's storage options from these S3 settings (only those that are set)."""
        return {name: str(getattr(self, name)) for name in _STORAGE_OPTIONS if getattr(self, name)}

    def s3_environment(self) -> dict[str, str]:
        """These S3 settings as the environment of a child process that connects with
        ``txn_broker.connect()`` (a spark-submit driver): only for a child's ``env``, never
        for this process's ``os.environ``."""
        return {_STORAGE_OPTIONS[name]: value for name, value in self.storage_options().items()}

    def describe(self) -> str:
        """A one-line description, safe to log: the database password is masked."""
        from txn_broker import mask_url, resolve_database_url, resolve_storage_url, strip_userinfo

        database, embedded = resolve_database_url(self.database_url)
        storage = strip_userinfo(resolve_storage_url(self.storage_url))
        where = " (embedded default)" if embedded else ""
        return f"database {mask_url(database)}{where}, storage {storage} [{self.source}]"


class TxnBrokerHook(BaseHook):
    """A Broker for a ``txn_broker`` connection (see the module docstring for its extras).

    ``get_conn()`` returns one cached :class:`txn_broker.Broker` per hook; ``close()``
    disposes of it. ``broker_settings`` override the connection's ``settings`` extra.
    """

    conn_name_attr = "txn_broker_conn_id"
    default_conn_name = DEFAULT_CONN_ID
    conn_type = CONNECTION_TYPE
    hook_name = "Transactional topics (txn_broker)"

    def __init__(self, txn_broker_conn_id: str = DEFAULT_CONN_ID, **broker_settings: int) -> None:
        super().__init__()
        self.txn_broker_conn_id = txn_broker_conn_id
        self.broker_settings = broker_settings
        self._config: BrokerConfig | None = None
        self._broker: Broker | None = None

    # -- connection form -----------------------------------------------------------------

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """Hide the standard fields: every setting of this connection type is an extra.
        (Airflow 3 reads the same, declaratively, from ``txn_broker_airflow.provider_info``.)"""
        return {
            "hidden_fields": list(HIDDEN_FIELDS),
            "relabeling": dict(UI_FIELD_BEHAVIOUR["relabeling"]),
            "placeholders": dict(UI_FIELD_BEHAVIOUR["placeholders"]),
        }

    @classmethod
    def connection_extras(cls) -> list[str]:
        """The extras this connection type understands."""
        return [*CONN_FIELDS, "settings"]

    # -- configuration -------------------------------------------------------------------

    def broker_config(self) -> BrokerConfig:
        """The connection's settings, or the environment / embedded fallback when the
        default connection is not defined. Raises AirflowNotFoundException for a named
        connection that does not exist, ConnectionFieldError for malformed extras."""
        if self._config is None:
            self._config = self._load_config()
        return self._config

    def _load_config(self) -> BrokerConfig:
        try:
            conn = self.get_connection(self.txn_broker_conn_id)
        except AirflowNotFoundException:
            if self.txn_broker_conn_id != DEFAULT_CONN_ID:
                raise
            self.log.info("connection %r is not defined: using TXN_BROKER_* or the embedded default",
                          self.txn_broker_conn_id)
            return BrokerConfig(settings=dict(self.broker_settings))
        extras = conn.extra_dejson

        def extra(name: str) -> str | None:
            value = extras.get(name) or extras.get(f"extra__{CONNECTION_TYPE}__{name}")
            return str(value) if value not in (None, "") else None

        settings = extras.get("settings") or {}
        if isinstance(settings, str):
            try:
                settings = json.loads(settings)
            except json.JSONDecodeError:
                raise ConnectionFieldError(self.txn_broker_conn_id, "settings",
                                           "not JSON (expected an object such as "
                                           '{"max_transaction_timeout_ms": 900000})') from None
        if not isinstance(settings, dict):
            raise ConnectionFieldError(self.txn_broker_conn_id, "settings",
                                       f"must be a JSON object, got {type(settings).__name__}")
        config = BrokerConfig(
            database_url=extra("database_url"),
            storage_url=extra("storage_url"),
            endpoint_url=extra("endpoint_url"),
            aws_access_key_id=extra("aws_access_key_id"),
            aws_secret_access_key=extra("aws_secret_access_key"),
            region_name=extra("region_name"),
            settings={**settings, **self.broker_settings},
            source=f"connection {self.txn_broker_conn_id!r}",
        )
        from airflow.sdk.log import mask_secret

        for secret in config.secrets():
            mask_secret(secret)
        return config

    # -- the broker ----------------------------------------------------------------------

    def get_conn(self) -> Broker:
        """The Broker of this connection (connected once, then cached), its S3 settings
        passed as storage options (see the module docstring). Every error names the
        connection and the field at fault, secrets masked: ConnectionFieldError for a
        malformed URL or setting; DatabaseUnavailableError, SchemaVersionError,
        StorageUnavailableError, ... (txn_broker.errors) for one that cannot be used."""
        if self._broker is None:
            config = self.broker_config()
            self._broker = self._connect(config)
            self.log.info("txn_broker: %s", config.describe())
            self._check_role(self._broker, config)
        return self._broker

    def alter_topic(self, name: str, *, schema: Any = None, partitions: int | None = None,
                    config: dict[str, Any] | None = None, by: str | None = None) -> Any:
        """Change a topic while its pipelines run (:meth:`txn_broker.Broker.alter_topic`):
        the next schema version under its ``schema.compatibility``, more partitions,
        changed configs; one database transaction, recorded with ``by`` (default: this
        connection's id) and the time. Returns the topic's description; a refused change
        raises a typed error (IncompatibleSchemaError naming the field and the rule) and
        changes nothing."""
        return self.get_conn().alter_topic(name, schema=schema, partitions=partitions, config=config,
                                           by=by or f"airflow:{self.txn_broker_conn_id}")

    def _connect(self, config: BrokerConfig) -> Broker:
        import sqlalchemy as sa

        import txn_broker
        from txn_broker import errors, redact

        conn_id = self.txn_broker_conn_id
        if config.database_url:
            try:
                sa.make_url(config.database_url)
            except sa.exc.ArgumentError:
                raise ConnectionFieldError(conn_id, "database_url", "not an SQLAlchemy URL (expected e.g. "
                                           "postgresql+psycopg2://user:password@host/db or sqlite:///path); "
                                           f"from {config.source}") from None
        try:
            return txn_broker.connect(config.database_url, config.storage_url,
                                      storage_options=config.storage_options(), **config.settings)
        except errors.InvalidConfigError as error:
            text = str(error)
            field_name = ("storage_url" if "storage" in text.lower() else
                          "database_url" if "database" in text.lower() else "settings")
            raise ConnectionFieldError(conn_id, field_name, f"{redact(text, config.secrets())} "
                                       f"(from {config.source})") from None
        except (errors.DatabaseUnavailableError, errors.DatabasePermissionError, errors.SchemaVersionError,
                errors.StorageUnavailableError, errors.StoragePermissionError) as error:
            field_name = "storage_url" if isinstance(error, errors.StorageUnavailableError
                                                     | errors.StoragePermissionError) else "database_url"
            raise type(error)(f"connection {conn_id!r}, field {field_name!r}: "
                              f"{redact(str(error), config.secrets())}") from error

    def _check_role(self, broker: Broker, config: BrokerConfig) -> None:
        """Warn (once per process and database) when the broker's database is reached as the
        schema's owner or a superuser instead of a login of the least-privilege client role
        (``sql/roles.sql``). The warning names roles, never the password; a failed check is
        no reason to fail the task."""
        key = (config.source, broker.database_location)
        if key in _ROLE_CHECKED:
            return
        _ROLE_CHECKED.add(key)
        try:
            warning = broker.privileged_role_warning()
        except Exception as error:  # e.g. a catalog the role may not read: skip the advice
            self.log.debug("txn_broker: role check skipped: %s", type(error).__name__)
            return
        if warning:
            self.log.warning("txn_broker %s: %s", config.source, warning)

    def close(self) -> None:
        """Dispose of the cached Broker (its database connections)."""
        if self._broker is not None:
            self._broker.close()
            self._broker = None

    def test_connection(self) -> tuple[bool, str]:
        """Connect, list topics and list the object store. Returns (ok, message); the
        message never contains a password or secret key."""
        secrets: list[str] = []
        try:
            config = self.broker_config()
            secrets = config.secrets()
            broker = self.get_conn()
            topics = broker.list_topics()
            broker.check_storage()
            return True, f"Connected to {config.describe()}: {len(topics)} topic(s)"
        except Exception as error:  # reported to the UI, not raised: that is the contract
            from txn_broker import redact

            return False, redact(f"{type(error).__name__}: {error}", secrets)
        finally:
            self.close()
