"""Case 7's baseline: what PostgreSQL itself allows on this machine.

A broker commit is a handful of short database transactions. Its *shape* (transactions,
statements of each kind and the rows they touch, per commit) is read off
``pg_stat_statements`` while one producer commits in this process; worker processes
(``bench.pg_shape_worker``) then run that shape against their own scratch tables, as
durably as the broker's own commits, with 1 and with 16 clients. PostgreSQL's own 16/1
ratio is what the broker's 16/1 ratio is compared with. The same statistics, read while 16
producers run, tell where the broker's time in the database goes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

import sqlalchemy as sa

#: statement kinds the baseline reproduces; everything else (BEGIN, COMMIT, SET ...) is
#: transaction control, counted as transactions where it commits
KINDS = ("select", "insert", "update", "delete")


@dataclass
class Shape:
    """Per broker commit: database transactions, and statements and rows by kind."""

    transactions: float = 0.0
    statements: dict[str, float] = field(default_factory=dict)
    rows: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Shape:
        return cls(**json.loads(text))

    def describe(self) -> str:
        parts = [f"{self.statements[k]:.1f} {k.upper()} ({self.rows.get(k, 0):.1f} rows)"
                 for k in KINDS if self.statements.get(k)]
        return f"{self.transactions:.1f} database transactions, " + ", ".join(parts)


def statement_kind(query: str) -> str | None:
    """``select``/``insert``/``update``/``delete`` for a data statement; ``commit`` for
    COMMIT/END; None for other transaction control and utility statements."""
    words = query.lstrip("( \n\t").split(None, 1)
    first = words[0].lower() if words else ""
    if first in KINDS:
        return first
    if first == "with":  # a CTE: the kind of its main statement
        body = query.lower()
        for kind in ("insert", "update", "delete"):
            if f"{kind} " in body.rsplit(")", 1)[-1]:
                return kind
        return "select"
    if first in ("commit", "end"):
        return "commit"
    return None


def _admin_url(database_url: str) -> str:
    return sa.make_url(database_url).set(drivername="postgresql+psycopg2").render_as_string(hide_password=False)


@contextmanager
def statistics(database_url: str) -> Iterator[sa.Connection]:
    """A connection to the broker's database with ``pg_stat_statements`` available."""
    engine = sa.create_engine(_admin_url(database_url), isolation_level="AUTOCOMMIT", pool_size=1)
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("CREATE EXTENSION IF NOT EXISTS pg_stat_statements"))
            yield conn
    finally:
        engine.dispose()


def reset(conn: sa.Connection) -> None:
    conn.execute(sa.text("SELECT pg_stat_statements_reset()"))


def read(conn: sa.Connection) -> list[dict[str, Any]]:
    """Statements run in this database since the last reset (this session's own left out)."""
    rows = conn.execute(sa.text(
        "SELECT query, calls, rows, total_exec_time FROM pg_stat_statements s "
        "JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = current_database() "
        "AND query NOT ILIKE '%pg_stat_statements%' AND query NOT ILIKE '%pg_stat_activity%'"))
    return [{"query": q, "calls": int(c), "rows": int(r), "total_ms": float(t)} for q, c, r, t in rows]


def shape_of(statements: list[dict[str, Any]], commits: int) -> Shape:
    shape = Shape()
    for s in statements:
        kind = statement_kind(s["query"])
        if kind == "commit":
            shape.transactions += s["calls"] / commits
        elif kind is not None:
            shape.statements[kind] = shape.statements.get(kind, 0.0) + s["calls"] / commits
            shape.rows[kind] = shape.rows.get(kind, 0.0) + s["rows"] / commits
    return shape


def top_statements(statements: list[dict[str, Any]], most: int = 5) -> list[str]:
    """The statements that took the most database time, as report lines."""
    total = sum(s["total_ms"] for s in statements) or 1.0
    lines = []
    for s in sorted(statements, key=lambda s: -s["total_ms"])[:most]:
        text = " ".join(s["query"].split())
        lines.append(f"{s['total_ms'] / total:.0%} of database time, {s['total_ms'] / max(s['calls'], 1):.2f} ms "
                     f"per call: {text[:70]}{'…' if len(text) > 70 else ''}")
    return lines


# -- the baseline's scratch tables ----------------------------------------------------

#: slots per worker: the most rows one statement touches, rounded up
SLOTS = 64

SETUP = [
    "DROP TABLE IF EXISTS bench_shape_state, bench_shape_log",
    "CREATE TABLE bench_shape_state (worker int, slot int, n bigint NOT NULL DEFAULT 0, "
    "updated_ms bigint, PRIMARY KEY (worker, slot))",
    "CREATE TABLE bench_shape_log (id bigserial PRIMARY KEY, worker int NOT NULL, n bigint NOT NULL, "
    "note text NOT NULL)",
    "CREATE INDEX ON bench_shape_log (worker, id)",
]


def prepare(database_url: str, workers: int) -> None:
    engine = sa.create_engine(_admin_url(database_url), isolation_level="AUTOCOMMIT", pool_size=1)
    try:
        with engine.connect() as conn:
            for statement in SETUP:
                conn.execute(sa.text(statement))
            conn.execute(sa.text("INSERT INTO bench_shape_state (worker, slot) SELECT w, s "
                                 "FROM generate_series(0, :w) w, generate_series(0, :s) s"),
                         {"w": workers, "s": SLOTS - 1})
    finally:
        engine.dispose()


def plan(shape: Shape) -> list[list[tuple[str, int]]]:
    """One commit's worth of work: ``round(transactions)`` transactions, the statements of
    each kind dealt round-robin between them, each touching its share of the rows."""
    transactions = max(round(shape.transactions), 1)
    txns: list[list[tuple[str, int]]] = [[] for _ in range(transactions)]
    slot = 0
    for kind in KINDS:
        calls = round(shape.statements.get(kind, 0.0))
        if not calls:
            continue
        per_call = max(min(round(shape.rows.get(kind, 0.0) / calls), SLOTS), 1 if kind != "delete" else 0)
        for _ in range(calls):
            txns[slot % transactions].append((kind, per_call))
            slot += 1
    return txns


STATEMENTS = {
    "select": "SELECT n FROM bench_shape_state WHERE worker = :w AND slot < :rows",
    "update": "UPDATE bench_shape_state SET n = n + 1, updated_ms = :now WHERE worker = :w AND slot < :rows",
    "insert": "INSERT INTO bench_shape_log (worker, n, note) SELECT :w, g, 'segment' FROM generate_series(1, :rows) g",
    "delete": "DELETE FROM bench_shape_log WHERE id IN (SELECT id FROM bench_shape_log WHERE worker = :w "
              "ORDER BY id LIMIT :rows)",
}
