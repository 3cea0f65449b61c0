"""The broker's SQL, kept as SQL: the schema, its migrations and the named queries.

This directory is installed as the package ``txn_broker.sql``.
"""

from __future__ import annotations

import re
from importlib import resources

_BLOCK = re.compile(r"^-- (?P<name>[a-z_]+) --\n(?:--[^\n]*\n)*(?P<sql>.*?)(?=^-- [a-z_]+ --\n|\Z)",
                    re.M | re.S)


def _read(name: str) -> str:
    return resources.files(__name__).joinpath(name).read_text(encoding="utf-8")


def load_queries() -> dict[str, str]:
    """Named blocks of queries.sql: ``{name: sql}`` with placeholders not yet filled."""
    queries = {m["name"]: m["sql"].strip().rstrip(";") for m in _BLOCK.finditer(_read("queries.sql"))}
    if not queries:
        raise RuntimeError("queries.sql holds no named query")
    return queries


def schema() -> str:
    """The whole current schema."""
    return _read("schema.sql")


def migrations() -> list[tuple[str, str]]:
    """``(version, sql)`` for every migration, in order."""
    folder = resources.files(__name__).joinpath("migrations")
    names = sorted(p.name for p in folder.iterdir() if p.name.endswith(".sql"))
    return [(n.removesuffix(".sql"), folder.joinpath(n).read_text(encoding="utf-8")) for n in names]


def roles() -> str:
    """PostgreSQL roles for least privilege (owner, client, monitor)."""
    return _read("roles.sql")
