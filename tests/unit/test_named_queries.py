"""sql/queries.sql holds every query by name; each one is run by the code (no dead SQL)."""

from __future__ import annotations

from pathlib import Path

from txn_broker import sql as sql_files  # type: ignore[attr-defined]

ROOT = Path(__file__).resolve().parents[2]


def test_every_named_query_is_used() -> None:
    code = "\n".join(p.read_text() for d in ("txn_broker", "plugins", "bench") for p in (ROOT / d).rglob("*.py"))
    unused = [name for name in sql_files.load_queries() if f'"{name}"' not in code and f"'{name}'" not in code]
    assert unused == []
