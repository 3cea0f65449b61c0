"""Applying sql/migrations in order must give exactly sql/schema.sql, on both databases."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import sqlalchemy as sa

from txn_broker import sql as sql_files
from txn_broker.database import Database
from txn_broker.migrations import applied_versions, split_statements, upgrade


def _describe(url: str) -> dict[str, Any]:
    engine = sa.create_engine(url)
    try:
        insp = sa.inspect(engine)
        out: dict[str, Any] = {}
        for table in sorted(insp.get_table_names()):
            out[table] = {
                "columns": [
                    (c["name"], str(c["type"]), c["nullable"], str(c.get("default")))
                    for c in insp.get_columns(table)
                ],
                "pk": insp.get_pk_constraint(table)["constrained_columns"],
                "fks": sorted(
                    (tuple(f["constrained_columns"]), f["referred_table"], tuple(f["referred_columns"]))
                    for f in insp.get_foreign_keys(table)
                ),
                "indexes": sorted(
                    (i["name"], tuple(i["column_names"]), bool(i["unique"]))
                    for i in insp.get_indexes(table)
                ),
                "unique": sorted(tuple(u["column_names"]) for u in insp.get_unique_constraints(table)),
                "checks": sorted(c["sqltext"] for c in insp.get_check_constraints(table)),
            }
        with engine.connect() as conn:
            out["__counters__"] = sorted(conn.execute(sa.text("SELECT name, value FROM counters")).all())
            if engine.dialect.name == "postgresql":  # transaction ids: a sequence, where it stands
                out["__sequences__"] = sorted(insp.get_sequence_names())
                out["__txn_ids__"] = conn.execute(sa.text("SELECT last_value, is_called FROM txn_ids")).one()
        return out
    finally:
        engine.dispose()


def _apply_schema(url: str) -> None:
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            for statement in split_statements(sql_files.schema(), engine.dialect.name):
                conn.execute(sa.text(statement))
    finally:
        engine.dispose()


def _urls(request: pytest.FixtureRequest, kind: str, tmp_path) -> tuple[str, str]:
    if kind == "sqlite":
        return f"sqlite:///{tmp_path}/migrated.db", f"sqlite:///{tmp_path}/schema.db"
    pg = request.getfixturevalue("pg_server")
    suffix = uuid.uuid4().hex[:8]
    return pg.new_database(f"migrated_{suffix}"), pg.new_database(f"fromschema_{suffix}")


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_migrations_give_the_schema(request, kind, tmp_path):
    migrated, from_schema = _urls(request, kind, tmp_path)
    applied = upgrade(migrated)
    assert applied == [v for v, _ in sql_files.migrations()]
    _apply_schema(from_schema)
    assert _describe(migrated) == _describe(from_schema)


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_upgrade_is_idempotent_and_recorded(request, kind, tmp_path):
    url, _ = _urls(request, kind, tmp_path)
    first = upgrade(url)
    assert first and upgrade(url) == []
    db = Database(url)
    try:
        assert applied_versions(db) == first
    finally:
        db.dispose()


def test_migration_versions_are_ordered_and_unique():
    versions = [v for v, _ in sql_files.migrations()]
    assert versions == sorted(versions) and len(set(versions)) == len(versions)
    assert all(v[:4].isdigit() for v in versions)


def test_statements_for_one_database_only():
    script = """-- a comment; with a semicolon
CREATE TABLE a (x INT);
-- only on postgresql
CREATE SEQUENCE s;
-- only on sqlite
INSERT INTO a VALUES (1);
SELECT 1
"""
    assert split_statements(script, "postgresql") == ["CREATE TABLE a (x INT)", "CREATE SEQUENCE s", "SELECT 1"]
    assert split_statements(script, "sqlite") == ["CREATE TABLE a (x INT)", "INSERT INTO a VALUES (1)", "SELECT 1"]


def test_migration_0003_continues_transaction_ids_where_the_counter_stopped(pg_server):
    """A PostgreSQL database that allocated transaction ids from counters (0001, 0002)
    moves to the sequence without reusing an id."""
    url = pg_server.new_database(f"seq_{uuid.uuid4().hex[:8]}")
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            for version, script in sql_files.migrations():
                if version >= "0003":
                    break
                for statement in split_statements(script, "postgresql"):
                    conn.execute(sa.text(statement))
            conn.execute(sa.text("UPDATE counters SET value = 41 WHERE name = 'txn_id'"))
            conn.execute(sa.text("CREATE TABLE schema_migrations (version TEXT PRIMARY KEY, "
                                 "applied_ms BIGINT NOT NULL)"))
            conn.execute(sa.text("INSERT INTO schema_migrations VALUES ('0001_initial', 0), ('0002_gc', 0)"))
        assert upgrade(url)[0] == "0003_txn_id_sequence"  # then any later migration
        db = Database(url)
        try:
            assert db.run(lambda tx: tx.scalar("next_txn_id")) == 42
            assert db.run(lambda tx: tx.scalar("next_txn_id")) == 43
        finally:
            db.dispose()
        with engine.connect() as conn:  # an older client's counter is gone: it cannot collide
            assert conn.execute(sa.text("SELECT COUNT(*) FROM counters WHERE name = 'txn_id'")).scalar() == 0
    finally:
        engine.dispose()
