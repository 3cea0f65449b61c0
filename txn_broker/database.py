"""The one module that talks to the database driver.

Everything above it runs named queries from ``sql/queries.sql`` through a
:class:`Database`; driver errors become :mod:`txn_broker.errors` here and nowhere else.

Concurrency model: PostgreSQL runs at READ COMMITTED with explicit row locks
(``FOR UPDATE``) taken in a fixed order (transactional id, producer state, partitions);
SQLite serialises writers with ``BEGIN IMMEDIATE`` and reads from WAL snapshots.

Named queries run on the driver's own cursor, in the transaction SQLAlchemy manages on
that connection: SQLAlchemy's per-statement machinery (compilation cache, execution
context, result objects, about 80 microseconds of CPU a statement) would cost more than
the statement itself on SQLite and a commit's worth of CPU per transaction everywhere.
Driver errors are wrapped exactly as SQLAlchemy wraps them (``DBAPIError`` subclasses,
with ``connection_invalidated`` for a lost connection). Statements of other drivers,
``execute_many`` (SQLAlchemy batches inserts) and ``raw`` go through SQLAlchemy.

Stale connections: pooled connections are not pinged at check-out (a round trip per
unit of work). A connection the server dropped (a restart, a network cut, an idle
timeout) fails at the first statement of the next unit of work; :meth:`Database.run`
then runs that unit of work once more on a fresh connection, which is safe because none
of it reached the database. A connection lost after a statement succeeded (during or
after COMMIT) leaves the outcome unknown: that is a retriable DatabaseUnavailableError,
and the callers' requests are idempotent when retried (sequence numbers, object keys, an
EndTxn that finds its transaction already complete).
"""

from __future__ import annotations

import functools
import logging
import re
import threading
from collections import namedtuple
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy import event, exc
from sqlalchemy.engine import Connection, Engine, Row

from . import sql as sql_files  # type: ignore[attr-defined]  # sql/ installed as txn_broker.sql
from .errors import DatabasePermissionError, DatabaseUnavailableError, TxnBrokerError
from .redaction import mask_url
from .retry import DEFAULT_RETRY_BUDGET_MS, retrying

log = logging.getLogger(__name__)
T = TypeVar("T")

_DIALECT_FRAGMENTS = {
    "postgresql": {
        "now_ms": "(CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT))",
        "for_update": "FOR UPDATE",
        "skip_locked": "FOR UPDATE SKIP LOCKED",
        "next_txn_id": "SELECT nextval('txn_ids')",
    },
    "sqlite": {
        "now_ms": "(CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER))",
        "for_update": "",
        "skip_locked": "",
        "next_txn_id": "UPDATE counters SET value = value + 1 WHERE name = 'txn_id' RETURNING value",
    },
}

#: drivers whose cursors take the named queries directly (:name, or %(name)s once converted)
_NATIVE_PARAMSTYLE = {"pysqlite": "named", "psycopg2": "pyformat"}
#: a bind parameter in a query, as sqlalchemy.text() finds them
_BIND = re.compile(r"(?<![:\w\x5c]):(\w+)(?!:)")
#: a bind parameter in psycopg2's style (not an escaped %%)
_PYFORMAT = re.compile(r"(?<!%)%\((\w+)\)s")

# Errors after which the database certainly rolled the transaction back, so running
# the whole unit of work again is safe: deadlocks, serialisation failures, a busy SQLite.
_ROLLED_BACK_SQLSTATES = {"40001", "40P01", "55P03"}
_INSUFFICIENT_PRIVILEGE = "42501"


class Queries:
    """The named queries, with the dialect's fragments filled in once: as SQLAlchemy text
    clauses (``queries[name]``) and, for a driver in ``_NATIVE_PARAMSTYLE``, as that
    driver's own statement text (``native``)."""

    def __init__(self, dialect: str, driver: str | None = None) -> None:
        fragments = _DIALECT_FRAGMENTS[dialect]

        def fill(sql: str) -> str:
            for name, fragment in fragments.items():
                sql = sql.replace("{" + name + "}", fragment)
            return sql

        filled = {name: fill(sql) for name, sql in sql_files.load_queries().items()}
        self._text = {name: sa.text(sql) for name, sql in filled.items()}
        style = _NATIVE_PARAMSTYLE.get(driver or "")
        self.native: dict[str, str] | None = None
        #: several statements sent as one query string (a round trip for all of them): psycopg2
        #: sends a query as text, and the server runs each statement of it in turn
        self.batches = style == "pyformat"
        self._batch_sql: dict[tuple[str, ...], str] = {}
        if style == "named":
            self.native = filled
        elif style == "pyformat":
            self.native = {name: _BIND.sub(r"%(\1)s", sql.replace("%", "%%")) for name, sql in filled.items()}

    def __getitem__(self, name: str) -> sa.TextClause:
        return self._text[name]

    def batch(self, names: tuple[str, ...]) -> str:
        """The native statements ``names`` as one query string, the parameters of the i-th
        renamed ``s<i>_<name>`` (each statement keeps its own values)."""
        sql = self._batch_sql.get(names)
        if sql is None:
            assert self.native is not None and self.batches
            parts = []
            for i, name in enumerate(names):
                statement = self.native[name].strip().rstrip(";")
                parts.append(_PYFORMAT.sub(rf"%(s{i}_\1)s", statement))
            sql = self._batch_sql[names] = ";\n".join(parts)
        return sql


@functools.lru_cache(maxsize=1024)
def _row_type(columns: tuple[str, ...]) -> type:
    """A tuple type with attribute access and ``_mapping``, like SQLAlchemy's Row."""
    base = namedtuple("Row", columns, rename=True)  # type: ignore[misc]

    def mapping(self: tuple[Any, ...]) -> dict[str, Any]:
        return dict(zip(columns, self, strict=True))

    return type("Row", (base,), {"__slots__": (), "_mapping": property(mapping)})


class Tx:
    """One open database transaction; run named queries in it. Rows have attribute
    access and ``_mapping``."""

    def __init__(self, conn: Connection, queries: Queries) -> None:
        self._conn = conn
        self._queries = queries
        self._cursor: Any = None
        #: statements the database answered so far (0: nothing of this unit of work ran)
        self.statements_done = 0

    def _execute(self, statement: Any, params: Any) -> sa.CursorResult[Any]:
        result = self._conn.execute(statement, params)
        self.statements_done += 1
        return result

    def _native(self, query: str, params: dict[str, Any]) -> Any:
        """Run a named query on the driver's cursor; a driver error is raised as the
        DBAPIError SQLAlchemy would raise, the connection invalidated if it was lost."""
        return self._native_sql(self._queries.native[query], params)  # type: ignore[index]

    def _native_sql(self, sql: str, params: dict[str, Any]) -> Any:
        cursor = self._cursor
        try:
            if cursor is None:
                cursor = self._cursor = self._conn.connection.cursor()
            cursor.execute(sql, params)
        except Exception as error:
            dialect = self._conn.dialect
            if not isinstance(error, dialect.loaded_dbapi.Error):
                raise
            lost = dialect.is_disconnect(error, self._conn.connection.dbapi_connection, cursor)
            if lost:
                self._conn.invalidate(error)  # never back into the pool
            raise exc.DBAPIError.instance(sql, params, error, dialect.loaded_dbapi.Error, hide_parameters=True,
                                          connection_invalidated=lost, dialect=dialect) from error
        self.statements_done += 1
        return cursor

    def _rows(self, cursor: Any, rows: list[tuple[Any, ...]]) -> list[Any]:
        row_type = _row_type(tuple(column[0] for column in cursor.description))
        return [row_type(*row) for row in rows]

    def close(self) -> None:
        cursor, self._cursor = self._cursor, None
        if cursor is not None:
            try:
                cursor.close()
            except Exception:  # its connection is gone: nothing left to release
                pass

    def one(self, query: str, /, **params: Any) -> Row[Any] | None:
        if self._queries.native is None:
            return self._execute(self._queries[query], params).first()
        cursor = self._native(query, params)
        row = cursor.fetchone()
        return None if row is None else self._rows(cursor, [row])[0]  # type: ignore[no-any-return]

    def all(self, query: str, /, **params: Any) -> list[Row[Any]]:
        if self._queries.native is None:
            return list(self._execute(self._queries[query], params).all())
        cursor = self._native(query, params)
        return self._rows(cursor, cursor.fetchall())

    def scalar(self, query: str, /, **params: Any) -> Any:
        if self._queries.native is None:
            return self._execute(self._queries[query], params).scalar()
        row = self._native(query, params).fetchone()
        return None if row is None else row[0]

    def execute(self, query: str, /, **params: Any) -> int:
        """Run a statement; returns the number of rows it changed."""
        if self._queries.native is None:
            return self._execute(self._queries[query], params).rowcount
        return int(self._native(query, params).rowcount)

    def execute_batch(self, statements: Sequence[tuple[str, Mapping[str, Any]]]) -> int:
        """Run the named ``statements`` in order, in one round trip to the server where the
        driver allows it (PostgreSQL through psycopg2: one query string), one by one
        elsewhere (SQLite runs in-process: a statement costs no round trip). For statements
        whose results the caller does not read, except the last one's: returns the number
        of rows the last statement changed. A failing statement fails the whole unit of
        work, as one run alone would."""
        if not statements:
            return 0
        if len(statements) == 1 or self._queries.native is None or not self._queries.batches:
            changed = 0
            for query, params in statements:
                changed = self.execute(query, **params)
            return changed
        names = tuple(query for query, _ in statements)
        merged = {f"s{i}_{key}": value for i, (_, params) in enumerate(statements) for key, value in params.items()}
        cursor = self._native_sql(self._queries.batch(names), merged)
        self.statements_done += len(statements) - 1
        return int(cursor.rowcount)

    def execute_many(self, query: str, rows: list[Mapping[str, Any]]) -> None:
        if rows:
            self._execute(self._queries[query], list(rows))

    def raw(self, statement: str, **params: Any) -> sa.CursorResult[Any]:
        """A literal statement (schema management only; never built from user input)."""
        return self._execute(sa.text(statement), params)


def _error_detail(error: exc.DBAPIError) -> str:
    """One line from a driver error: its first line, or, when libpq tried several hosts (a
    URL naming a primary and its standbys), each host's reason, so that an outage during a
    failover says which server refused and why ("Connection refused", "session is
    read-only")."""
    text = str(error.orig).strip() if error.orig else str(error)
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("\t")]
    hosts = [line for line in lines if line.startswith("connection to server")]
    shown = "; ".join(hosts) if len(hosts) > 1 else (lines[0] if lines else type(error).__name__)
    return f"{type(error.orig).__name__}: {shown}"


def _database_error(url: sa.URL, error: exc.DBAPIError) -> TxnBrokerError:
    """The typed error for a driver error: missing privileges are fatal, the rest retriable."""
    detail = _error_detail(error)
    if getattr(getattr(error, "orig", None), "pgcode", None) == _INSUFFICIENT_PRIVILEGE:
        return DatabasePermissionError(f"database {mask_url(url)} refused: {detail}")
    return DatabaseUnavailableError(f"database {mask_url(url)} failed: {detail}")


class _RolledBackError(DatabaseUnavailableError):
    """The database rolled the whole transaction back (a deadlock, a serialisation failure,
    a busy SQLite): running it again is safe, and is what the retry policy does."""


def _is_rolled_back(error: BaseException) -> bool:
    return isinstance(error, _RolledBackError)


def _is_retriable(error: exc.DBAPIError) -> bool:
    orig = getattr(error, "orig", None)
    if getattr(orig, "pgcode", None) in _ROLLED_BACK_SQLSTATES:
        return True
    message = str(orig).lower()
    return "database is locked" in message or "database table is locked" in message


class Database:
    """A connection pool plus the named queries. Created by :func:`txn_broker.connect`."""

    def __init__(self, url: str, *, pool_size: int = 5, retry_budget_ms: int = DEFAULT_RETRY_BUDGET_MS) -> None:
        try:
            self.url = sa.make_url(url)
        except sa.exc.ArgumentError:
            from .errors import InvalidConfigError

            raise InvalidConfigError(
                f"invalid database URL {mask_url(url)}: expected an SQLAlchemy URL such as "
                "postgresql+psycopg2://user:password@host/db or sqlite:///path") from None
        #: how long :meth:`run` may keep re-running rolled-back transactions (txn_broker.retry)
        self.retry_budget_ms = retry_budget_ms
        self.dialect = self.url.get_backend_name()
        if self.dialect not in _DIALECT_FRAGMENTS:
            from .errors import InvalidConfigError

            raise InvalidConfigError(
                f"unsupported database {mask_url(self.url)}: use postgresql:// or sqlite://"
            )
        self.queries = Queries(self.dialect, self.url.get_driver_name())
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
            # no pool_pre_ping: run() retries a unit of work whose connection turns out dead
            # bound values (a login's password, user data) never reach SQLAlchemy's logs
            # or its exception messages, even with statement logging on
            hide_parameters=True,
            connect_args={"connect_timeout": 10, "application_name": "txn_broker"},
        )

    def run(self, work: Callable[[Tx], T], *, write: bool = True) -> T:
        """Run ``work`` in a transaction, again from the start after a deadlock,
        serialisation failure or busy SQLite, when the database rolled everything back
        (under the retry policy, :mod:`txn_broker.retry`: within ``retry_budget_ms``, or
        once when an outer ``retrying`` decides), and once more at once on a fresh
        connection when the connection was found dead before any statement of ``work``
        succeeded (nothing of it was applied). A connection lost later raises
        DatabaseUnavailableError: the outcome is unknown, and only the caller, which knows
        whether its request is idempotent, may retry it."""
        return retrying(lambda: self._run_once(work, write), self.retry_budget_ms, retriable=_is_rolled_back)

    def _run_once(self, work: Callable[[Tx], T], write: bool) -> T:
        reconnected = False
        while True:
            tx: Tx | None = None
            try:
                with self.engine.connect() as conn:
                    conn.info["txn_broker.write"] = write
                    with conn.begin():
                        tx = Tx(conn, self.queries)
                        try:
                            return work(tx)
                        finally:
                            tx.close()
            except exc.DBAPIError as error:
                if isinstance(error, exc.IntegrityError):
                    raise
                if error.connection_invalidated and not reconnected and (tx is None or tx.statements_done == 0):
                    # the server dropped it, so it dropped the pool's other connections of the
                    # time too, most likely (a restart): start again on fresh ones
                    self.engine.dispose()
                    reconnected = True
                    log.info("database connection was closed by the server; retrying on a new one")
                    continue
                if _is_retriable(error):
                    raise _RolledBackError(f"database {mask_url(self.url)} rolled the transaction back: "
                                           f"{_error_detail(error)}") from None
                raise _database_error(self.url, error) from None

    def read(self, work: Callable[[Tx], T]) -> T:
        """Run read-only ``work`` in one snapshot (REPEATABLE READ on PostgreSQL)."""
        def snapshot(tx: Tx) -> T:
            if self.dialect == "postgresql":
                tx.raw("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            return work(tx)

        return self.run(snapshot, write=False)

    def create_file_directory(self) -> None:
        """An SQLite file's directory, created on first use (nothing for a server)."""
        path = self.url.database if self.dialect == "sqlite" else None
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)

    def dispose(self) -> None:
        self.engine.dispose()
