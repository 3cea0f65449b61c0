"""The SQL side of ``TopicToPostgresOperator``: which database, its tables, and the
exactly-once write of rows together with the sink's offsets.

The sink's offsets live in the target database, in ``txn_broker_sink_offsets``
(group_id, topic, partition, next_offset): the next offset to load per partition. A load
reads them, and in ONE database transaction inserts the rows and moves the offsets with
a compare-and-set (``UPDATE ... WHERE next_offset = :expected``; ``INSERT`` for a first
load, which the primary key makes fail on a race). Two loads racing for one group cannot
both succeed: the loser rolls back everything and raises SinkOffsetConflictError. A
retry after a crash finds the offsets exactly as committed with the rows it loaded.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import sqlalchemy as sa

from txn_broker import mask_url

from .errors import SinkOffsetConflictError, WarehouseTypeError, WarehouseUnavailableError, WarehouseURLError

log = logging.getLogger(__name__)

SINK_OFFSETS_TABLE = "txn_broker_sink_offsets"
WAREHOUSE_URL_ENV = "TXN_BROKER_WAREHOUSE_URL"


@dataclass(frozen=True)
class Target:
    """The database a load writes into."""

    engine: sa.Engine
    description: str  # safe to log: no password
    fallback: bool  # True: the embedded SQLite warehouse, because nothing was configured
    #: where the URL came from, for messages: "connection 'pg'", "warehouse_url", ...
    source: str = "embedded default"
    #: the URL's secrets (its password), to keep out of messages
    secrets: tuple[str, ...] = ()

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name


def resolve_target(postgres_conn_id: str | None, warehouse_url: str | None) -> Target:
    """``postgres_conn_id`` (through the Postgres provider's hook), else ``warehouse_url``,
    else ``$TXN_BROKER_WAREHOUSE_URL``, else SQLite at ``$TXN_BROKER_HOME/warehouse.db``."""
    if postgres_conn_id:
        from airflow.providers.postgres.hooks.postgres import PostgresHook

        url = PostgresHook(postgres_conn_id=postgres_conn_id).sqlalchemy_url
        source = f"connection {postgres_conn_id!r}"
        return Target(_engine(url, source), f"{source} ({mask_url(url)})", False, source, _secrets(url))
    source = "the task's warehouse_url" if warehouse_url else f"${WAREHOUSE_URL_ENV}"
    url_text = warehouse_url or os.environ.get(WAREHOUSE_URL_ENV)
    if url_text:
        return Target(_engine(url_text, source), mask_url(url_text), False, source, _secrets(url_text))
    from txn_broker import broker_home

    path = broker_home() / "warehouse.db"
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return Target(sa.create_engine(f"sqlite:///{path}"), f"sqlite:///{path}", True)


def _secrets(url: str | sa.URL) -> tuple[str, ...]:
    from txn_broker import url_secrets

    return tuple(url_secrets(str(url) if isinstance(url, str) else url.render_as_string(hide_password=False)))


def _engine(url: str | sa.URL, source: str) -> sa.Engine:
    """An engine for ``url``; WarehouseURLError (password masked) when it is not one."""
    try:
        return sa.create_engine(url, pool_pre_ping=True)
    except (sa.exc.ArgumentError, sa.exc.NoSuchModuleError, ImportError) as error:
        problem = "not an SQLAlchemy URL" if isinstance(error, sa.exc.ArgumentError) else (
            f"no driver for it is installed ({type(error).__name__})")
        raise WarehouseURLError(f"warehouse URL {mask_url(url)} from {source}: {problem}; expected e.g. "
                                "postgresql+psycopg2://user:password@host/db") from None


def open_sink(target: Target, table: str, schema: pa.Schema, db_schema: str | None = None,
              create_table: bool = True) -> Sink:
    """:class:`Sink` on ``target``: the first contact with the warehouse, so a database that
    cannot be reached or refuses the login is a WarehouseUnavailableError naming where its
    URL came from, password masked."""
    from txn_broker import redact

    try:
        return Sink(target, table, schema, db_schema, create_table)
    except (sa.exc.OperationalError, sa.exc.InterfaceError) as error:
        cause = redact(str(error.orig if error.orig is not None else error).strip().splitlines()[0],
                       list(target.secrets))
        raise WarehouseUnavailableError(f"warehouse {target.description} (from {target.source}) cannot be used: "
                                        f"{cause}") from None


class ExactDecimalText(sa.types.TypeDecorator[Decimal]):
    """A decimal kept exactly in SQLite, which has no decimal type (a ``NUMERIC`` column
    stores REAL, a binary float): the value's text, at the column's scale (``"10.50"``),
    read back as the same ``Decimal``. PostgreSQL columns stay ``numeric(p, s)``."""

    impl = sa.Text
    cache_ok = True

    def __init__(self, scale: int) -> None:
        super().__init__()
        self.scale = scale

    def process_bind_param(self, value: Any, dialect: sa.Dialect) -> str | None:
        if value is None:
            return None
        exact = value if isinstance(value, Decimal) else Decimal(str(value))
        return str(exact.quantize(Decimal(1).scaleb(-self.scale))) if self.scale >= 0 else str(exact)

    def process_result_value(self, value: Any, dialect: sa.Dialect) -> Decimal | None:
        return None if value is None else Decimal(str(value))


def sql_type(arrow_type: pa.DataType, dialect: str = "postgresql") -> sa.types.TypeEngine[Any]:
    """The SQL column type that holds ``arrow_type`` in ``dialect``. Raises WarehouseTypeError."""
    t = arrow_type
    if pa.types.is_decimal(t) and dialect == "sqlite":
        return ExactDecimalText(t.scale)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return sa.Text()
    if pa.types.is_boolean(t):
        return sa.Boolean()
    if pa.types.is_int8(t) or pa.types.is_int16(t) or pa.types.is_uint8(t):
        return sa.SmallInteger()
    if pa.types.is_int32(t) or pa.types.is_uint16(t):
        return sa.Integer()
    if pa.types.is_integer(t):
        return sa.BigInteger()
    if pa.types.is_floating(t):
        return sa.Double()
    if pa.types.is_decimal(t):
        return sa.Numeric(t.precision, t.scale)
    if pa.types.is_date(t):
        return sa.Date()
    if pa.types.is_timestamp(t):
        return sa.DateTime(timezone=t.tz is not None)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return sa.LargeBinary()
    raise WarehouseTypeError(f"no SQL column type for Arrow type {t}")


def offsets_table(metadata: sa.MetaData) -> sa.Table:
    return sa.Table(
        SINK_OFFSETS_TABLE, metadata,
        sa.Column("group_id", sa.String(249), primary_key=True),
        sa.Column("topic", sa.String(249), primary_key=True),
        sa.Column("partition", sa.Integer, primary_key=True),
        sa.Column("next_offset", sa.BigInteger, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.func.current_timestamp()),
    )


def data_table(metadata: sa.MetaData, name: str, schema: pa.Schema, db_schema: str | None,
               dialect: str = "postgresql") -> sa.Table:
    return sa.Table(name, metadata, *(sa.Column(f.name, sql_type(f.type, dialect)) for f in schema),
                    schema=db_schema)


class Sink:
    """One target table plus the sink offsets table, in one database."""

    def __init__(self, target: Target, table: str, schema: pa.Schema, db_schema: str | None = None,
                 create_table: bool = True) -> None:
        self.target = target
        metadata = sa.MetaData()
        self.offsets = offsets_table(metadata)
        if create_table:
            self.table = data_table(metadata, table, schema, db_schema, target.dialect)
            metadata.create_all(target.engine)
        else:
            offsets_table(sa.MetaData()).create(target.engine, checkfirst=True)
            self.table = sa.Table(table, metadata, schema=db_schema, autoload_with=target.engine)
            if target.dialect == "sqlite":  # a decimal column made by create_table=True: TEXT
                for f in schema:
                    column = self.table.c.get(f.name)
                    if pa.types.is_decimal(f.type) and column is not None and isinstance(column.type, sa.Text):
                        column.type = ExactDecimalText(f.type.scale)
        self.columns = [c for c in schema.names if c in self.table.c]

    def next_offsets(self, group_id: str, topic: str) -> dict[int, int]:
        """The committed next offset per partition of ``topic`` for ``group_id``."""
        o = self.offsets
        with self.target.engine.connect() as conn:
            rows = conn.execute(sa.select(o.c.partition, o.c.next_offset)
                                .where(o.c.group_id == group_id, o.c.topic == topic)).all()
        return {int(r.partition): int(r.next_offset) for r in rows}

    def write(self, group_id: str, topic: str, rows: pa.Table, expected: dict[int, int | None],
              new_offsets: dict[int, int]) -> int:
        """In ONE database transaction: move the offsets of ``topic`` from ``expected``
        (None: no row yet) to ``new_offsets`` and insert ``rows``. Returns rows inserted.
        Raises SinkOffsetConflictError (nothing written) if another load moved them."""
        o = self.offsets
        with self.target.engine.begin() as conn:
            # offsets first: on PostgreSQL a racing load blocks here on the row lock
            # and then fails its compare-and-set, before inserting anything.
            for partition in sorted(new_offsets):
                before = expected.get(partition)
                if before is None:
                    try:
                        conn.execute(sa.insert(o).values(group_id=group_id, topic=topic, partition=partition,
                                                         next_offset=new_offsets[partition]))
                    except sa.exc.IntegrityError:
                        raise SinkOffsetConflictError(
                            f"sink offsets of group {group_id!r} for {topic}-{partition} were created "
                            "by a concurrent load of this group") from None
                    continue
                changed = conn.execute(
                    sa.update(o).where(o.c.group_id == group_id, o.c.topic == topic,
                                       o.c.partition == partition, o.c.next_offset == before)
                    .values(next_offset=new_offsets[partition], updated_at=sa.func.current_timestamp())
                ).rowcount
                if changed != 1:
                    raise SinkOffsetConflictError(
                        f"sink offsets of group {group_id!r} for {topic}-{partition} moved away from "
                        f"{before}: another load of this group ran concurrently")
            if rows.num_rows:
                conn.execute(sa.insert(self.table), rows.select(self.columns).to_pylist())
        return rows.num_rows

    def dispose(self) -> None:
        self.target.engine.dispose()
