"""Tx.execute_batch: several named statements in one round trip on PostgreSQL (one query
string through psycopg2), one by one on SQLite; each statement keeps its own parameters,
the count is the last statement's, and a failing statement fails the whole unit of work."""

from __future__ import annotations

import pytest
from sqlalchemy import exc

from txn_broker.database import Database


def _entry(producer_id: int, seq: int, reason: str) -> dict[str, object]:
    return {"producer_id": producer_id, "seq": seq, "transactional_id": f"tid-{producer_id}",
            "producer_epoch": seq, "txn_id": None, "from_state": "Empty", "to_state": "Ongoing",
            "reason": reason}


def _history(db: Database) -> list[tuple[int, int, str, str]]:
    rows = db.run(lambda tx: tx.raw(
        "SELECT producer_id, seq, transactional_id, reason FROM txn_state_log ORDER BY producer_id, seq").all(),
        write=False)
    return [tuple(r) for r in rows]


def test_a_batch_runs_each_statement_with_its_own_parameters(backend):
    db = Database(backend.database_url)
    try:
        changed = db.run(lambda tx: tx.execute_batch([
            ("insert_state_log", _entry(7001, 1, "first")),
            ("insert_state_log", _entry(7002, 2, "second")),
            ("delete_transactional_id", {"transactional_id": "nobody"}),  # changes no row
        ]))
        assert changed == 0  # the last statement's count
        assert db.run(lambda tx: tx.execute_batch([
            ("insert_state_log", _entry(7003, 3, "third")),
            ("insert_state_log", _entry(7003, 4, "fourth")),
        ])) == 1
        assert [r for r in _history(db) if r[0] >= 7001] == [
            (7001, 1, "tid-7001", "first"), (7002, 2, "tid-7002", "second"),
            (7003, 3, "tid-7003", "third"), (7003, 4, "tid-7003", "fourth")]
    finally:
        db.dispose()


def test_a_failing_statement_of_a_batch_writes_nothing(backend):
    db = Database(backend.database_url)
    try:
        db.run(lambda tx: tx.execute("insert_state_log", **_entry(7101, 1, "kept")))
        with pytest.raises(exc.IntegrityError):
            db.run(lambda tx: tx.execute_batch([
                ("insert_state_log", _entry(7102, 1, "rolled back with the batch")),
                ("insert_state_log", _entry(7101, 1, "a duplicate key")),
            ]))
        assert [r for r in _history(db) if r[0] >= 7101] == [(7101, 1, "tid-7101", "kept")]
    finally:
        db.dispose()
