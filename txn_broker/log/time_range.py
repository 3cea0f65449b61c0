"""Timestamps and dates every reader can show: years 1 to 9999, the range of Python's
``datetime`` (which the CLI, the Airflow operators, ``to_pylist()`` and pandas' object
columns go through). A send holding a value outside it is refused with
TimestampOutOfRangeError before anything is written (docs/semantics.md, "Timestamps").

A column with a time zone keeps a day away from both ends, so that its local time is a year
1..9999 wherever it is shown."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import TimestampOutOfRangeError

_FIRST = dt.datetime(1, 1, 1, tzinfo=dt.UTC)
_LAST = dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC)
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_PER_SECOND = {"s": 1, "ms": 1000, "us": 1_000_000, "ns": 1_000_000_000}
_DAY_S = 86_400


def _bounds(unit: str, zoned: bool) -> tuple[int, int]:
    """The smallest and largest value of a timestamp in ``unit`` (since the epoch, UTC)."""
    per = _PER_SECOND[unit]
    low_s = int((_FIRST - _EPOCH).total_seconds()) + (_DAY_S if zoned else 0)
    high_s = int((_LAST - _EPOCH).total_seconds()) - (_DAY_S if zoned else 0)
    return low_s * per, high_s * per + per - 1


def check_time_range(table: pa.Table, topic: str) -> None:
    """Raise TimestampOutOfRangeError naming the column and the value if a timestamp or
    date of ``table`` (nested ones included) lies outside years 1..9999."""
    for name, column in zip(table.column_names, table.columns, strict=True):
        for chunk in column.chunks:
            _check(chunk, name, topic)


def _check(array: pa.Array, path: str, topic: str) -> None:
    kind = array.type
    if pa.types.is_timestamp(kind):
        low, high = _bounds(kind.unit, kind.tz is not None)
        _check_ints(array.cast(pa.int64()), low, high, path, topic, f"timestamp[{kind.unit}]")
    elif pa.types.is_date32(kind):
        _check_ints(array.cast(pa.int32()).cast(pa.int64()), *_date_bounds(1), path, topic, "date32 (days)")
    elif pa.types.is_date64(kind):
        _check_ints(array.cast(pa.int64()), *_date_bounds(_DAY_S * 1000), path, topic, "date64 (ms)")
    elif pa.types.is_struct(kind):
        for i in range(kind.num_fields):
            _check(array.field(i), f"{path}.{kind.field(i).name}", topic)
    elif pa.types.is_map(kind):
        _check(array.keys, f"{path}.key", topic)
        _check(array.items, f"{path}.value", topic)
    elif pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        _check(array.flatten(), f"{path}[]", topic)


def _date_bounds(per_day: int) -> tuple[int, int]:
    first = (dt.date(1, 1, 1) - dt.date(1970, 1, 1)).days
    last = (dt.date(9999, 12, 31) - dt.date(1970, 1, 1)).days
    return first * per_day, last * per_day + (per_day - 1 if per_day > 1 else 0)


def _check_ints(values: pa.Array, low: int, high: int, path: str, topic: str, what: str) -> None:
    if len(values) == values.null_count:
        return
    extremes = pc.min_max(values)
    smallest, largest = extremes["min"].as_py(), extremes["max"].as_py()
    bad = smallest if smallest < low else largest if largest > high else None
    if bad is not None:
        raise TimestampOutOfRangeError(
            f"column {path!r} of topic {topic!r} holds {what} {bad}, outside years 1..9999 "
            f"({low}..{high}), which not every reader can show; nothing was written")
