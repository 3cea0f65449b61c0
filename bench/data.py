"""The data every case writes: generated once per run, deterministic, held in memory so
that no case times its own data generation."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

#: Kafka-shaped records: a 16-byte key and a binary value (cases 1, 2, 4, 5, 6, 7)
RECORD_SCHEMA = pa.schema([pa.field("key", pa.binary()), pa.field("value", pa.binary())])

#: a typical fact table (case 3, which compares table formats)
ORDERS_SCHEMA = pa.schema([
    pa.field("order_id", pa.int64()),
    pa.field("ordered_at", pa.timestamp("us", tz="UTC")),
    pa.field("customer_id", pa.int64()),
    pa.field("amount", pa.float64()),
    pa.field("currency", pa.string()),
    pa.field("status", pa.string()),
    pa.field("note", pa.string()),
])


def records(count: int, record_bytes: int = 1024, seed: int = 0) -> pa.Table:
    """``count`` records of about ``record_bytes`` each (key + value), incompressible."""
    rng = np.random.default_rng(seed)
    value_bytes = max(record_bytes - 16, 1)
    keys = rng.integers(0, 255, size=(count, 16), dtype=np.uint8)
    values = rng.integers(0, 255, size=(count, value_bytes), dtype=np.uint8)
    key_offsets = pa.array(np.arange(0, (count + 1) * 16, 16, dtype=np.int32))
    value_offsets = pa.array(np.arange(0, (count + 1) * value_bytes, value_bytes, dtype=np.int64))
    key = pa.BinaryArray.from_buffers(pa.binary(), count, [None, key_offsets.buffers()[1], pa.py_buffer(keys)])
    value = pa.LargeBinaryArray.from_buffers(pa.large_binary(), count,
                                             [None, value_offsets.buffers()[1], pa.py_buffer(values)])
    return pa.table([key, value.cast(pa.binary())], schema=RECORD_SCHEMA)


def record_chunks(total_bytes: int, chunk_bytes: int, record_bytes: int = 1024) -> list[pa.Table]:
    """``total_bytes`` of records in tables of about ``chunk_bytes`` (one transaction each)."""
    per_chunk = max(chunk_bytes // record_bytes, 1)
    chunks = max(round(total_bytes / (per_chunk * record_bytes)), 1)
    return [records(per_chunk, record_bytes, seed=i) for i in range(chunks)]


def orders(count: int, seed: int = 0) -> pa.Table:
    """``count`` order rows: ids, a timestamp, low-cardinality strings and a short note."""
    rng = np.random.default_rng(seed)
    start = np.datetime64("2024-01-01T00:00:00", "us")
    notes = np.array([f"note {i:05d} {'x' * (i % 24)}" for i in range(4096)], dtype=object)
    return pa.table({
        "order_id": pa.array(np.arange(count, dtype=np.int64)),
        "ordered_at": pa.array(start + rng.integers(0, 365 * 86_400_000_000, count).astype("timedelta64[us]"),
                               type=pa.timestamp("us")).cast(pa.timestamp("us", tz="UTC")),
        "customer_id": pa.array(rng.integers(1, 100_000, count, dtype=np.int64)),
        "amount": pa.array(np.round(rng.gamma(2.0, 40.0, count), 2)),
        "currency": pa.array(np.array(["EUR", "USD", "GBP", "CHF"], dtype=object)[rng.integers(0, 4, count)],
                             type=pa.string()),
        "status": pa.array(np.array(["new", "paid", "shipped", "returned"], dtype=object)[rng.integers(0, 4, count)],
                           type=pa.string()),
        "note": pa.array(notes[rng.integers(0, len(notes), count)], type=pa.string()),
    }, schema=ORDERS_SCHEMA)
