"""The warehouse sink's compare-and-set: of several loads racing for one group's offsets,
exactly one writes its rows; the others write nothing and raise SinkOffsetConflictError.
On SQLite and on a real PostgreSQL (where the racers block on the row lock)."""

from __future__ import annotations

import threading
import uuid

import pyarrow as pa
import pytest
import sqlalchemy as sa
from txn_broker_airflow.errors import SinkOffsetConflictError, WarehouseTypeError
from txn_broker_airflow.warehouse import Sink, Target, sql_type

pytestmark = [pytest.mark.airflow, pytest.mark.integration]

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])


@pytest.fixture(params=["sqlite", "postgres"])
def target(request, tmp_path):  # type: ignore[no-untyped-def]
    if request.param == "sqlite":
        engine = sa.create_engine(f"sqlite:///{tmp_path / 'wh.db'}", connect_args={"timeout": 30})
    else:
        pg = request.getfixturevalue("pg_server")
        engine = sa.create_engine(pg.new_database(f"sink_{uuid.uuid4().hex[:10]}"))
    yield Target(engine, request.param, False)
    engine.dispose()


def rows(start: int, n: int) -> pa.Table:
    return pa.table({"id": list(range(start, start + n)), "name": [f"r{i}" for i in range(start, start + n)]},
                    schema=SCHEMA)


def count(target: Target) -> int:
    with target.engine.connect() as conn:
        return int(conn.execute(sa.text("SELECT COUNT(*) FROM loaded")).scalar())


def test_first_load_then_stale_retry_is_refused(target) -> None:  # type: ignore[no-untyped-def]
    sink = Sink(target, "loaded", SCHEMA)
    assert sink.write("g", "t", rows(0, 3), {0: None}, {0: 3}) == 3
    with pytest.raises(SinkOffsetConflictError):  # a retry that read the offsets before the commit
        sink.write("g", "t", rows(0, 3), {0: None}, {0: 3})
    with pytest.raises(SinkOffsetConflictError):
        sink.write("g", "t", rows(0, 3), {0: 1}, {0: 4})
    assert sink.next_offsets("g", "t") == {0: 3}
    assert sink.write("g", "t", rows(3, 2), {0: 3}, {0: 5}) == 2
    assert count(target) == 5 and sink.next_offsets("g", "t") == {0: 5}


def test_racing_loads_write_once(target) -> None:  # type: ignore[no-untyped-def]
    sink = Sink(target, "loaded", SCHEMA)
    sink.write("g", "t", rows(0, 1), {0: None}, {0: 1})
    outcomes: list[str] = []
    barrier = threading.Barrier(6)

    def load(i: int) -> None:
        barrier.wait()
        try:
            sink.write("g", "t", rows(100 + 10 * i, 10), {0: 1}, {0: 11})
            outcomes.append("won")
        except SinkOffsetConflictError:
            outcomes.append("lost")

    threads = [threading.Thread(target=load, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(outcomes) == ["lost"] * 5 + ["won"]
    assert count(target) == 11 and sink.next_offsets("g", "t") == {0: 11}


def test_unsupported_column_type_is_a_clear_error() -> None:
    with pytest.raises(WarehouseTypeError):
        sql_type(pa.list_(pa.int64()))


def test_decimals_load_exactly(target) -> None:  # type: ignore[no-untyped-def]
    """Issue 28, finding 9: the SQLite fallback stored numeric amounts as REAL, a binary
    float; now as text at the column's scale, read back as the same Decimal (summed to the
    cent). PostgreSQL stays numeric(p, s)."""
    from decimal import Decimal

    schema = pa.schema([("id", pa.int64()), ("amount", pa.decimal128(18, 2))])
    amounts = [Decimal("0.10"), Decimal("0.20"), Decimal("1234567890123456.78"), Decimal("-5.05"), None]
    table = pa.table({"id": list(range(len(amounts))), "amount": amounts}, schema=schema)
    sink = Sink(target, "amounts", schema)
    sink.write("g", "t", table, {0: None}, {0: len(amounts)})
    with target.engine.connect() as conn:
        back = conn.execute(sa.select(sink.table.c.amount).order_by(sink.table.c.id)).scalars().all()
        stored = conn.execute(sa.text("SELECT amount FROM amounts WHERE id = 2")).scalar()
    assert back == amounts and all(isinstance(a, Decimal) for a in back[:-1])
    assert sum(a for a in back if a is not None) == Decimal("1234567890123452.03")
    assert Decimal(str(stored)) == Decimal("1234567890123456.78")  # as stored, not via our type
    if target.dialect == "postgresql":
        with target.engine.connect() as conn:
            kind = conn.execute(sa.text("SELECT data_type FROM information_schema.columns "
                                        "WHERE table_name = 'amounts' AND column_name = 'amount'")).scalar()
        assert kind == "numeric"
    # a second load into the existing table (create_table=False) keeps them exact too
    again = Sink(target, "amounts", schema, create_table=False)
    again.write("g", "t", pa.table({"id": [9], "amount": [Decimal("0.01")]}, schema=schema), {0: len(amounts)},
                {0: len(amounts) + 1})
    with target.engine.connect() as conn:
        total = conn.execute(sa.select(again.table.c.amount).where(again.table.c.id == 9)).scalar()
    assert total == Decimal("0.01")
