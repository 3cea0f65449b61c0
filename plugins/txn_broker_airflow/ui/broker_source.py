"""The Broker the UI reads: one per api-server process, from a ``txn_broker`` connection.

The connection id is ``[txn_broker] ui_conn_id`` in Airflow's configuration (environment
``AIRFLOW__TXN_BROKER__UI_CONN_ID``), default ``txn_broker_default``; like every
``TxnBrokerHook``, a missing default connection falls back to ``TXN_BROKER_*`` and then to
the embedded default. The broker is connected on first use and kept (its connection pool
is shared by the api-server's request threads); a failed connect is not cached, so the
page recovers when the database comes back.

Nothing here ever returns a credential: :meth:`BrokerSource.location` masks the database
password and drops any user info from the storage URL, and :meth:`BrokerSource.redact`
removes the connection's secrets from error messages before they reach a page.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from txn_broker import Broker

    from ..hooks.txn_broker import TxnBrokerHook

DEFAULT_CONN_ID = "txn_broker_default"


def configured_conn_id() -> str:
    """``[txn_broker] ui_conn_id`` from Airflow's configuration, else ``txn_broker_default``."""
    from airflow.configuration import conf

    return conf.get("txn_broker", "ui_conn_id", fallback=DEFAULT_CONN_ID) or DEFAULT_CONN_ID


class BrokerSource:
    """Lazily connects, caches and describes the UI's broker (thread-safe)."""

    def __init__(self, conn_id: str | None = None) -> None:
        self._conn_id = conn_id
        self._lock = threading.Lock()
        self._hook: TxnBrokerHook | None = None
        self._broker: Broker | None = None
        self._secrets: list[str] = []

    @property
    def conn_id(self) -> str:
        if self._conn_id is None:
            self._conn_id = configured_conn_id()
        return self._conn_id

    def broker(self) -> Broker:
        """The connected Broker. Raises txn_broker errors (DatabaseUnavailableError,
        SchemaVersionError, ...) or AirflowNotFoundException for a missing named connection."""
        if self._broker is not None:
            return self._broker
        with self._lock:
            if self._broker is None:
                from ..hooks.txn_broker import TxnBrokerHook

                hook = TxnBrokerHook(self.conn_id)
                self._secrets = hook.broker_config().secrets()
                broker = hook.get_conn()
                self._hook, self._broker = hook, broker
            return self._broker

    def location(self) -> dict[str, str]:
        """Where the broker lives, safe to show: database URL with ``***`` for the password,
        storage URL without user info, and the connection the settings came from."""
        from txn_broker import mask_url, resolve_database_url, resolve_storage_url, strip_userinfo

        from ..hooks.txn_broker import TxnBrokerHook

        config = (self._hook or TxnBrokerHook(self.conn_id)).broker_config()
        database, embedded = resolve_database_url(config.database_url)
        return {
            "database": mask_url(database) + (" (embedded default)" if embedded else ""),
            "storage": strip_userinfo(resolve_storage_url(config.storage_url)),
            "source": config.source,
        }

    def redact(self, message: str) -> str:
        """``message`` with the connection's secrets (database password, S3 secret key) masked."""
        from txn_broker import redact

        return redact(message, self._secrets)

    def close(self) -> None:
        with self._lock:
            if self._hook is not None:
                self._hook.close()
            self._hook = self._broker = None


#: the api-server process's broker
SOURCE = BrokerSource()
