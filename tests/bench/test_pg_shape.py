"""Case 7's PostgreSQL baseline: how a broker commit's statements are classified and
replayed (the run itself is in test_bench_smoke)."""

from __future__ import annotations

import pytest

from bench.pg_shape import Shape, plan, shape_of, statement_kind


@pytest.mark.parametrize(("query", "kind"), [
    ("SELECT 1", "select"),
    ("  insert into segments VALUES ($1)", "insert"),
    ("UPDATE txn SET x = $1", "update"),
    ("DELETE FROM t", "delete"),
    ("WITH moved AS (SELECT id FROM t) UPDATE t SET x = 1 FROM moved", "update"),
    ("WITH a AS (SELECT 1) SELECT * FROM a", "select"),
    ("COMMIT", "commit"),
    ("BEGIN", None),
    ("SET statement_timeout = $1", None),
])
def test_statement_kinds(query, kind):
    assert statement_kind(query) == kind


def test_shape_per_commit_and_its_replay():
    statements = [
        {"query": "COMMIT", "calls": 30, "rows": 0, "total_ms": 1.0},
        {"query": "BEGIN", "calls": 30, "rows": 0, "total_ms": 1.0},
        {"query": "INSERT INTO segments VALUES ($1)", "calls": 20, "rows": 40, "total_ms": 2.0},
        {"query": "UPDATE txn SET x = $1", "calls": 10, "rows": 10, "total_ms": 2.0},
        {"query": "SELECT x FROM txn", "calls": 50, "rows": 50, "total_ms": 2.0},
    ]
    shape = shape_of(statements, commits=10)
    assert shape.transactions == 3
    assert shape.statements == {"insert": 2, "update": 1, "select": 5}
    assert shape.rows == {"insert": 4, "update": 1, "select": 5}
    work = plan(Shape.from_json(shape.to_json()))
    assert len(work) == 3
    flat = [step for txn in work for step in txn]
    assert sorted(flat) == sorted([("select", 1)] * 5 + [("insert", 2)] * 2 + [("update", 1)])
    assert all(txn for txn in work)  # every transaction does something
