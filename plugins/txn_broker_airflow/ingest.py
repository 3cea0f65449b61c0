"""Reading ingest sources (CSV, JSON lines, Parquet, or a callable's output) as Arrow
tables of exactly a topic's schema, and fingerprinting them for exactly-once ingest.
Files are read by the broker's one reader (``txn_broker.read_records``), the same as
``txn-broker produce``."""

from __future__ import annotations

import glob
import hashlib
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa

from txn_broker import RECORD_FORMATS, guess_format, read_records

from .errors import CallableResultError, SourceNotFoundError, UnsupportedFormatError

FORMATS = RECORD_FORMATS


def resolve_sources(source: str | Iterable[str]) -> list[Path]:
    """The files named by ``source``: paths or glob patterns (sorted, deduplicated).
    Raises SourceNotFoundError when nothing matches."""
    patterns = [source] if isinstance(source, str | os.PathLike) else list(source)
    found: set[Path] = set()
    for pattern in patterns:
        text = os.fspath(pattern)
        matches = glob.glob(text) if glob.has_magic(text) else [text]
        found.update(Path(m).resolve() for m in matches if Path(m).is_file())
    if not found:
        raise SourceNotFoundError(f"no input file matches {patterns!r}")
    return sorted(found)


def detect_format(path: Path, fmt: str | None = None) -> str:
    """``fmt`` if given, else from the file suffix (``.gz`` ignored), as the broker's one
    reader of record files (``txn_broker.guess_format``) sees it."""
    if fmt:
        if fmt not in FORMATS:
            raise UnsupportedFormatError(f"format {fmt!r} is not one of {FORMATS}")
        return fmt
    found = guess_format(str(path))
    if found is None:
        raise UnsupportedFormatError(f"cannot infer the format of {path.name}; pass format= one of {FORMATS}")
    return found


def read_file(path: Path, fmt: str, schema: pa.Schema) -> pa.Table:
    """``path`` as a table of exactly ``schema``, read by the broker's one reader of record
    files (the same as ``txn-broker produce``): a column the topic does not have is an error
    (SchemaMismatchError), a missing one is null, an empty CSV cell is null (a quoted ``""``
    stays an empty string). Raises SchemaMismatchError or InvalidInputError (the task fails;
    nothing is written)."""
    return read_records(path, schema, fmt)


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """Select ``schema``'s columns (missing ones become nulls) and cast to its types."""
    columns = []
    for f in schema:
        if f.name in table.column_names:
            columns.append(table.column(f.name).cast(f.type))
        else:
            columns.append(pa.nulls(table.num_rows, f.type))
    return pa.Table.from_arrays(columns, schema=schema)


def callable_table(func: Callable[..., Any], kwargs: dict[str, Any], schema: pa.Schema) -> pa.Table:
    """Call ``func(**kwargs)``; its pyarrow Table / RecordBatch / list of dicts as a table
    of ``schema``. Raises CallableResultError for anything else."""
    result = func(**kwargs)
    if isinstance(result, pa.RecordBatch):
        result = pa.Table.from_batches([result])
    if isinstance(result, list):
        if not all(isinstance(row, dict) for row in result):
            raise CallableResultError("a source callable's list must hold dicts (one per record)")
        result = pa.Table.from_pylist(result, schema=schema) if result else schema.empty_table()
    if not isinstance(result, pa.Table):
        raise CallableResultError(
            f"a source callable must return a pyarrow Table or a list of dicts, got {type(result).__name__}")
    return conform(result, schema)


def fingerprint(path: Path) -> dict[str, Any]:
    """The identity of one input file: resolved path, size and SHA-256 of its content."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return {"path": str(path), "size": path.stat().st_size, "sha256": digest.hexdigest()}
