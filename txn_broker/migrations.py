"""Applying the versioned migrations of ``sql/migrations`` (``txn-broker db upgrade``)."""

from __future__ import annotations

import re

from . import sql as sql_files  # type: ignore[attr-defined]  # sql/ installed as txn_broker.sql
from .database import Database, Tx
from .errors import SchemaVersionError

_ONLY_ON = re.compile(r"--\s*only on (?P<dialect>postgresql|sqlite)\s*$")


def split_statements(script: str, dialect: str) -> list[str]:
    """The statements of a SQL script for ``dialect`` (``postgresql`` or ``sqlite``); a
    statement ends with a semicolon at the end of a line (none inside literals in our
    files). A statement after a comment line ``-- only on postgresql`` (or ``-- only on
    sqlite``) is kept for that database only."""
    statements: list[str] = []
    lines: list[str] = []
    only: str | None = None

    def end() -> None:
        text = "\n".join(lines).strip().removesuffix(";").strip()
        if text and only in (None, dialect):
            statements.append(text)

    for line in script.splitlines():
        stripped = line.strip()
        if stripped.startswith("--"):
            match = _ONLY_ON.fullmatch(stripped)
            if match:
                only = match["dialect"]
            continue
        lines.append(line)
        if stripped.endswith(";"):
            end()
            lines, only = [], None
    end()
    return statements


def _ensure_version_table(tx: Tx) -> None:
    tx.raw(
        "CREATE TABLE IF NOT EXISTS schema_migrations ("
        "version TEXT PRIMARY KEY, applied_ms BIGINT NOT NULL)"
    )


def applied_versions(db: Database) -> list[str]:
    def work(tx: Tx) -> list[str]:
        if db.dialect == "postgresql":
            exists = tx.raw("SELECT to_regclass('schema_migrations') IS NOT NULL").scalar()
        else:
            exists = tx.raw(
                "SELECT COUNT(*) FROM sqlite_master WHERE type='table' AND name='schema_migrations'"
            ).scalar()
        if not exists:
            return []
        return [r[0] for r in tx.raw("SELECT version FROM schema_migrations ORDER BY version")]

    return db.run(work, write=False)


def pending(db: Database) -> list[str]:
    done = set(applied_versions(db))
    return [v for v, _ in sql_files.migrations() if v not in done]


def upgrade_db(db: Database) -> list[str]:
    """Apply every migration not yet applied, each in its own transaction, under a lock
    so concurrent upgrades (several processes opening a new embedded broker) are safe.
    Returns the versions applied."""

    def work(tx: Tx) -> list[str]:
        if db.dialect == "postgresql":
            tx.raw("SELECT pg_advisory_xact_lock(74657373)")  # serialise concurrent upgrades
        _ensure_version_table(tx)
        done = {r[0] for r in tx.raw("SELECT version FROM schema_migrations")}
        applied = []
        for version, script in sql_files.migrations():
            if version in done:
                continue
            for statement in split_statements(script, db.dialect):
                tx.raw(statement)
            tx.raw(
                "INSERT INTO schema_migrations (version, applied_ms) VALUES (:v, :t)",
                v=version,
                t=int(tx.scalar("now_ms")),
            )
            applied.append(version)
        if applied and db.dialect == "postgresql":
            from .roles import apply_in, roles_exist

            if roles_exist(tx):  # new tables get the least-privilege grants at once
                apply_in(tx)
        return applied

    return db.run(work)


def latest_version() -> str:
    """The schema version this code expects: its last migration."""
    return str(sql_files.migrations()[-1][0])


def upgrade(database_url: str) -> list[str]:
    """Bring the database at ``database_url`` to the current schema (an SQLite file's
    directory is created first)."""
    db = Database(database_url)
    try:
        db.create_file_directory()
        return upgrade_db(db)
    finally:
        db.dispose()


def require_current(db: Database) -> None:
    """Raise a clear error when the schema is missing or behind this code."""
    missing = pending(db)
    if missing:
        raise SchemaVersionError(
            f"the broker schema is not current (missing {', '.join(missing)}): "
            "run `txn-broker db upgrade` with the owner role"
        )
