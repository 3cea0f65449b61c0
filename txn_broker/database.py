"""The one module that talks to the database driver.

Everything above it runs named queries from ``sql/queries.sql`` through a
:class:`Database`; driver errors become :mod:`txn_broker.errors` here and nowhere else.

Concurrency model: PostgreSQL runs at READ COMMITTED with explicit row locks
(``FOR UPDATE``) taken in a fixed order (transactional id, producer state, partitions);
SQLite serialises writers with ``BEGIN IMMEDIATE`` and reads from WAL snapshots.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy import event, exc
from sqlalchemy.engine import Connection, Engine, Row

from . import sql as sql_files  # type: ignore[attr-defined]  # sql/ installed as txn_broker.sql
from .errors import DatabasePermissionError, DatabaseUnavailableError, TxnBrokerError

log = logging.getLogger(__name__)
T = TypeVar("T")

_DIALECT_FRAGMENTS = {
    "postgresql": {
        "now_ms": "(CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT))",
        "for_update": "FOR UPDATE",
        "skip_locked": "FOR UPDATE SKIP LOCKED",
    },
    "sqlite": {
        "now_ms": "(CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER))",
        "for_update": "",
        "skip_locked": "",
    },
}

# Errors after which the database certainly rolled the transaction back, so running
# the whole unit of work again is safe: deadlocks, serialisation failures, a busy SQLite.
_ROLLED_BACK_SQLSTATES = {"40001", "40P01", "55P03"}
_INSUFFICIENT_PRIVILEGE = "42501"


def mask_url(url: str | sa.URL) -> str:
    """The URL with its password replaced by ``***``, safe for logs and messages."""
    try:
        return sa.make_url(url).render_as_string(hide_password=True)
    except Exception:  # an unparsable URL may still contain a secret: show nothing of it
        return "<unparsable database URL>"


class Queries:
    """The named queries, with the dialect's fragments filled in once."""

    def __init__(self, dialect: str) -> None:
        fragments = _DIALECT_FRAGMENTS[dialect]
        self._text = {
            name: sa.text(sql.replace("{now_ms}", fragments["now_ms"])
                          .replace("{for_update}", fragments["for_update"])
                          .replace("{skip_locked}", fragments["skip_locked"]))
            for name, sql in sql_files.load_queries().items()
        }

    def __getitem__(self, name: str) -> sa.TextClause:
        return self._text[name]


class Tx:
    """One open database transaction; run named queries in it."""

    def __init__(self, conn: Connection, queries: Queries) -> None:
        self._conn = conn
        self._queries = queries

    def one(self, query: str, /, **params: Any) -> Row[Any] | None:
        return self._conn.execute(self._queries[query], params).first()

    def all(self, query: str, /, **params: Any) -> list[Row[Any]]:
        return list(self._conn.execute(self._queries[query], params).all())

    def scalar(self, query: str, /, **params: Any) -> Any:
        return self._conn.execute(self._queries[query], params).scalar()

    def execute(self, query: str, /, **params: Any) -> int:
        """Run a statement; returns the number of rows it changed."""
        return self._conn.execute(self._queries[query], params).rowcount

    def execute_many(self, query: str, rows: list[Mapping[str, Any]]) -> None:
        if rows:
            self._conn.execute(self._queries[query], list(rows))

    def raw(self, statement: str, **params: Any) -> sa.CursorResult[Any]:
        """A literal statement (schema management only; never built from user input)."""
        return self._conn.execute(sa.text(statement), params)


def _database_error(url: sa.URL, error: exc.DBAPIError) -> TxnBrokerError:
    """The typed error for a driver error: missing privileges are fatal, the rest retriable."""
    detail = (f"{type(error.orig).__name__}: "
              f"{str(error.orig).strip().splitlines()[0] if error.orig else error}")
    if getattr(getattr(error, "orig", None), "pgcode", None) == _INSUFFICIENT_PRIVILEGE:
        return DatabasePermissionError(f"database {mask_url(url)} refused: {detail}")
    return DatabaseUnavailableError(f"database {mask_url(url)} failed: {detail}")


def _is_retriable(error: exc.DBAPIError) -> bool:
    orig = getattr(error, "orig", None)
    if getattr(orig, "pgcode", None) in _ROLLED_BACK_SQLSTATES:
        return True
    message = str(orig).lower()
    return "database is locked" in message or "database table is locked" in message


class Database:
    """A connection pool plus the named queries. Created by :func:`txn_broker.connect`."""

    def __init__(self, url: str, *, pool_size: int = 5) -> None:
        self.url = sa.make_url(url)
        self.dialect = self.url.get_backend_name()
        if self.dialect not in _DIALECT_FRAGMENTS:
            from .errors import InvalidConfigError

            raise InvalidConfigError(
                f"unsupported database {mask_url(self.url)}: use postgresql:// or sqlite://"
            )
        self.queries = Queries(self.dialect)
        self._pid_lock = threading.Lock()
        self.engine = self._create_engine(pool_size)

    def _create_engine(self, pool_size: int) -> Engine:
        if self.dialect == "sqlite":
            engine = sa.create_engine(
                self.url, connect_args={"timeout": 60, "check_same_thread": False}, hide_parameters=True
            )

            @event.listens_for(engine, "connect")
            def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
                dbapi_conn.isolation_level = None  # we issue BEGIN ourselves
                cur = dbapi_conn.cursor()
                cur.execute("PRAGMA journal_mode=WAL")
                cur.execute("PRAGMA synchronous=NORMAL")
                cur.execute("PRAGMA foreign_keys=ON")
                cur.execute("PRAGMA busy_timeout=60000")
                cur.close()

            @event.listens_for(engine, "begin")
            def _sqlite_begin(conn: Connection) -> None:
                write = conn.info.get("txn_broker.write", True)
                conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

            return engine
        return sa.create_engine(
            self.url,
            pool_size=pool_size,
            max_overflow=pool_size * 2,
            pool_pre_ping=True,
            # bound values (a login's password, user data) never reach SQLAlchemy's logs
            # or its exception messages, even with statement logging on
            hide_parameters=True,
            connect_args={"connect_timeout": 10, "application_name": "txn_broker"},
        )

    @contextmanager
    def transaction(self, *, write: bool = True) -> Iterator[Tx]:
        """A database transaction: committed on clean exit, rolled back on an exception.

        Raises DatabaseUnavailableError (retriable) when the database cannot be reached.
        """
        try:
            with self.engine.connect() as conn:
                conn.info["txn_broker.write"] = write
                with conn.begin():
                    yield Tx(conn, self.queries)
        except exc.DBAPIError as error:
            if isinstance(error, exc.IntegrityError):
                raise
            raise _database_error(self.url, error) from None

    def run(self, work: Callable[[Tx], T], *, write: bool = True, attempts: int = 8) -> T:
        """Run ``work`` in a transaction, again from the start after a deadlock,
        serialisation failure or busy SQLite, when the database rolled everything back."""
        delay = 0.01
        for attempt in range(1, attempts + 1):
            try:
                with self.engine.connect() as conn:
                    conn.info["txn_broker.write"] = write
                    with conn.begin():
                        return work(Tx(conn, self.queries))
            except exc.DBAPIError as error:
                if isinstance(error, exc.IntegrityError):
                    raise
                if attempt < attempts and _is_retriable(error):
                    time.sleep(delay * (1 + random.random()))
                    delay = min(delay * 2, 1.0)
                    continue
                raise _database_error(self.url, error) from None
        raise AssertionError("unreachable")

    def read(self, work: Callable[[Tx], T]) -> T:
        """Run read-only ``work`` in one snapshot (REPEATABLE READ on PostgreSQL)."""
        def snapshot(tx: Tx) -> T:
            if self.dialect == "postgresql":
                tx.raw("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            return work(tx)

        return self.run(snapshot, write=False)

    def dispose(self) -> None:
        self.engine.dispose()
