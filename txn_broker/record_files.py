"""Records from files: the one reader of JSON Lines, CSV and Parquet into a topic's schema,
used by ``txn-broker produce`` and by the Airflow ``ProduceToTopicOperator`` alike (public
as ``txn_broker.read_records`` / ``open_records``; output as JSON: ``txn_broker.cli.records_io``).

Files are read in chunks and cast to the topic's schema; a value that does not fit raises
SchemaMismatchError naming the line (JSON Lines), the column and the value. The rules:

* a column (CSV header, Parquet column, JSON field) the topic does not have is an error
  (SchemaMismatchError), never silently dropped; a missing column is null (an error for a
  non-nullable one);
* CSV: an empty cell is null, in string and binary columns too; a quoted ``""`` stays an
  empty string. ``.tsv`` files are tab-separated; ``.gz`` files are decompressed;
* a malformed file is InvalidInputError (exit 2 in the CLI) and nothing of it is sent: a JSON
  Lines line longer than ``max_line_bytes`` (:data:`LINE_BYTES_PER_MESSAGE_BYTE` times the
  topic's ``max.message.bytes``; read no further than that), JSON nested deeper than Python
  can parse or with an integer of more than 4300 digits, a CSV header naming a column twice,
  a corrupt ``.gz`` file;

Encodings (documented in docs/cli.md):

* binary values: base64 text (``--binary-encoding utf8``: the bytes as UTF-8 text, for
  topics whose binary columns hold text; undecodable bytes are replaced when reading);
* timestamps: ISO-8601 text (``2024-05-01T12:00:00.123Z`` for zoned columns); on input,
  also integers in the column's unit since the epoch;
* dates and times: ISO-8601 text; decimals: text (``"12.50"``); durations: seconds;
* floats that JSON cannot hold: the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"``;
* maps: a JSON object when the keys are strings, else a list of ``[key, value]`` pairs.
"""

from __future__ import annotations

import base64
import binascii
import itertools
import json
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pyarrow as pa

from .config import Settings
from .errors import InvalidInputError, SchemaMismatchError

FORMATS = ("jsonl", "csv", "parquet")
BINARY_ENCODINGS = ("base64", "utf8")
_EXTENSIONS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".csv": "csv", ".tsv": "csv",
               ".parquet": "parquet", ".pq": "parquet"}
#: a JSON Lines line may be this many times a topic's max.message.bytes (a record's JSON is
#: larger than its stored size: base64 for binary values, escapes, names of the columns)
LINE_BYTES_PER_MESSAGE_BYTE = 8
#: the bound on a line when no topic's max.message.bytes is given
DEFAULT_MAX_LINE_BYTES = LINE_BYTES_PER_MESSAGE_BYTE * Settings().max_message_bytes
#: what reading a damaged file raises (a corrupt or truncated .gz: BadGzipFile, EOFError, zlib.error)
#: (and a Parquet file damaged past its footer: an ArrowException while its pages are read)
_READ_ERRORS = (OSError, EOFError, zlib.error, pa.ArrowException)
_CONVERSION_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, ValueError,
                      OverflowError)


def guess_format(path: str) -> str | None:
    """The format a file name implies (``.jsonl``, ``.ndjson``, ``.json``, ``.csv``, ``.tsv``,
    ``.parquet``, ``.pq``, each optionally followed by ``.gz``), None when it implies none."""
    suffixes = [s.lower() for s in Path(path).suffixes if s.lower() != ".gz"]
    return _EXTENSIONS.get(suffixes[-1]) if suffixes else None


def _is_binary(t: pa.DataType) -> bool:
    return pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t) \
        or pa.types.is_binary_view(t)


def _is_nested(t: pa.DataType) -> bool:
    return pa.types.is_nested(t)


@dataclass
class Source:
    """An input file opened for reading in chunks. ``total_bytes`` / ``total_records``:
    what progress is measured against (None when unknown, e.g. standard input)."""

    name: str
    format: str
    schema: pa.Schema
    stream: IO[bytes]
    total_bytes: int | None
    total_records: int | None
    binary_encoding: str = "base64"
    chunk_rows: int = 20_000
    #: the CSV delimiter (a tab for ``.tsv`` files)
    delimiter: str = ","
    #: the longest JSON Lines line read (longer: InvalidInputError)
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES

    def chunks(self) -> Iterator[tuple[pa.Table, int]]:
        """``(table of the topic's schema, bytes read so far)`` per chunk."""
        if self.format == "jsonl":
            return self._readable(_read_jsonl(self))
        if self.format == "csv":
            return self._readable(_read_csv(self))
        return self._readable(_read_parquet(self))

    def _readable(self, chunks: Iterator[tuple[pa.Table, int]]) -> Iterator[tuple[pa.Table, int]]:
        """``chunks`` with a damaged file's errors as InvalidInputError."""
        try:
            yield from chunks
        except _READ_ERRORS as error:
            raise InvalidInputError(f"cannot read {self.name}: {type(error).__name__}: {_short(error)}") from None

    def close(self) -> None:
        if self.stream is not _stdin():
            self.stream.close()


def _stdin() -> IO[bytes]:
    import sys

    return sys.stdin.buffer


def open_source(path: str, fmt: str, schema: pa.Schema, binary_encoding: str = "base64",
                max_message_bytes: int | None = None) -> Source:
    """Open ``path`` (``-``: standard input) as ``fmt``. InvalidInputError if unreadable.
    A ``.gz`` file is decompressed (its progress then has no known total).
    ``max_message_bytes``: the topic's, which bounds a JSON Lines line."""
    max_line = LINE_BYTES_PER_MESSAGE_BYTE * max_message_bytes if max_message_bytes else DEFAULT_MAX_LINE_BYTES
    if path == "-":
        return Source("<stdin>", fmt, schema, _stdin(), None, None, binary_encoding, max_line_bytes=max_line)
    suffixes = [s.lower() for s in Path(path).suffixes]
    delimiter = "\t" if ".tsv" in suffixes else ","
    try:
        if suffixes and suffixes[-1] == ".gz":
            import gzip

            stream: IO[bytes] = gzip.open(path, "rb")  # type: ignore[assignment]  # noqa: SIM115
            size = None
        else:
            stream = open(path, "rb")  # noqa: SIM115  # closed by Source.close
            size = os.fstat(stream.fileno()).st_size
    except OSError as error:
        raise InvalidInputError(f"cannot read {path}: {error.strerror or error}") from None
    return Source(path, fmt, schema, stream, size, None, binary_encoding, delimiter=delimiter,
                  max_line_bytes=max_line)


def read_records(path: str | os.PathLike[str], schema: pa.Schema, fmt: str | None = None,
                 binary_encoding: str = "base64", max_message_bytes: int | None = None) -> pa.Table:
    """The whole file as one table of exactly ``schema`` (the rules of this module).
    ``fmt``: ``jsonl``, ``csv`` or ``parquet``, else from the file name. Raises
    InvalidInputError (unreadable, malformed, unknown format) or SchemaMismatchError."""
    name = os.fspath(path)
    fmt = fmt or guess_format(name)
    if fmt not in FORMATS:
        raise InvalidInputError(f"cannot tell the format of {name}: give one of {', '.join(FORMATS)}")
    source = open_source(name, fmt, schema, binary_encoding, max_message_bytes)
    try:
        tables = [table for table, _ in source.chunks()]
    finally:
        source.close()
    return pa.concat_tables(tables) if tables else schema.empty_table()


# -- converting values to the topic's types -------------------------------------------------


def _decode_binary(value: Any, encoding: str) -> Any:
    if value is None or isinstance(value, bytes):
        return value
    if not isinstance(value, str):
        raise TypeError(f"expected {encoding} text, got {type(value).__name__}")
    if encoding == "utf8":
        return value.encode("utf-8")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("not valid base64 (use --binary-encoding utf8 for plain text)") from None


def _prepare(value: Any, type_: pa.DataType, binary_encoding: str) -> Any:
    """A JSON value of a nested type as the Python value Arrow takes: binary leaves
    decoded, maps as pairs, text leaves (timestamps, decimals, ...) parsed."""
    if value is None:
        return None
    if _is_binary(type_):
        return _decode_binary(value, binary_encoding)
    if pa.types.is_list(type_) or pa.types.is_large_list(type_) or pa.types.is_fixed_size_list(type_):
        if not isinstance(value, list):
            raise TypeError(f"expected a JSON array, got {type(value).__name__}")
        return [_prepare(v, type_.value_type, binary_encoding) for v in value]
    if pa.types.is_map(type_):
        pairs = value.items() if isinstance(value, dict) else value
        if not isinstance(value, dict | list) or not all(isinstance(p, list | tuple) and len(p) == 2
                                                         for p in pairs):
            raise TypeError("expected a JSON object or a list of [key, value] pairs")
        return [(_prepare(k, type_.key_type, binary_encoding), _prepare(v, type_.item_type, binary_encoding))
                for k, v in pairs]
    if pa.types.is_struct(type_):
        if not isinstance(value, dict):
            raise TypeError(f"expected a JSON object, got {type(value).__name__}")
        names = [type_.field(i).name for i in range(type_.num_fields)]
        extra = sorted(set(value) - set(names))
        if extra:
            raise ValueError(f"no field(s) {extra} in {type_}")
        return {type_.field(i).name: _prepare(value.get(type_.field(i).name), type_.field(i).type, binary_encoding)
                for i in range(type_.num_fields)}
    if isinstance(value, str) and not (pa.types.is_string(type_) or pa.types.is_large_string(type_)):
        return pa.array([value], pa.string()).cast(type_)[0].as_py()
    return value


def _convert(values: list[Any], type_: pa.DataType, binary_encoding: str) -> pa.Array:
    if _is_binary(type_):
        return pa.array([_decode_binary(v, binary_encoding) for v in values], type=type_)
    if _is_nested(type_):
        return pa.array([_prepare(v, type_, binary_encoding) for v in values], type=type_)
    try:
        return pa.array(values, type=type_)
    except _CONVERSION_ERRORS:
        if _is_nested(type_) or not all(v is None or isinstance(v, str | int | float | bool) for v in values):
            raise
        # text or numbers Arrow can parse: "2024-05-01T12:00:00Z", "NaN", "12.50", 1.0 -> int
        text = [None if v is None else v if isinstance(v, str) else json.dumps(v) for v in values]
        try:
            return pa.array(text, type=pa.string()).cast(type_)
        except _CONVERSION_ERRORS:
            if len(values) == 1:
                raise
        # a mix, e.g. ISO text and epoch numbers in one timestamp column: value by value
        return pa.concat_arrays([_convert([v], type_, binary_encoding) for v in values])


def _short(error: Exception) -> str:
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return text if len(text) <= 240 else text[:239] + "…"


def _column(values: list[Any], field: pa.Field, lines: list[int], source: Source) -> pa.Array:
    try:
        array = _convert(values, field.type, source.binary_encoding)
    except _CONVERSION_ERRORS as error:
        for line, value in zip(lines, values, strict=True):  # find the culprit for the message
            try:
                _convert([value], field.type, source.binary_encoding)
            except _CONVERSION_ERRORS as culprit:
                shown = json.dumps(value, ensure_ascii=False, default=str)
                raise SchemaMismatchError(
                    f"{source.name} line {line}: column {field.name!r} ({field.type}) cannot hold "
                    f"{shown[:80]}: {_short(culprit)}") from None
        raise SchemaMismatchError(f"{source.name}: column {field.name!r} ({field.type}): {_short(error)}") from None
    if not field.nullable and array.null_count:
        line = lines[next(i for i, v in enumerate(values) if v is None)]
        raise SchemaMismatchError(f"{source.name} line {line}: column {field.name!r} is not nullable but has no value")
    return array


def _rows_to_table(rows: list[tuple[int, dict[str, Any]]], source: Source) -> pa.Table:
    schema = source.schema
    names = set(schema.names)
    for line, row in rows:
        extra = set(row) - names
        if extra:
            raise SchemaMismatchError(
                f"{source.name} line {line}: the topic has no column(s) {sorted(extra)}; its columns: "
                f"{schema.names}")
    lines = [line for line, _ in rows]
    arrays = [_column([row.get(f.name) for _, row in rows], f, lines, source) for f in schema]
    return pa.Table.from_arrays(arrays, schema=schema)


# -- readers ------------------------------------------------------------------------------


def _read_jsonl(source: Source) -> Iterator[tuple[pa.Table, int]]:
    rows: list[tuple[int, dict[str, Any]]] = []
    done = 0
    limit = source.max_line_bytes
    for line_no in itertools.count(1):
        raw = source.stream.readline(limit + 1)  # never more than the bound into memory
        if not raw:
            break
        if len(raw) > limit:
            raise InvalidInputError(
                f"{source.name} line {line_no} is longer than {limit} bytes ({LINE_BYTES_PER_MESSAGE_BYTE} times "
                "the topic's max.message.bytes): not a record this topic can hold")
        done += len(raw)
        text = raw.strip()
        if not text:
            continue
        try:
            obj = json.loads(text)
        except (ValueError, UnicodeDecodeError) as error:  # JSONDecodeError, an integer of > 4300 digits
            raise InvalidInputError(f"{source.name} line {line_no}: not valid JSON: {_short(error)}") from None
        except RecursionError:
            raise InvalidInputError(f"{source.name} line {line_no}: JSON nested too deeply") from None
        if not isinstance(obj, dict):
            raise SchemaMismatchError(
                f"{source.name} line {line_no}: expected a JSON object, got {type(obj).__name__}")
        rows.append((line_no, obj))
        if len(rows) >= source.chunk_rows:
            yield _rows_to_table(rows, source), done
            rows = []
    if rows:
        yield _rows_to_table(rows, source), done


def _position(stream: IO[bytes]) -> int:
    try:
        return stream.tell()
    except (OSError, ValueError):
        return 0


def _fill(present: dict[str, pa.Array], n: int, source: Source) -> pa.Table:
    arrays = []
    for f in source.schema:
        column = present.get(f.name)
        arrays.append(pa.nulls(n, type=f.type) if column is None else column)
    return pa.Table.from_arrays(arrays, schema=source.schema)


def _check_columns(found: list[str], source: Source, what: str) -> None:
    extra = [name for name in found if name not in source.schema.names]
    if extra:
        raise SchemaMismatchError(
            f"{source.name}: {what} {extra} are not columns of the topic; its columns: {source.schema.names}")
    missing = [f.name for f in source.schema if f.name not in found and not f.nullable]
    if missing:
        raise SchemaMismatchError(f"{source.name}: no {what[:-1]} for the non-nullable column(s) {missing}")


def _read_csv(source: Source) -> Iterator[tuple[pa.Table, int]]:
    import pyarrow.csv as pacsv

    types = {f.name: (pa.string() if _is_binary(f.type) else f.type) for f in source.schema
             if not _is_nested(f.type)}
    try:
        reader = pacsv.open_csv(source.stream, read_options=pacsv.ReadOptions(block_size=4 << 20),
                                parse_options=pacsv.ParseOptions(delimiter=source.delimiter),
                                # CSV cannot tell an empty string from a missing value: an
                                # empty cell is null in every column; a quoted "" stays ""
                                convert_options=pacsv.ConvertOptions(column_types=types, strings_can_be_null=True,
                                                                     quoted_strings_can_be_null=False))
        found = reader.schema.names  # a header that is not UTF-8 fails here (UnicodeDecodeError)
    except _CONVERSION_ERRORS as error:
        raise SchemaMismatchError(f"{source.name}: {_short(error)}") from None
    twice = sorted({name for name in found if found.count(name) > 1})
    if twice:
        raise InvalidInputError(f"{source.name}: the CSV header names column(s) {twice} more than once")
    _check_columns(found, source, "CSV columns")
    for f in source.schema:
        if f.name in found and _is_nested(f.type):
            raise SchemaMismatchError(
                f"{source.name}: CSV cannot hold column {f.name!r} of type {f.type}; use jsonl or parquet")
    fields = {f.name: f for f in source.schema}
    while True:
        try:
            batch = reader.read_next_batch()
        except StopIteration:
            return
        except _CONVERSION_ERRORS as error:
            raise SchemaMismatchError(f"{source.name}: {_short(error)}") from None
        present = {}
        for name in found:
            column = batch.column(name)
            field = fields[name]
            if _is_binary(field.type):
                lines = list(range(2, 2 + batch.num_rows))  # approximate: the header is line 1
                column = _column(column.to_pylist(), field, lines, source)
            elif not field.nullable and column.null_count:
                raise SchemaMismatchError(f"{source.name}: column {name!r} is not nullable but has empty values")
            present[name] = column
        yield _fill(present, batch.num_rows, source), _position(source.stream)


def _read_parquet(source: Source) -> Iterator[tuple[pa.Table, int]]:
    import pyarrow.parquet as pq

    stream: Any = source.stream
    if source.stream is _stdin():
        stream = pa.BufferReader(source.stream.read())
    try:
        parquet = pq.ParquetFile(stream)
    except _CONVERSION_ERRORS as error:
        raise InvalidInputError(f"{source.name} is not a Parquet file: {_short(error)}") from None
    source.total_records = parquet.metadata.num_rows
    found = parquet.schema_arrow.names
    _check_columns(found, source, "Parquet columns")
    for batch in parquet.iter_batches(batch_size=source.chunk_rows):
        present = {}
        for f in source.schema:
            if f.name not in found:
                continue
            column = batch.column(f.name)
            if not column.type.equals(f.type):
                try:
                    column = column.cast(f.type, safe=True)
                except _CONVERSION_ERRORS as error:
                    raise SchemaMismatchError(
                        f"{source.name}: column {f.name!r} is {column.type} in the file and cannot be cast "
                        f"to the topic's {f.type}: {_short(error)}") from None
            if not f.nullable and column.null_count:
                raise SchemaMismatchError(f"{source.name}: column {f.name!r} is not nullable but has nulls")
            present[f.name] = column
        yield _fill(present, batch.num_rows, source), _position(source.stream)
