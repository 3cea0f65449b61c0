"""Reading ingest sources (CSV, JSON lines, Parquet, or a callable's output) as Arrow
tables of exactly a topic's schema, and fingerprinting them for exactly-once ingest."""

from __future__ import annotations

import glob
import hashlib
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa

from .errors import CallableResultError, SourceNotFoundError, UnsupportedFormatError

FORMATS = ("csv", "jsonl", "parquet")
_SUFFIXES = {
    ".csv": "csv", ".tsv": "csv",
    ".json": "jsonl", ".jsonl": "jsonl", ".ndjson": "jsonl",
    ".parquet": "parquet", ".pq": "parquet",
}


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
    """``fmt`` if given, else from the file suffix (``.gz`` ignored)."""
    if fmt:
        if fmt not in FORMATS:
            raise UnsupportedFormatError(f"format {fmt!r} is not one of {FORMATS}")
        return fmt
    suffixes = [s for s in path.suffixes if s != ".gz"]
    if suffixes and suffixes[-1].lower() in _SUFFIXES:
        return _SUFFIXES[suffixes[-1].lower()]
    raise UnsupportedFormatError(f"cannot infer the format of {path.name}; pass format= one of {FORMATS}")


def read_file(path: Path, fmt: str, schema: pa.Schema) -> pa.Table:
    """``path`` as a table with exactly ``schema``'s columns, in order, cast to its types.
    Raises pyarrow errors for malformed files (the task fails; nothing is written)."""
    if fmt == "csv":
        from pyarrow import csv

        delimiter = "\t" if ".tsv" in path.suffixes else ","
        table = csv.read_csv(
            path,
            parse_options=csv.ParseOptions(delimiter=delimiter),
            convert_options=csv.ConvertOptions(
                column_types={f.name: f.type for f in schema}, include_columns=schema.names,
                include_missing_columns=True,
                # CSV cannot tell an empty string from a missing value: an empty cell is
                # null, in string columns too ("" quoted stays an empty string)
                strings_can_be_null=True, quoted_strings_can_be_null=False,
            ),
        )
    elif fmt == "jsonl":
        from pyarrow import json

        table = json.read_json(path, parse_options=json.ParseOptions(explicit_schema=schema,
                                                                     unexpected_field_behavior="ignore"))
    else:
        import pyarrow.parquet as pq

        table = pq.read_table(path)
    return conform(table, schema)


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
