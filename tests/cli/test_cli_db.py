"""``txn-broker db upgrade`` through the console script, on both backends."""

from __future__ import annotations

import pytest
from _cli import cli_env, error_line, run

from txn_broker import sql as sql_files

pytestmark = pytest.mark.integration
VERSIONS = [v for v, _ in sql_files.migrations()]


def test_db_upgrade_on_a_new_database(backend, request, tmp_path):
    if backend.name == "postgres":
        url = request.getfixturevalue("pg_server").new_database()
    else:
        url = f"sqlite:///{tmp_path}/new/broker.db"  # the directory does not exist yet
    env = cli_env(backend, TXN_BROKER_DATABASE_URL=url)
    if backend.name == "postgres":  # PostgreSQL is never migrated implicitly
        assert "run `txn-broker db upgrade`" in error_line(run(backend, "topics", "list", expect=1, env=env))
    first = run(backend, "--json", "db", "upgrade", env=env).json()
    assert first == {"database": first["database"], "applied": VERSIONS, "current_version": VERSIONS[-1]}
    assert "***" in first["database"] or backend.name == "sqlite"
    again = run(backend, "db", "upgrade", env=env).out.strip()
    assert again.endswith(f"is current ({VERSIONS[-1]}); nothing to apply.")
    assert run(backend, "--json", "topics", "list", env=env).json() == {"topics": []}
