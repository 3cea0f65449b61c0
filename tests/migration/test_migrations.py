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
        return out
    finally:
        engine.dispose()


def _apply_schema(url: str) -> None:
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            for statement in split_statements(sql_files.schema()):
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
