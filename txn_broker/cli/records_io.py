"""Records out of the broker as JSON-able values, for ``consume`` (the reading side, shared
with the Airflow operators, is :mod:`txn_broker.record_files`, public as
``txn_broker.read_records`` and ``open_records``).

Encodings (documented in docs/cli.md): binary values as base64 text (``--binary-encoding
utf8``: the bytes as UTF-8 text, undecodable bytes replaced); timestamps as ISO-8601 text
(``2024-05-01T12:00:00.123Z`` for zoned columns); dates and times as ISO-8601 text;
decimals as text (``"12.50"``); durations in seconds; floats that JSON cannot hold as the
strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"``; maps as a JSON object when the keys
are strings, else a list of ``[key, value]`` pairs.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import math
from collections.abc import Iterable
from typing import Any

import pyarrow as pa

# -- output -------------------------------------------------------------------------------


def _iso(moment: dt.datetime) -> str:
    zoned = moment.tzinfo is not None
    if zoned:
        moment = moment.astimezone(dt.UTC)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    if moment.microsecond % 1000 == 0:
        text += f".{moment.microsecond // 1000:03d}"
    else:
        text += f".{moment.microsecond:06d}"
    return text + ("Z" if zoned else "")


def json_value(value: Any, binary_encoding: str = "base64") -> Any:
    """One value of a record as a JSON-able value (module docstring)."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return value
    if isinstance(value, bytes):
        if binary_encoding == "utf8":
            return value.decode("utf-8", errors="replace")
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, dt.datetime):
        return _iso(value)
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, dict):
        return {str(k): json_value(v, binary_encoding) for k, v in value.items()}
    if isinstance(value, list) and value and all(isinstance(v, tuple) and len(v) == 2 for v in value):
        if all(isinstance(k, str) for k, _ in value):  # a map with string keys
            return {k: json_value(v, binary_encoding) for k, v in value}
        return [[json_value(k, binary_encoding), json_value(v, binary_encoding)] for k, v in value]
    if isinstance(value, list | tuple):
        return [json_value(v, binary_encoding) for v in value]
    return str(value)


def json_rows(table: pa.Table, binary_encoding: str = "base64") -> Iterable[dict[str, Any]]:
    """The table's rows as JSON-able dicts, columns in table order. A timestamp or date
    Python cannot hold (outside years 1..9999: refused at produce since issue 31, but older
    data may have them) is shown as its number in the column's unit rather than losing the
    rows around it."""
    for batch in table.to_batches():
        try:
            rows = batch.to_pylist()
        except (OverflowError, ValueError, pa.ArrowInvalid):
            rows = [_row_as_numbers(batch.slice(i, 1)) for i in range(batch.num_rows)]
        for row in rows:
            yield {name: json_value(value, binary_encoding) for name, value in row.items()}


def _row_as_numbers(row: pa.RecordBatch) -> dict[str, Any]:
    try:
        return dict(row.to_pylist()[0])
    except (OverflowError, ValueError, pa.ArrowInvalid):
        arrays = [column.view(pa.int32() if pa.types.is_date32(column.type) else pa.int64())
                  if pa.types.is_timestamp(column.type) or pa.types.is_date(column.type) else column
                  for column in row.columns]
        return dict(pa.RecordBatch.from_arrays(arrays, names=row.schema.names).to_pylist()[0])
